//! examples/c/run_model.c, compiled with cc against aotc.h only, runs a library the test
//! compiles and prints the same numbers as the Rust loader.

use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{build_c_example, compile, fixture};
use std::process::Command;

#[test]
fn c_example_runs_a_compiled_library() {
    let (dir, so) = compile(&fixture("mlp_buffer_mutation").join("model.pt2"));
    let exe = build_c_example(dir.path());
    let run = Command::new(&exe).arg(&so).arg("2").output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("abi version 1"));
    assert!(stdout.contains("buffer calls: 2"), "{stdout}");
    assert!(stdout.contains("wrong input count -> status 2: expected 1 inputs (x), got 2"), "{stdout}");
    assert!(stdout.contains("null model -> status 1: model is a null pointer"), "{stdout}");

    // The same inputs through the Rust loader give the same second-call outputs.
    let mut m = Model::load(&so, Device::Cpu).unwrap();
    let x: Vec<f32> = (0..64).map(|i| 0.01f32 * i as f32).collect();
    m.run(&mut [Value::Tensor(Tensor::from_f32(&[4, 16], &x))]).unwrap();
    let out = m.run(&mut [Value::Tensor(Tensor::from_f32(&[4, 16], &x))]).unwrap();
    let line = stdout.lines().find(|l| l.starts_with("call 1 output 0:")).expect("second call printed");
    let printed: Vec<f32> = line.split(':').nth(1).unwrap().split_whitespace().map(|v| v.parse().unwrap()).collect();
    let expected: Vec<f32> = out[0].to_f64_vec().iter().map(|&v| v as f32).collect();
    assert_eq!(printed, expected);
}
