//! Two inputs that share one dynamic dimension: pytree_io with the batch of both `a` and
//! `b` turned into the symbol s0 (range 1..=64), compiled from a bare model.json plus a
//! safetensors weights file.

use aotc_abi::status;
use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{compile_json, fixture, ones, program_json};

#[test]
fn inputs_sharing_a_symbol_must_agree() {
    let mut j = program_json(&fixture("pytree_io").join("model.pt2"));
    let s0 = serde_json::json!({"as_expr": {"expr_str": "Symbol('s0', positive=True, integer=True)", "hint": {"as_int": 2}}});
    for t in ["inputs_a", "inputs_b", "mm", "mul", "add"] {
        j["graph_module"]["graph"]["tensor_values"][t]["sizes"][0] = s0.clone();
    }
    j["range_constraints"] = serde_json::json!({"s0": {"min_val": 1, "max_val": 64}});

    let identity: Vec<f32> = (0..16).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect();
    let (_dir, so) = compile_json(&j, &[("w".into(), &Tensor::from_f32(&[4, 4], &identity))]);
    let so = so.expect("compile");

    let mut m = Model::load(&so, Device::Cpu).unwrap();
    let e = m.run(&mut [ones(&[5, 4]), ones(&[6, 4]), Value::Float(3.0)]).unwrap_err();
    assert_eq!(e.code, status::SHAPE);
    assert!(e.message.contains("input 1 ('inputs_b'): dimension 0 is 6, but input 0 ('inputs_a') dimension 0 set the shared dynamic dimension s0 to 5"), "{}", e.message);
    // Agreeing sizes work for any batch in range: sum = a @ I + 3 * b = 1 + 3.
    let out = m.run(&mut [ones(&[5, 4]), ones(&[5, 4]), Value::Float(3.0)]).unwrap();
    assert_eq!(out[0].shape, vec![5, 4]);
    assert!(out[0].to_f64_vec().iter().all(|&v| v == 4.0));
    assert_eq!(m.run(&mut [ones(&[65, 4]), ones(&[65, 4]), Value::Float(3.0)]).unwrap_err().code, status::RANGE);
}
