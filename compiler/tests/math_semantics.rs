//! Arithmetic semantics the recorded fixtures leave out: integer division, remainder and
//! power at their edges (zero divisors and MIN / -1 must not trap the process; negative
//! exponents), python's floor division and remainder on floats, and NaN through
//! maximum, minimum, clamp and the max/min reductions. Each case compiles an op fixture
//! and runs it on inputs written here, against a reference computed here.

mod common;

use aotc_abi::DType;
use aotc_runtime::{Model, Tensor, Value};
use common::{compiled, floats};

fn long(v: i64) -> Value {
    Value::Tensor(Tensor { dtype: DType::I64, shape: vec![], data: v.to_le_bytes().to_vec() })
}

fn outputs(model: &mut Model, inputs: &[Value]) -> Vec<Tensor> {
    model.run(&mut inputs.to_vec()).unwrap()
}

/// The one element of an int64 result.
fn long_result(t: &Tensor) -> i64 {
    assert_eq!(t.dtype, DType::I64);
    i64::from_le_bytes(t.data[..].try_into().unwrap())
}

/// `got` is `want` exactly, NaN where NaN.
fn same(what: &str, got: &[f64], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            *g == *w as f64 || (g.is_nan() && w.is_nan()),
            "{what}: element {i} is {g}, expected {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

const EDGES: [i64; 10] = [-7, 7, 0, 1, -1, 2, -2, 3, i64::MIN, i64::MAX];

/// 0-dim int64 `op(a, b)` for every pair of `EDGES`, against `reference`.
fn check_integer_op(fixture: &str, reference: fn(i64, i64) -> i64) {
    let (_dir, mut model) = compiled(fixture);
    for a in EDGES {
        for b in EDGES {
            let got = long_result(&outputs(&mut model, &[long(a), long(b)])[0]);
            assert_eq!(got, reference(a, b), "{fixture}({a}, {b})");
        }
    }
}

/// torch raises ZeroDivisionError on an integer division by zero; compiled code gives 0.
fn or_zero_when_dividing_by_zero(b: i64, f: impl Fn() -> i64) -> i64 {
    if b == 0 {
        0
    } else {
        f()
    }
}

#[test]
fn integer_divisions_do_not_trap_and_round_as_torch() {
    check_integer_op("div.trunc_rounding__int64__0", |a, b| or_zero_when_dividing_by_zero(b, || a.wrapping_div(b)));
    check_integer_op("div.floor_rounding__int64__0", |a, b| {
        or_zero_when_dividing_by_zero(b, || {
            let (q, r) = (a.wrapping_div(b), a.wrapping_rem(b));
            if r != 0 && (r < 0) != (b < 0) {
                q - 1
            } else {
                q
            }
        })
    });
    check_integer_op("fmod__int64__0", |a, b| or_zero_when_dividing_by_zero(b, || a.wrapping_rem(b)));
    check_integer_op("remainder__int64__0", |a, b| {
        or_zero_when_dividing_by_zero(b, || {
            let r = a.wrapping_rem(b);
            if r != 0 && (r < 0) != (b < 0) {
                r + b
            } else {
                r
            }
        })
    });
}

#[test]
fn integer_pow_wraps_and_handles_negative_exponents_as_torch() {
    let (_dir, mut model) = compiled("pow__int64__0");
    for base in [-3, -2, -1, 0, 1, 2, 3, 7] {
        for exponent in [-3, -2, -1, 0, 1, 2, 3, 21, 40, 63] {
            let want = match (base, exponent) {
                (1, _) => 1,
                (-1, e) if e < 0 => {
                    if e % 2 == 0 {
                        1
                    } else {
                        -1
                    }
                }
                (_, e) if e < 0 => 0,
                (b, e) => i64::wrapping_pow(b, e as u32),
            };
            let got = long_result(&outputs(&mut model, &[long(base), long(exponent)])[0]);
            assert_eq!(got, want, "pow({base}, {exponent})");
        }
    }
}

/// torch's `div_floor_floating`: floor of the exact quotient `(a - fmod(a, b)) / b`,
/// rounded to the nearest integer (Rust's `%` on floats is C's fmod).
fn floor_div(a: f32, b: f32) -> f32 {
    if b == 0.0 {
        return a / b;
    }
    let rem = a % b;
    let mut exact = (a - rem) / b;
    if rem != 0.0 && (b < 0.0) != (rem < 0.0) {
        exact -= 1.0;
    }
    if exact == 0.0 {
        return 0f32.copysign(a / b);
    }
    let floor = exact.floor();
    if exact - floor > 0.5 {
        floor + 1.0
    } else {
        floor
    }
}

/// Python's `a % b`: the divisor's sign.
fn python_remainder(a: f32, b: f32) -> f32 {
    let rem = a % b;
    if rem != 0.0 && (b < 0.0) != (rem < 0.0) {
        rem + b
    } else {
        rem
    }
}

/// x [5] op y [] for several y, on float32 (the last elements run outside the f32x4 loop).
fn check_float_op(fixture: &str, reference: fn(f32, f32) -> f32) {
    let (_dir, mut model) = compiled(fixture);
    for x in [[7.0, -7.0, 7.5, -0.5, f32::NAN], [1.0, -1.0, 0.0, 0.3, 2.0]] {
        for y in [2.0, -2.0, 0.0, 0.1, 0.7, f32::INFINITY] {
            let got = outputs(&mut model, &[floats(&[5], &x), floats(&[], &[y])])[0].to_f64_vec();
            let want: Vec<f32> = x.iter().map(|&a| reference(a, y)).collect();
            same(&format!("{fixture}({x:?}, {y})"), &got, &want);
        }
    }
}

#[test]
fn float_floor_division_and_remainders_follow_torch() {
    // The exact quotient matters: 1 // 0.1 is 9 in torch, where floor(1 / 0.1) is 10.
    assert_eq!(floor_div(1.0, 0.1), 9.0);
    assert_eq!((floor_div(-7.0, 2.0), python_remainder(-7.0, 2.0), python_remainder(7.0, -2.0)), (-4.0, 1.0, -1.0));
    check_float_op("div.floor_rounding__float32__1", floor_div);
    check_float_op("div.trunc_rounding__float32__1", |a, b| (a / b).trunc());
    check_float_op("remainder__float32__1", python_remainder);
    check_float_op("fmod__float32__1", |a, b| a % b);
}

#[test]
fn nan_propagates_through_maximum_minimum_and_clamp() {
    let x = [1.0, f32::NAN, 3.0, f32::NEG_INFINITY, 5.0];
    let nan_aware =
        |f: fn(f32, f32) -> f32| move |a: f32, b: f32| if a.is_nan() || b.is_nan() { f32::NAN } else { f(a, b) };
    for (fixture, op) in
        [("max.binary__float32__1", nan_aware(f32::max)), ("min.binary__float32__1", nan_aware(f32::min))]
    {
        let (_dir, mut model) = compiled(fixture);
        for y in [2.0, f32::NAN] {
            let got = outputs(&mut model, &[floats(&[5], &x), floats(&[], &[y])])[0].to_f64_vec();
            same(fixture, &got, &x.map(|a| op(a, y)));
        }
    }
    // clamp(x [5, 10, 5], min [10, 5], max [10, 5]).
    let (_dir, mut model) = compiled("clamp__float32__1");
    let xs: Vec<f32> = (0..250).map(|i| if i % 7 == 3 { f32::NAN } else { (i % 11) as f32 - 5.0 }).collect();
    let (lo, hi): (Vec<f32>, Vec<f32>) = (0..50).map(|i| (-((i % 4) as f32), (i % 3) as f32)).unzip();
    let got =
        outputs(&mut model, &[floats(&[5, 10, 5], &xs), floats(&[10, 5], &lo), floats(&[10, 5], &hi)])[0].to_f64_vec();
    let want: Vec<f32> =
        xs.iter().enumerate().map(|(i, &v)| if v.is_nan() { v } else { v.max(lo[i % 50]).min(hi[i % 50]) }).collect();
    same("clamp", &got, &want);
}

#[test]
fn nan_propagates_through_max_min_reductions_and_ties_give_the_first_index() {
    // amin and amax over all of [5, 5, 5] (the f32x4 reduction loop).
    let (_dir, mut model) = compiled("aminmax__float32__0");
    let mut xs: Vec<f32> = (0..125).map(|i| ((i * 37) % 125) as f32).collect();
    let got: Vec<f64> = outputs(&mut model, &[floats(&[5, 5, 5], &xs)]).iter().flat_map(|t| t.to_f64_vec()).collect();
    same("aminmax", &got, &[0.0, 124.0]);
    xs[77] = f32::NAN;
    let got: Vec<f64> = outputs(&mut model, &[floats(&[5, 5, 5], &xs)]).iter().flat_map(|t| t.to_f64_vec()).collect();
    same("aminmax with a NaN", &got, &[f32::NAN, f32::NAN]);

    // max/min(x [5, 5, 5], dim 1, keepdim): each column of 5 holds ties, some a NaN.
    let xs: Vec<f32> = (0..125).map(|i| if i % 23 == 4 { f32::NAN } else { (i % 3) as f32 }).collect();
    for (fixture, is_better) in [
        ("max.reduction_with_dim__float32__1", f32::gt as fn(&f32, &f32) -> bool),
        ("min.reduction_with_dim__float32__1", f32::lt),
    ] {
        let (_dir, mut model) = compiled(fixture);
        let got = outputs(&mut model, &[floats(&[5, 5, 5], &xs)]);
        let (mut values, mut indices) = (vec![], vec![]);
        for (i, k) in (0..5).flat_map(|i| (0..5).map(move |k| (i, k))) {
            let column: Vec<f32> = (0..5).map(|j| xs[i * 25 + j * 5 + k]).collect();
            let best = (1..5).fold(0, |b, j| {
                if !column[b].is_nan() && (column[j].is_nan() || is_better(&column[j], &column[b])) {
                    j
                } else {
                    b
                }
            });
            values.push(column[best]);
            indices.push(best as f32);
        }
        same(&format!("{fixture} values"), &got[0].to_f64_vec(), &values);
        same(&format!("{fixture} indices"), &got[1].to_f64_vec(), &indices);
    }
}
