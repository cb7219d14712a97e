//! Real torch.export archives, compiled and run through the Rust API, compared with the
//! outputs PyTorch recorded.

use aotc_tests::check_fixture;

#[test]
fn mlp_buffer_mutation_state_carries_over_calls() {
    // Two calls: the second must see calls == 2 (BUFFER_MUTATION).
    assert_eq!(check_fixture("mlp_buffer_mutation"), 2);
}

#[test]
fn dynamic_batch_mlp_serves_batch_3_17_1_from_one_library() {
    assert_eq!(check_fixture("dynamic_batch_mlp"), 3);
}

#[test]
fn pytree_io_dict_input_scalar_input_nested_output() {
    assert_eq!(check_fixture("pytree_io"), 3);
}

#[test]
fn user_input_mutation_writes_back_into_caller_tensors() {
    // One output plus two mutated inputs.
    assert_eq!(check_fixture("user_input_mutation"), 3);
}

#[test]
fn bench_mlp_slim_gemm_bound() {
    assert_eq!(check_fixture("bench_mlp_slim"), 1);
}

#[test]
fn transformer_block_causal_attention() {
    assert_eq!(check_fixture("transformer_block"), 1);
}

#[test]
fn namedtuple_output_runs_and_carries_its_field_names() {
    assert_eq!(check_fixture("namedtuple_output"), 2);
    let (_d, so) = aotc_tests::compile(&aotc_tests::fixture("namedtuple_output").join("model.pt2"));
    let m = aotc_runtime::Model::load(&so, aotc_runtime::Device::Cpu).unwrap();
    let meta: serde_json::Value = serde_json::from_str(m.metadata_json()).unwrap();
    assert_eq!(meta["namedtuple_fields"]["aotc_tests.Pair"], serde_json::json!(["total", "scaled"]));
}
