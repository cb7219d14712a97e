//! The activations of the output passes (`aotc_abi::gemm::Activation`), applied by the
//! GEMM as it writes each register tile and by the convolutions as they write their
//! output: one element, a vector of either width (`crate::simd`: 8 lanes with AVX2 + FMA,
//! 16 with AVX-512), or a whole slice. Each computes what the
//! graph's decomposition computes, in its order (NaN stays NaN).

#[cfg(target_arch = "x86_64")]
use crate::isa::Isa;
use crate::simd::F32s;
use aotc_abi::gemm::Activation;

/// One element.
pub fn scalar(activation: Activation, x: f32) -> f32 {
    match activation {
        Activation::None => x,
        // `<`: NaN stays.
        Activation::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Activation::Gelu => crate::gelu::gelu_scalar(x),
        // clamp keeps NaN (f32::max/min would drop it).
        Activation::Hardswish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        Activation::Silu => x * (1.0 / (1.0 + (-x).exp())),
    }
}

/// Every element of `out`, a vector at a time where the CPU has AVX2 and FMA.
pub fn apply(activation: Activation, out: &mut [f32]) {
    apply_with(Isa::best(), activation, out)
}

/// [`apply`] on the set `isa` (the tests pick each): vectors, or scalar code.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn apply_with(isa: Isa, activation: Activation, out: &mut [f32]) {
    if activation == Activation::None {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable {
        // SAFETY: the CPU runs `isa`, a vector set.
        return unsafe { apply_lanes(isa, activation, out) };
    }
    out.iter_mut().for_each(|v| *v = scalar(activation, *v));
}

#[cfg(target_arch = "x86_64")]
crate::simd::for_each_isa! {
    fn apply_lanes(activation: Activation, out: &mut [f32]) => apply_generic
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn apply_generic<V: F32s>(activation: Activation, out: &mut [f32]) {
    let (mut i, p) = (0, out.as_mut_ptr());
    // SAFETY (all): the CPU runs V's set (the caller's); the floats below out.len().
    unsafe {
        if activation == Activation::Silu {
            // [`lanes`]'s SiLU, SILU_BLOCK vectors at a time in two passes: their e^-x,
            // then x / (1 + e). One vector's whole chain (exp, then the division) is long
            // enough that the CPU overlapped too few of them; each pass's chain is about
            // half of it.
            let l = V::LANES;
            while i + SILU_BLOCK * l <= out.len() {
                let mut e = [V::zero(); SILU_BLOCK];
                for (b, e) in e.iter_mut().enumerate() {
                    *e = silu_exp(V::load(p.add(i + b * l)));
                }
                for (b, &e) in e.iter().enumerate() {
                    let at = p.add(i + b * l);
                    silu_of(V::load(at), e).store(at);
                }
                i += SILU_BLOCK * l;
            }
        }
        while i + V::LANES <= out.len() {
            lanes(V::load(p.add(i)), activation).store(p.add(i));
            i += V::LANES;
        }
        if i < out.len() {
            let n = out.len() - i;
            lanes(V::load_first(p.add(i), n, 0.0), activation).store_first(p.add(i), n);
        }
    }
}

/// Vectors per block of [`apply_generic`]'s SiLU passes.
#[cfg(target_arch = "x86_64")]
const SILU_BLOCK: usize = 4;

/// A vector's lanes ([`scalar`]'s values).
///
/// # Safety
/// The CPU runs V's set (the caller is compiled for it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn lanes<V: F32s>(v: V, activation: Activation) -> V {
    // SAFETY (all): the caller's. max(a, v) and min(a, v) return their second operand, v,
    // when either is NaN: NaN stays.
    unsafe {
        match activation {
            Activation::None => v,
            Activation::Relu => V::zero().max(v),
            Activation::Gelu => crate::gelu::lanes::gelu(v),
            Activation::Hardswish => {
                let t = v.add(V::splat(3.0));
                let t = V::splat(6.0).min(V::zero().max(t));
                v.mul(t).mul(V::splat(1.0 / 6.0))
            }
            Activation::Silu => silu_of(v, silu_exp(v)),
        }
    }
}

