//! Values that tend to break size arithmetic, bounds checks and enum parsing.

use super::rng::Rng;
use serde_json::{json, Value};

/// Integers at the edges of the ranges a compiler computes with (i32, i64, byte counts).
const EDGE_INTS: &[i64] = &[
    -1,
    -2,
    0,
    1,
    2,
    3,
    7,
    255,
    256,
    65535,
    65536,
    i32::MAX as i64,
    1 << 31,
    (1 << 31) + 1,
    1 << 32,
    (1 << 32) + 1,
    1 << 53,
    1 << 61,
    1 << 62,
    i64::MAX,
    i64::MAX - 1,
    i32::MIN as i64,
    -(1 << 62),
    i64::MIN,
    i64::MIN + 1,
];

/// An edge integer, or `near` nudged (off by one, doubled, negated, scaled up).
pub fn int(rng: &mut Rng, near: Option<i64>) -> i64 {
    match (near, rng.below(3)) {
        (Some(v), 0) => match rng.below(6) {
            0 => v.wrapping_add(1),
            1 => v.wrapping_sub(1),
            2 => v.wrapping_mul(2),
            3 => v.wrapping_neg(),
            4 => v.wrapping_mul(1 << 20),
            _ => v.wrapping_mul(1 << 40),
        },
        _ => *rng.pick(EDGE_INTS),
    }
}

/// An integer as JSON, sometimes beyond i64 (u64 or a float) to test number parsing.
pub fn int_json(rng: &mut Rng, near: Option<i64>) -> Value {
    match rng.below(12) {
        0 => json!(u64::MAX),
        1 => json!(1u64 << 63),
        2 => json!(1e30),
        3 => json!(2.5),
        _ => json!(int(rng, near)),
    }
}

/// A float, including the non-finite spellings torch.export writes.
pub fn float_json(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => json!("NaN"),
        1 => json!("Infinity"),
        2 => json!("-Infinity"),
        3 => json!(f64::MAX),
        4 => json!(-f64::MAX),
        5 => json!(5e-324),
        6 => json!(-0.0),
        7 => json!("bogus"),
        8 => json!(1e20),
        _ => json!(-1.0),
    }
}

/// Torch dtype codes: valid ones (other than the original) and invalid ones.
pub fn dtype_code(rng: &mut Rng) -> Value {
    const CODES: &[i64] = &[
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        12,
        13,
        0,
        9,
        10,
        11,
        14,
        15,
        16,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        24,
        25,
        99,
        255,
        -1,
        1 << 40,
    ];
    json!(rng.pick(CODES))
}

/// A string that is no valid name, enum value or number.
pub fn string(rng: &mut Rng) -> String {
    const STRINGS: &[&str] =
        &["bogus", "", "none", "tanh ", "NaN", "-1", "\u{0}", "../../../../etc/passwd", "%s%s%n", "\u{1F600}"];
    match rng.below(4) {
        0 => "x".repeat(70_000),
        _ => rng.pick(STRINGS).to_string(),
    }
}

/// Any JSON value of a random kind: for replacing a value with one of the wrong type.
pub fn any_value(rng: &mut Rng) -> Value {
    match rng.below(9) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => int_json(rng, None),
        3 => float_json(rng),
        4 => json!(string(rng)),
        5 => json!([]),
        6 => json!({}),
        7 => json!([int(rng, None), int(rng, None)]),
        _ => json!({"as_int": int(rng, None)}),
    }
}

/// A damaged copy of an int list (sizes, dims, split sizes): one element changed, a
/// length change, a product change, or a list of a whole new kind.
pub fn int_list(rng: &mut Rng, old: &[i64]) -> Vec<Value> {
    let mut new: Vec<Value> = old.iter().map(|&v| json!(v)).collect();
    let at = rng.below(old.len().max(1));
    match rng.below(9) {
        0 | 1 if !old.is_empty() => new[at] = int_json(rng, Some(old[at])),
        2 if !old.is_empty() => new[at] = json!(old[at].wrapping_mul(*rng.pick(&[2, 3, 1 << 31]))),
        3 => new.insert(at, json!(int(rng, None))),
        4 if !old.is_empty() => drop(new.remove(at)),
        5 => new = vec![json!(-1); old.len().max(2)],
        6 => new = vec![json!(1); 1000],
        7 => new.clear(),
        _ => new = (0..old.len().max(1)).map(|_| json!(int(rng, None))).collect(),
    }
    new
}

/// Contiguous strides for `sizes`, wrapping on overflow like the mutated sizes may need.
pub fn contiguous_strides(sizes: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; sizes.len()];
    for i in (0..sizes.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].wrapping_mul(sizes[i + 1].max(1));
    }
    strides
}
