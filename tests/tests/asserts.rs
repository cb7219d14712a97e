//! The program's own checks (lower/asserts.rs) run: `one_hot`'s `_assert_async` on the
//! class values fails the call with its message where PyTorch raises, and a
//! `torch._check` on a data-dependent value (`_assert_scalar` on `item()`) likewise, each
//! with `AOTC_ERR_ASSERT`.

use aotc_abi::status;
use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{check_call, compile, compile_json, fixture, program_json, recorded, tolerance};
use serde_json::json;

fn int64(shape: &[i64], values: &[i64]) -> Value {
    let mut t = Tensor::zeros(aotc_abi::DType::I64, shape);
    t.data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Value::Tensor(t)
}

#[test]
fn an_assert_on_data_fails_the_call_with_its_message() {
    let dir = fixture("ops/nn.functional.one_hot__int64__0");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut m = Model::load(&so, Device::Cpu).unwrap();
    let (inputs, expected) = recorded(&dir, 0);
    check_call(&mut m, &inputs, &expected, tolerance(&dir), "the recorded call");
    for (class, message) in
        [(10, "Class values must be smaller than num_classes"), (-1, "Class values must be non-negative")]
    {
        let e = m.run(&mut [int64(&[], &[class])]).expect_err("an invalid class value");
        assert!(e.message.contains(message), "class {class}: {}", e.message);
        assert_eq!(e.code, status::ASSERT, "{}", e.message);
    }
    // A failed assert leaves the instance usable.
    check_call(&mut m, &inputs, &expected, tolerance(&dir), "after the failures");
}

/// `x.view(-1)[i.item()]` (take's sample) with export's check `u0 >= -1` made `u0 >= 0`:
/// -1 lies in the range export recorded for u0 ([-1, 0], checked when it is bound) but
/// fails the program's own check, which must run.
#[test]
fn a_check_on_an_item_value_fails_the_call() {
    let dir = fixture("ops/take__float32__2");
    let mut j = program_json(&dir.join("model.pt2"));
    let graph = &mut j["graph_module"]["graph"];
    graph["sym_bool_values"]["ge"]["as_expr"]["expr_str"] =
        json!("GreaterThan(Symbol('u0', integer=True), Integer(0))");
    let nodes = graph["nodes"].as_array_mut().unwrap();
    let assert = nodes.iter_mut().find(|n| n["inputs"][0]["arg"]["as_sym_bool"]["as_name"] == "ge").unwrap();
    assert["inputs"][1]["arg"]["as_string"] = json!("index must be >= 0");
    let (_tmp, so) = compile_json(&j, &[]);
    let mut m = Model::load(so.expect("compiles"), Device::Cpu).unwrap();
    let (mut inputs, expected) = recorded(&dir, 0);
    check_call(&mut m, &inputs, &expected, tolerance(&dir), "the recorded call (index 0)");
    inputs[1] = int64(&[], &[-1]);
    let e = m.run(&mut inputs).expect_err("an index the program's check refuses");
    assert_eq!(e.code, status::ASSERT, "{}", e.message);
    assert!(e.message.contains("index must be >= 0"), "{}", e.message);
}
