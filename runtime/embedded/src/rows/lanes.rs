//! One row at a time, a vector of either width ([`F32s`]) at a time: softmax (long rows)
//! and layer norm, the last partial vector loaded and stored masked.

use crate::simd::{for_each_isa, F32s};

for_each_isa! {
    /// `super::softmax_row` a vector at a time: the same max (NaN if any lane is), exp
    /// of the shifted values, float64 sum.
    pub(super) fn softmax_row(x: &[f32], out: &mut [f32], log: bool) => softmax_row_generic
}

for_each_isa! {
    /// One row of `super::__aotc_layer_norm_f32`: float64 mean and biased variance, then
    /// `(x - mean) * rstd * weight + bias` in float32, as the scalar code computes them.
    pub(super) fn layer_norm_row(
        x: &[f32],
        out: &mut [f32],
        weight: Option<&[f32]>,
        bias: Option<&[f32]>,
        eps: f64,
    ) => layer_norm_row_generic
}

/// The vector of `x` from `i`, lanes past its end `fill`.
///
/// # Safety
/// The CPU runs V's set; `i < x.len()`.
#[inline(always)]
unsafe fn at<V: F32s>(x: &[f32], i: usize, fill: f32) -> V {
    // SAFETY: the caller's; the floats of x from i.
    unsafe { V::load_up_to(x.as_ptr().add(i), x.len() - i, fill) }
}

/// Stores the lanes of `v` that fall inside `out` from `i`.
///
/// # Safety
/// The CPU runs V's set; `i < out.len()`.
#[inline(always)]
unsafe fn put<V: F32s>(out: &mut [f32], i: usize, v: V) {
    // SAFETY: the caller's; the floats of out from i.
    unsafe { v.store_up_to(out.as_mut_ptr().add(i), out.len() - i) }
}

#[inline(always)]
unsafe fn softmax_row_generic<V: F32s>(x: &[f32], out: &mut [f32], log: bool) {
    assert_eq!(x.len(), out.len());
    let step = V::LANES;
    // SAFETY (all): the CPU runs V's set (the caller's); `at` and `put` from i < len.
    unsafe {
        // Past the row: -inf, which neither raises the max nor adds to the sum (its
        // exp is 0; NaN where the max is -inf or NaN, which make the row NaN anyway).
        let mut vmax = V::splat(f32::NEG_INFINITY);
        for i in (0..x.len()).step_by(step) {
            vmax = vmax.max_nan(at(x, i, f32::NEG_INFINITY));
        }
        let max =
            vmax.to_array()[..step].iter().fold(f32::NEG_INFINITY, |m, &v| if v > m || v.is_nan() { v } else { m });
        let vmax = V::splat(max);
        let mut sum = V::zero_sum();
        for i in (0..x.len()).step_by(step) {
            let shifted = at::<V>(x, i, f32::NEG_INFINITY).sub(vmax);
            // 0 below FLUSH_BELOW (exp's), not a denormal: masked attention scores are -inf
            // or -100. NaN stays.
            let e = crate::gelu::lanes::exp(shifted);
            if !log {
                put(out, i, e);
            }
            sum = e.add_to_sum(sum);
        }
        let sum = V::total(sum);
        if log {
            let shifted = V::splat(max + sum.ln() as f32);
            for i in (0..x.len()).step_by(step) {
                put(out, i, at::<V>(x, i, 0.0).sub(shifted));
            }
        } else {
            let inverse = V::splat((1.0 / sum) as f32);
            for i in (0..out.len()).step_by(step) {
                let e: V = at(out, i, 0.0);
                put(out, i, e.mul(inverse));
            }
        }
    }
}

#[inline(always)]
unsafe fn layer_norm_row_generic<V: F32s>(
    x: &[f32],
    out: &mut [f32],
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    eps: f64,
) {
    assert!(
        x.len() == out.len() && weight.is_none_or(|w| w.len() == x.len()) && bias.is_none_or(|b| b.len() == x.len())
    );
    let (step, len) = (V::LANES, x.len() as f64);
    // SAFETY (all): the CPU runs V's set (the caller's); `at` and `put` from i < len.
    unsafe {
        let mut sum = V::zero_sum();
        for i in (0..x.len()).step_by(step) {
            sum = at::<V>(x, i, 0.0).add_to_sum(sum);
        }
        let mean = V::total(sum) / len;
        // Whole vectors, then the rest one by one (a padding lane's square is not 0).
        let (mut squares, whole) = (V::zero_sum(), x.len() / step * step);
        for i in (0..whole).step_by(step) {
            squares = at::<V>(x, i, 0.0).add_squares_to_sum(mean, squares);
        }
        let rest: f64 = x[whole..].iter().map(|&v| (v as f64 - mean) * (v as f64 - mean)).sum();
        let var = (V::total(squares) + rest) / len;
        let (vmean, rstd) = (V::splat(mean as f32), V::splat((1.0 / (var + eps).sqrt()) as f32));
        for i in (0..x.len()).step_by(step) {
            let y = at::<V>(x, i, 0.0).sub(vmean).mul(rstd);
            let y = match weight {
                Some(w) => y.mul(at(w, i, 0.0)),
                None => y,
            };
            let y = match bias {
                Some(b) => y.add(at(b, i, 0.0)),
                None => y,
            };
            put(out, i, y);
        }
    }
}
