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

/// Threads failing index checks at once: the call's error names one failing check whole,
/// its site with its own index and dimension size (the first check to fail wins the
/// record atomically; the others leave it alone).
#[test]
fn racing_index_errors_report_one_failing_check_whole() {
    use aotc_runtime::{Tensor, Value};
    let dir = fixture("index_sites");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut model = Model::load_with_threads(&so, Device::Cpu, 4).expect("load");
    // x[i] + y[j] over n = 2^16: every i is past x's 5 elements, every j before y's 7.
    let n = 1i64 << 16;
    let longs = |f: &dyn Fn(i64) -> i64| {
        Value::Tensor(Tensor {
            dtype: aotc_abi::DType::I64,
            shape: vec![n],
            data: (0..n).flat_map(|k| f(k).to_le_bytes()).collect(),
        })
    };
    let x = Value::Tensor(Tensor::from_f32(&[5], &[1.0; 5]));
    let y = Value::Tensor(Tensor::from_f32(&[7], &[2.0; 7]));
    let mut inputs = vec![x.clone(), longs(&|k| k % 5), y.clone(), longs(&|k| k % 7)];
    assert_eq!(model.run(&mut inputs).expect("indices in range")[0].to_f64_vec(), vec![3.0; n as usize]);
    let mut inputs = vec![x, longs(&|k| 1000 + k), y, longs(&|k| -1000 - k)];
    for call in 0..300 {
        let e = model.run(&mut inputs).expect_err("every index is out of range");
        let m = e.to_string();
        let (site, rest) = m.split_once(": index ").unwrap_or_else(|| panic!("call {call}: {m}"));
        let (index, size) = rest.split_once(" is out of range for a dimension of size ").expect(&m);
        let (index, size): (i64, i64) =
            (index.parse().expect(&m), size.split(' ').next().unwrap_or(size).parse().expect(&m));
        let whole = match size {
            5 => site.contains("'index_select'") && (1000..1000 + n).contains(&index),
            7 => site.contains("'index_select_1'") && (-1000 - n + 1..=-1000).contains(&index),
            _ => false,
        };
        assert!(whole, "call {call}: the record mixes two failing checks: {m}");
    }
}
