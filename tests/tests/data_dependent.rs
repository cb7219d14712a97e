//! Programs whose sizes depend on the data (`nonzero`, `tensor.item()` used as a size):
//! the library runs them in stages. Inputs other than the recorded ones, with the
//! expected results computed here from the operators' definitions.

use aotc_abi::status;
use aotc_runtime::{DType, Device, Model, Tensor, Value};
use aotc_tests::{compile, fixture};

fn load(name: &str) -> (tempfile::TempDir, Model) {
    let (dir, so) = compile(&fixture(&format!("ops/{name}")).join("model.pt2"));
    let model = Model::load(&so, Device::Cpu).unwrap_or_else(|e| panic!("{name}: {e}"));
    (dir, model)
}

fn i64s(t: &Tensor) -> Vec<i64> {
    assert_eq!(t.dtype, DType::I64);
    t.data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn i64_tensor(shape: &[i64], values: &[i64]) -> Tensor {
    Tensor { dtype: DType::I64, shape: shape.to_vec(), data: values.iter().flat_map(|v| v.to_le_bytes()).collect() }
}

/// The coordinates of the nonzero elements of a row-major 5x5 matrix.
fn nonzero_5x5(x: &[f32]) -> Vec<i64> {
    (0..25).filter(|&i| x[i] != 0.0).flat_map(|i| [i as i64 / 5, i as i64 % 5]).collect()
}

#[test]
fn nonzero_row_count_follows_the_data_call_after_call() {
    // nonzero(float32[5, 5]): one instance, three calls with 0, 25 and 9 nonzero elements
    // (NaN and -0.0 included: NaN is nonzero, -0.0 is zero).
    let (_dir, mut model) = load("nonzero__float32__1");
    let mut mixed = [0.0f32; 25];
    for i in (0..25).step_by(3) {
        mixed[i] = if i % 2 == 0 { f32::NAN } else { -1.5 };
    }
    mixed[1] = -0.0;
    for x in [[0.0f32; 25], [2.0f32; 25], mixed] {
        let want = nonzero_5x5(&x);
        let out = model.run(&mut [Value::Tensor(Tensor::from_f32(&[5, 5], &x))]).expect("nonzero runs");
        assert_eq!(out[0].shape, vec![want.len() as i64 / 2, 2]);
        assert_eq!(i64s(&out[0]), want);
    }
}

#[test]
fn tensor_split_by_data_indices_gives_data_sized_outputs() {
    // tensor_split(x: float32[5, 5, 5], indices: int64[3]) splits dimension 0 at the
    // index values; an index below the previous one gives an empty piece.
    let (_dir, mut model) = load("tensor_split__float32__0");
    let x: Vec<f32> = (0..125).map(|v| v as f32).collect();
    for (cuts, rows) in [([1i64, 4, 3], [1i64, 3, 0, 2]), ([0, 0, 5], [0, 0, 5, 0])] {
        let mut inputs = [Value::Tensor(Tensor::from_f32(&[5, 5, 5], &x)), Value::Tensor(i64_tensor(&[3], &cuts))];
        let out = model.run(&mut inputs).unwrap_or_else(|e| panic!("cuts {cuts:?}: {e}"));
        let starts = [0, cuts[0], cuts[1], cuts[2]];
        for (k, (piece, &n)) in out.iter().zip(&rows).enumerate() {
            assert_eq!(piece.shape, vec![n, 5, 5], "cuts {cuts:?} piece {k}");
            let first = starts[k] as usize * 25;
            let want: Vec<f64> = x[first..first + n as usize * 25].iter().map(|&v| v as f64).collect();
            assert_eq!(piece.to_f64_vec(), want, "cuts {cuts:?} piece {k}");
        }
    }
}

#[test]
fn a_data_value_outside_its_recorded_range_is_refused() {
    // take(x: float32[], index: int64[]): export recorded index in [-1, 0].
    let (_dir, mut model) = load("take__float32__2");
    let run = |model: &mut Model, index: i64| {
        model.run(&mut [Value::Tensor(Tensor::from_f32(&[], &[7.0])), Value::Tensor(i64_tensor(&[], &[index]))])
    };
    for index in [0, -1] {
        assert_eq!(run(&mut model, index).expect("an index in range").remove(0).to_f64_vec(), vec![7.0]);
    }
    let e = run(&mut model, 3).expect_err("index 3 of a one-element tensor");
    assert_eq!(e.code, status::RANGE, "{e}");
    assert!(e.message.contains("_local_scalar_dense") && e.message.contains("[-1, 0]"), "{e}");
    // The instance still works after a refused call.
    assert_eq!(run(&mut model, 0).expect("index 0").remove(0).to_f64_vec(), vec![7.0]);
}

/// A symbolic slice bound must be known non-negative (counting from the end would need
/// its sign at compile time): a negative one is a clear error, not a wrong slice.
#[test]
fn a_negative_split_index_is_refused_with_a_clear_error() {
    let (_dir, mut model) = load("tensor_split__float32__0");
    let x = vec![0.0f32; 125];
    let e = model
        .run(&mut [Value::Tensor(Tensor::from_f32(&[5, 5, 5], &x)), Value::Tensor(i64_tensor(&[3], &[1, -2, 3]))])
        .expect_err("a negative index");
    assert!(matches!(e.code, status::SHAPE | status::RANGE), "{e}");
    assert!(e.message.contains("node '"), "{e}");
}
