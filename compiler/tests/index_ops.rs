//! Indexing, scatter and sort semantics the recorded fixtures leave out: several writes
//! to one position (the last one wins), negative python indices, NaN and ties in sorts,
//! and indices out of range (the call fails with AOTC_ERR_INDEX naming the node; nothing
//! is read or written out of bounds). Each case compiles an op fixture and runs it on
//! inputs written here, against a reference computed here.

mod common;

use aotc_abi::DType;
use aotc_runtime::{Model, Tensor, Value};
use common::{compiled, floats};

fn longs(shape: &[i64], values: &[i64]) -> Value {
    Value::Tensor(Tensor {
        dtype: DType::I64,
        shape: shape.to_vec(),
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

fn run(model: &mut Model, inputs: &[Value]) -> Result<Vec<Vec<f64>>, String> {
    let out = model.run(&mut inputs.to_vec()).map_err(|e| e.to_string())?;
    Ok(out.iter().map(|t| t.to_f64_vec()).collect())
}

/// `got` is `want` exactly, NaN where NaN.
fn same(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g == w || (g.is_nan() && w.is_nan()),
            "{what}: element {i} is {g}, expected {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

fn fails_with_index_error(result: Result<Vec<Vec<f64>>, String>, needle: &str) {
    let err = result.expect_err("an index out of range must fail the call");
    assert!(err.contains(needle) && err.contains("AOTC_ERR_INDEX"), "{err}");
}

fn arange(n: usize) -> Vec<f32> {
    (0..n).map(|v| v as f32).collect()
}

/// scatter(self [5, 4], 0, index [3, 4], src [3, 4]): torch writes the sources in order.
#[test]
fn scatter_keeps_the_last_write_and_checks_its_indices() {
    let (_dir, mut model) = compiled("handwritten.scatter_src__float32__0");
    let index = [1, 0, 4, 2, 1, 3, 4, 0, 2, 0, 4, 2];
    let src: Vec<f32> = (1..=12).map(|v| v as f32).collect();
    let mut want = vec![-1.0; 20];
    for (j, &i) in index.iter().enumerate() {
        want[i as usize * 4 + j % 4] = src[j] as f64;
    }
    let inputs = |index: &[i64]| [floats(&[5, 4], &[-1.0; 20]), longs(&[3, 4], index), floats(&[3, 4], &src)];
    same("scatter", &run(&mut model, &inputs(&index)).unwrap()[0], &want);
    for bad in [5, -1] {
        let mut index = index;
        index[6] = bad;
        fails_with_index_error(
            run(&mut model, &inputs(&index)),
            &format!("scatter index along dimension 0: index {bad} is out of range"),
        );
    }
}

/// self[rows, cols] = values on self [4, 5]: python indices (negative ones count from the
/// end), the last write to a position wins.
#[test]
fn index_put_wraps_negative_indices_and_keeps_the_last_write() {
    let (_dir, mut model) = compiled("handwritten.index_put__float32__0");
    let inputs = |rows: &[i64], cols: &[i64]| {
        [floats(&[4, 5], &arange(20)), longs(&[3], rows), longs(&[3], cols), floats(&[3], &[100.0, 200.0, 300.0])]
    };
    let mut want: Vec<f64> = (0..20).map(|v| v as f64).collect();
    want[5 + 2] = 200.0;
    want[15 + 4] = 300.0;
    same("index_put", &run(&mut model, &inputs(&[1, -3, 3], &[2, 2, -1])).unwrap()[0], &want);
    fails_with_index_error(
        run(&mut model, &inputs(&[1, 4, 3], &[0, 0, 0])),
        "index into dimension 0: index 4 is out of range",
    );
    fails_with_index_error(
        run(&mut model, &inputs(&[1, 1, 3], &[0, -6, 0])),
        "index into dimension 1: index -6 is out of range",
    );
}

/// x[i, :, k] on x [5, 3, 6] with index tensors [4, 2]: the result is [4, 2, 3].
#[test]
fn advanced_indexing_wraps_negative_indices() {
    let (_dir, mut model) = compiled("handwritten.index_Tensor__float32__0");
    let first = [0, -1, 4, -5, 2, 3, -2, 1];
    let last = [5, -6, 0, -1, 3, 2, 1, -3];
    let inputs = |first: &[i64]| [floats(&[5, 3, 6], &arange(90)), longs(&[4, 2], first), longs(&[4, 2], &last)];
    let wrap = |i: i64, n: i64| if i < 0 { i + n } else { i };
    let want: Vec<f64> =
        (0..8).flat_map(|p| (0..3).map(move |j| (wrap(first[p], 5) * 18 + j * 6 + wrap(last[p], 6)) as f64)).collect();
    same("index", &run(&mut model, &inputs(&first)).unwrap()[0], &want);
    let mut bad = first;
    bad[3] = 5;
    fails_with_index_error(run(&mut model, &inputs(&bad)), "index into dimension 0: index 5 is out of range");
}

/// The order of a stable sort in which NaN is larger than every number.
fn stable_order(values: &[f32], descending: bool) -> Vec<usize> {
    let key = |v: f32| (v.is_nan(), if v.is_nan() { 0.0 } else { v });
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| {
        let ord = key(values[a]).partial_cmp(&key(values[b])).unwrap();
        if descending {
            ord.reverse()
        } else {
            ord
        }
    });
    order
}

/// sort(x [4, 6], dim 1, descending): NaN first, equal values in their original order.
#[test]
fn sort_is_stable_and_sorts_nan_as_the_largest() {
    let (_dir, mut model) = compiled("handwritten.sort__float32__0");
    let nan = f32::NAN;
    let x = [
        1.0,
        nan,
        3.0,
        3.0,
        f32::NEG_INFINITY,
        1.0,
        2.0,
        2.0,
        2.0,
        2.0,
        2.0,
        2.0,
        nan,
        0.0,
        nan,
        -0.5,
        f32::INFINITY,
        -0.5,
        5.0,
        4.0,
        3.0,
        2.0,
        1.0,
        0.0,
    ];
    let out = run(&mut model, &[floats(&[4, 6], &x)]).unwrap();
    let (mut values, mut indices) = (vec![], vec![]);
    for row in x.chunks(6) {
        for i in stable_order(row, true) {
            values.push(row[i] as f64);
            indices.push(i as f64);
        }
    }
    same("sort values", &out[0], &values);
    same("sort indices", &out[1], &indices);
}

/// topk(x [6, 5], 3, dim 0, largest=False): the three smallest of each column, in order,
/// ties in their original order, NaN only when fewer numbers remain.
#[test]
fn topk_smallest_breaks_ties_by_position() {
    let (_dir, mut model) = compiled("handwritten.topk__float32__0");
    let nan = f32::NAN;
    let columns: [[f32; 6]; 5] = [
        [3.0, 1.0, 2.0, 1.0, 0.5, 9.0],
        [nan, nan, nan, nan, 1.0, nan],
        [7.0; 6],
        [-1.0, f32::NEG_INFINITY, 4.0, -1.0, 8.0, 0.0],
        [6.0, 5.0, 4.0, 3.0, 2.0, 1.0],
    ];
    let x: Vec<f32> = (0..30).map(|p| columns[p % 5][p / 5]).collect();
    let out = run(&mut model, &[floats(&[6, 5], &x)]).unwrap();
    let (mut values, mut indices) = (vec![0.0; 15], vec![0.0; 15]);
    for (c, column) in columns.iter().enumerate() {
        for (k, &i) in stable_order(column, false)[..3].iter().enumerate() {
            values[k * 5 + c] = column[i] as f64;
            indices[k * 5 + c] = i as f64;
        }
    }
    same("topk values", &out[0], &values);
    same("topk indices", &out[1], &indices);
}

/// index_select of a 0-dim self: torch takes index 0 only ("index out of range in self"
/// for -1, 1 and the rest).
#[test]
fn index_select_of_a_0_dim_tensor_takes_index_0_only() {
    let (_dir, mut model) = compiled("index_select__float32__0");
    let inputs = |i: i64| [floats(&[], &[2.5]), longs(&[1], &[i])];
    same("index_select", &run(&mut model, &inputs(0)).unwrap()[0], &[2.5]);
    for bad in [-1, 1, 1_000_000_000, i64::MIN] {
        fails_with_index_error(
            run(&mut model, &inputs(bad)),
            &format!("index_select of a 0-dim tensor: index {bad} is out of range for a dimension of size 1"),
        );
    }
}

/// _embedding_bag(weight [10, 3], indices [8], offsets [4], mode mean): torch raises for
/// offsets past the indices, negative, decreasing or not starting at 0; so does the call.
#[test]
fn embedding_bag_checks_its_offsets() {
    let (_dir, mut model) = compiled("handwritten._embedding_bag__float32__0");
    let weight = arange(30);
    let indices = [1, 2, 4, 5, 4, 3, 2, 9];
    let inputs = |offsets: &[i64]| [floats(&[10, 3], &weight), longs(&[8], &indices), longs(&[4], offsets)];
    // Bags [0, 2), [2, 2) (empty: 0), [2, 5), [5, 8): the mean of their rows.
    let mean = |rows: &[i64]| -> Vec<f64> {
        (0..3)
            .map(|c| match rows.len() {
                0 => 0.0,
                k => rows.iter().map(|&r| (r * 3 + c) as f64).sum::<f64>() / k as f64,
            })
            .collect()
    };
    let want: Vec<f64> =
        [&indices[0..2], &indices[2..2], &indices[2..5], &indices[5..8]].iter().flat_map(|r| mean(r)).collect();
    same("embedding_bag", &run(&mut model, &inputs(&[0, 2, 2, 5])).unwrap()[0], &want);
    for (offsets, message) in [
        (&[0, 2, 5, 9], "embedding_bag offsets (positions 0..=n in the indices): index 9 is out of range for a dimension of size 9"),
        (&[0, 2, -1, 5], "embedding_bag offsets (positions 0..=n in the indices): index -1 is out of range for a dimension of size 9"),
        (&[0, 5, 2, 6], "embedding_bag bag length (offsets must not decrease): index -3 is out of range for a dimension of size 9"),
        (&[1, 2, 5, 6], "embedding_bag offsets[0] (must be 0): index 1 is out of range for a dimension of size 1"),
    ] {
        fails_with_index_error(run(&mut model, &inputs(offsets)), message);
    }
}