/// SiLU's e^-x: the first half of [`silu_of`]'s input.
///
/// # Safety
/// The CPU runs V's set (the caller is compiled for it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn silu_exp<V: F32s>(x: V) -> V {
    // SAFETY: the caller's.
    unsafe { crate::gelu::lanes::exp_for_logistic(V::zero().sub(x)) }
}

/// SiLU of `x` from `e` = [`silu_exp`]`(x)`: x * (1 / (1 + e)), the decomposition's order.
///
/// # Safety
/// The CPU runs V's set (the caller is compiled for it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn silu_of<V: F32s>(x: V, e: V) -> V {
    // SAFETY: the caller's.
    unsafe {
        let one = V::splat(1.0);
        x.mul(one.div(one.add(e)))
    }
}

/// [`lanes`] of each vector of `vs` (a GEMM's register tile): ReLU in place, inlined; the
/// others in one call of [`apply`]'s code for V's set over the tile's lanes. Inlined into
/// each of the GEMM's tile shapes, the exp and erf polynomials made up most of the
/// support library's code and its build time; the call costs the tile's stores and
/// loads, beside an exp or erf per vector.
///
/// # Safety
/// As [`lanes`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn lanes_each<V: F32s>(vs: &mut [V], activation: Activation) {
    // SAFETY: the caller's (the CPU runs V's set); `vs` is `vs.len() * LANES` floats.
    unsafe {
        match activation {
            Activation::None => {}
            Activation::Relu => {
                for v in vs.iter_mut() {
                    *v = lanes(*v, Activation::Relu);
                }
            }
            _ => {
                let floats = std::slice::from_raw_parts_mut(vs.as_mut_ptr().cast::<f32>(), vs.len() * V::LANES);
                apply_out_of_line(V::ISA, activation, floats);
            }
        }
    }
}

/// [`apply_lanes`], never inlined (its callers are inlined into every tile shape).
///
/// # Safety
/// As [`apply_lanes`].
#[cfg(target_arch = "x86_64")]
#[inline(never)]
unsafe fn apply_out_of_line(isa: Isa, activation: Activation, out: &mut [f32]) {
    // SAFETY: the caller's.
    unsafe { apply_lanes(isa, activation, out) }
}

/// Each activation in float64, for the tests of the kernels that apply them.
#[cfg(test)]
pub(crate) fn reference(activation: Activation, x: f64) -> f64 {
    extern "C" {
        /// glibc's, linked by std.
        fn erf(x: f64) -> f64;
    }
    match activation {
        Activation::None => x,
        Activation::Relu => x.max(0.0),
        // SAFETY: erf is a pure libm function.
        Activation::Gelu => x * 0.5 * (1.0 + unsafe { erf(x * std::f64::consts::FRAC_1_SQRT_2) }),
        Activation::Hardswish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        Activation::Silu => x / (1.0 + (-x).exp()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_agree_with_one_element_at_a_time_specials_included() {
        let mut x: Vec<f32> = (0..1003).map(|i| (i as f32 - 500.0) * 0.0173).collect();
        x.extend([0.0, -0.0, -3.0, 3.0, 6.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e30, -1e30]);
        for (isa, activation) in Isa::every_available().flat_map(|isa| Activation::ALL.map(|a| (isa, a))) {
            let mut out = x.clone();
            apply_with(isa, activation, &mut out);
            for (&v, &got) in x.iter().zip(&out) {
                let want = scalar(activation, v);
                let close =
                    got == want || (got - want).abs() <= 2e-7 * (1.0 + want.abs()) || (got.is_nan() && want.is_nan());
                assert!(close, "{isa:?} {activation:?}({v}) = {got}, one at a time {want}");
            }
        }
        assert!(scalar(Activation::Hardswish, f32::NAN).is_nan() && scalar(Activation::Relu, f32::NAN).is_nan());
        assert_eq!(scalar(Activation::Hardswish, -4.0), 0.0);
        assert_eq!(scalar(Activation::Hardswish, 4.0), 4.0);
        assert_eq!(scalar(Activation::Silu, 0.0), 0.0);
        assert!(scalar(Activation::Silu, f32::NAN).is_nan());
        assert_eq!(scalar(Activation::Silu, -200.0), -0.0);
        assert_eq!(scalar(Activation::Silu, 200.0), 200.0);
    }
}
