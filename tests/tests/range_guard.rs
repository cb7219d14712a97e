//! A size equality that the symbols' ranges cannot decide is a run-time guard, not a
//! compile error: pytree_io with `b * 3` replaced by `b.view(s0, 4)` where `a` has s0
//! rows and `b` has s1 rows (both in 1..=64). The view keeps the element count only when
//! s1 == s0, which the library checks on every call.

use aotc_abi::status;
use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{compile_json, fixture, ones, program_json};
use serde_json::json;

fn symbol(name: &str, hint: i64) -> serde_json::Value {
    json!({"as_expr": {"expr_str": format!("Symbol('{name}', positive=True, integer=True)"), "hint": {"as_int": hint}}})
}

/// The edited pytree_io program compiled with `w` the 4x4 identity, and loaded.
fn load_with_identity_weight(program: &serde_json::Value, expect: &str) -> (tempfile::TempDir, Model) {
    let identity: Vec<f32> = (0..16).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect();
    let (dir, so) = compile_json(program, &[("w".into(), &Tensor::from_f32(&[4, 4], &identity))]);
    let model = Model::load(so.expect(expect), Device::Cpu).unwrap();
    (dir, model)
}

#[test]
fn an_equality_the_ranges_cannot_decide_is_guarded_at_run_time() {
    let mut j = program_json(&fixture("pytree_io").join("model.pt2"));
    let graph = &mut j["graph_module"]["graph"];
    for t in ["inputs_a", "mm", "mul", "add"] {
        graph["tensor_values"][t]["sizes"][0] = symbol("s0", 2);
    }
    graph["tensor_values"]["inputs_b"]["sizes"][0] = symbol("s1", 2);
    graph["sym_int_values"]["rows"] = symbol("s0", 2);
    let mul = graph["nodes"].as_array_mut().unwrap().iter_mut().find(|n| n["target"] == "torch.ops.aten.mul.Tensor");
    let mul = mul.unwrap();
    mul["target"] = json!("torch.ops.aten.view.default");
    let kind = mul["inputs"][0]["kind"].clone();
    mul["inputs"] = json!([
        {"name": "self", "arg": {"as_tensor": {"name": "inputs_b"}}, "kind": kind},
        {"name": "size", "arg": {"as_sym_ints": [{"as_name": "rows"}, {"as_int": 4}]}, "kind": kind},
    ]);
    j["range_constraints"] = json!({"s0": {"min_val": 1, "max_val": 64}, "s1": {"min_val": 1, "max_val": 64}});

    let (_dir, mut m) = load_with_identity_weight(&j, "an equality the ranges leave open compiles to a guard");
    // Agreeing sizes: add = a @ I + b = 2.
    let out = m.run(&mut [ones(&[5, 4]), ones(&[5, 4]), Value::Float(3.0)]).unwrap();
    assert_eq!(out[0].shape, vec![5, 4]);
    assert!(out[0].to_f64_vec().iter().all(|&v| v == 2.0));
    let e = m.run(&mut [ones(&[5, 4]), ones(&[6, 4]), Value::Float(3.0)]).unwrap_err();
    assert_eq!(e.code, status::SHAPE);
    assert!(
        e.message.contains("node 'mul'") && e.message.contains("a view keeps the number of elements"),
        "{}",
        e.message
    );
}

/// A broadcast of two sizes the ranges leave open (`a @ w + b * 3` with `a` of s0 rows and
/// `b` of s1 rows) is compiled as torch.export traced it, the sizes equal, and guarded:
/// a call where they differ fails naming the node instead of reading out of bounds.
#[test]
fn a_broadcast_the_ranges_cannot_decide_is_guarded_at_run_time() {
    let mut j = program_json(&fixture("pytree_io").join("model.pt2"));
    let graph = &mut j["graph_module"]["graph"];
    for t in ["inputs_a", "mm", "add"] {
        graph["tensor_values"][t]["sizes"][0] = symbol("s0", 2);
    }
    for t in ["inputs_b", "mul"] {
        graph["tensor_values"][t]["sizes"][0] = symbol("s1", 2);
    }
    j["range_constraints"] = json!({"s0": {"min_val": 2, "max_val": 64}, "s1": {"min_val": 2, "max_val": 64}});

    let (_dir, mut m) = load_with_identity_weight(&j, "a broadcast the ranges leave open compiles to a guard");
    let out = m.run(&mut [ones(&[5, 4]), ones(&[5, 4]), Value::Float(3.0)]).unwrap();
    assert_eq!(out[0].shape, vec![5, 4]);
    assert!(out[0].to_f64_vec().iter().all(|&v| v == 4.0), "a @ I + b * 3 = 4");
    let e = m.run(&mut [ones(&[5, 4]), ones(&[6, 4]), Value::Float(3.0)]).unwrap_err();
    assert_eq!(e.code, status::SHAPE);
    assert!(e.message.contains("node 'add'") && e.message.contains("broadcast"), "{}", e.message);
}
