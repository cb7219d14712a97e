//! Threads: a call split across the library's worker pool gives PyTorch's results, and
//! instances called at once from several threads share the pool without mixing up work.

use aotc_runtime::{Device, Model};
use aotc_tests::{check_call, compile, fixture, recorded, tolerance};

#[test]
fn one_two_and_four_threads_give_pytorchs_results() {
    // Large enough for the driver to split its kernels (GEMMs and pointwise passes).
    for name in ["bench_mlp_slim", "bench_convnet", "transformer_block"] {
        let dir = fixture(name);
        let (inputs, expected) = recorded(&dir, 0);
        let (_tmp, so) = compile(&dir.join("model.pt2"));
        for threads in [1, 2, 4] {
            let mut model = Model::load_with_threads(&so, Device::Cpu, threads).expect("load");
            check_call(&mut model, &inputs, &expected, tolerance(&dir), &format!("{name} on {threads} threads"));
        }
    }
}

#[test]
fn two_instances_called_at_once_from_two_threads_stay_correct() {
    let dir = fixture("bench_convnet");
    let (inputs, expected) = recorded(&dir, 0);
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let tol = tolerance(&dir);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (so, inputs, expected) = (&so, &inputs, &expected);
            s.spawn(move || {
                let mut model = Model::load_with_threads(so, Device::Cpu, 2).expect("load");
                for call in 0..20 {
                    check_call(&mut model, inputs, expected, tol, &format!("instance {t} call {call}"));
                }
            });
        }
    });
}
