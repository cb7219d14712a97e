//! torch.export's loops (lower/loops.rs): `while_loop`, nested, with data-dependent trip
//! counts, and `scan`, unrolled over a short static length or a loop over a dynamic one;
//! on the CPU and, through the library's CUDA runtime, on the PTX interpreter.

use aotc_runtime::Value;
use aotc_tests::{check_fixture, fake_cuda_driver, fixture, recorded, verify_fixture_cuda};

/// The recorded trip counts of the outer loop (output 0) of each call.
fn trip_counts(name: &str, calls: usize) -> Vec<i64> {
    (0..calls)
        .map(|call| {
            let (_, expected) = recorded(&fixture(name), call);
            expected[0].1.to_f64_vec()[0] as i64
        })
        .collect()
}

/// Call 0 runs no iteration, calls 1 and 2 several (the inner loop as many as the outer
/// one has run): a loop that ran once per call, or never went back, would not match.
#[test]
fn nested_while_loops_match_pytorch() {
    let counts = trip_counts("raw/while_loops", 3);
    assert!(counts[0] == 0 && counts[1] > 1 && counts[2] > counts[1], "the calls' trip counts: {counts:?}");
    check_fixture("raw/while_loops");
}

#[test]
fn scan_over_a_static_length_is_unrolled_and_matches_pytorch() {
    check_fixture("raw/scan_static");
}

/// 2, 9 and 70 steps through one library.
#[test]
fn scan_over_a_dynamic_length_loops_and_matches_pytorch() {
    let (inputs, _) = recorded(&fixture("raw/scan_dynamic"), 2);
    let Value::Tensor(xs) = &inputs[0] else { panic!("xs is a tensor") };
    assert_eq!(xs.shape[0], 70, "the last call scans 70 steps");
    check_fixture("raw/scan_dynamic");
}

/// The CUDA runtime follows the same jumps, reading each condition back from the device.
#[test]
fn loops_run_on_the_interpreted_gpu() {
    std::env::set_var("AOTC_CUDA_DRIVER", fake_cuda_driver());
    for name in ["raw/while_loops", "raw/scan_dynamic"] {
        verify_fixture_cuda(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
