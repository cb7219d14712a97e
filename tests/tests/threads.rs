//! Threads: a call split across the library's worker pool gives PyTorch's results, and
//! instances called at once from several threads share the pool without mixing up work.

use aotc_runtime::{Device, Model, Tensor};
use aotc_tests::{compare, compile, fixture, tolerance};

/// The inputs and PyTorch's outputs of call 0 of fixture `name`.
fn recorded(name: &str) -> (std::path::PathBuf, Vec<aotc_runtime::Value>, Vec<(String, Tensor)>) {
    let dir = fixture(name);
    let file = dir.join("inputs_0.safetensors");
    let (tensors, scalars) = aotc::tensor_io::read(&file).expect("inputs");
    let inputs = aotc::tensor_io::read_inputs(&file, tensors.len() + scalars.len()).expect("inputs");
    let (expected, _) = aotc::tensor_io::read(&dir.join("expected_0.safetensors")).expect("expected outputs");
    (dir, inputs, expected.into_iter().collect())
}

fn check(model: &mut Model, inputs: &[aotc_runtime::Value], expected: &[(String, Tensor)], tol: (f64, f64), what: &str) {
    let outputs = model.run(&mut inputs.to_vec()).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (k, want) in expected {
        let got = &outputs[k.parse::<usize>().expect("output index")];
        compare(&format!("{what} output {k}"), want, got, tol.0, tol.1).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn one_two_and_four_threads_give_pytorchs_results() {
    // Large enough for the driver to split its kernels (GEMMs and pointwise passes).
    for name in ["bench_mlp", "bench_convnet", "transformer_block"] {
        let (dir, inputs, expected) = recorded(name);
        let (_tmp, so) = compile(&dir.join("model.pt2"));
        for threads in [1, 2, 4] {
            let mut model = Model::load_with_threads(&so, Device::Cpu, threads).expect("load");
            check(&mut model, &inputs, &expected, tolerance(&dir), &format!("{name} on {threads} threads"));
        }
    }
}

#[test]
fn two_instances_called_at_once_from_two_threads_stay_correct() {
    let (dir, inputs, expected) = recorded("bench_convnet");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let tol = tolerance(&dir);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (so, inputs, expected) = (&so, &inputs, &expected);
            s.spawn(move || {
                let mut model = Model::load_with_threads(so, Device::Cpu, 2).expect("load");
                for call in 0..20 {
                    check(&mut model, inputs, expected, tol, &format!("instance {t} call {call}"));
                }
            });
        }
    });
}
