//! torch.export's control flow (lower/control_flow.rs): `torch.cond` on a data-dependent
//! predicate, whose two calls take the two branches, and `map` over a leading dimension.

use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{check_call, check_fixture, compile, compile_json, fixture, program_json, recorded, tolerance};
use serde_json::json;

/// Both recorded calls of cond_data_dependent: `x.sum() > 0` picks `relu(a(x)) * 2` in
/// call 0 and `tanh(b(x)) - 1` in call 1, each matching PyTorch.
#[test]
fn a_cond_on_data_takes_each_branch_at_run_time() {
    let dir = fixture("raw/cond_data_dependent");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut m = Model::load(&so, Device::Cpu).unwrap();
    let sums: Vec<f64> = (0..2)
        .map(|call| {
            let (inputs, expected) = recorded(&dir, call);
            let Value::Tensor(x) = &inputs[0] else { panic!("x is a tensor") };
            check_call(&mut m, &inputs, &expected, tolerance(&dir), &format!("call {call}"));
            x.to_f64_vec().iter().sum()
        })
        .collect();
    assert!(sums[0] > 0.0 && sums[1] <= 0.0, "the calls should take different branches: sums {sums:?}");
}

#[test]
fn map_over_the_leading_dimension_matches_pytorch() {
    check_fixture("raw/hop_map");
}

/// A cond whose branches disagree on an output's shape is refused, naming the node.
#[test]
fn branches_of_different_shapes_are_refused() {
    let mut j = program_json(&fixture("raw/cond_data_dependent").join("model.pt2"));
    let nodes = j["graph_module"]["graph"]["nodes"].as_array_mut().unwrap();
    let cond = nodes.iter_mut().find(|n| n["target"] == "torch.ops.higher_order.cond").unwrap();
    let on_false = &mut cond["inputs"][2]["arg"]["as_graph"]["graph"];
    // The false branch returns its bias ([8]) instead of tanh(b(x)) - 1 ([3, 8]).
    on_false["outputs"] = json!([{"as_tensor": {"name": "p_b_bias"}}]);
    let weights = weights_of(&fixture("raw/cond_data_dependent"));
    let refs: Vec<(String, &Tensor)> = weights.iter().map(|(k, t)| (k.clone(), t)).collect();
    let (_tmp, so) = compile_json(&j, &refs);
    let e = so.expect_err("branches of different shapes").to_string();
    assert!(e.contains("node 'cond'") && e.contains("the branches give float32[3, 8] and float32[8]"), "{e}");
}

fn weights_of(dir: &std::path::Path) -> Vec<(String, Tensor)> {
    let src = aotc::frontend::load(&dir.join("model.pt2"), None).expect("the archive");
    src.weights
        .into_iter()
        .map(|(k, t)| (k, Tensor { dtype: t.dtype, shape: t.sizes, data: t.data.bytes().unwrap().into_owned() }))
        .collect()
}

/// `torch.cond(x.shape[0] > 4, ...)` with a dynamic batch: the predicate is computed from
/// the call's sizes (batch 3 takes the false branch, batch 6 the true one).
#[test]
fn a_cond_on_sizes_takes_each_branch_at_run_time() {
    check_fixture("raw/cond_on_sizes");
}
