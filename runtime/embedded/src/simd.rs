//! Vectors of float32 for the row and convolution kernels: AVX-512 (16 lanes) and AVX2
//! with FMA (8 lanes), the vector sets of [`Isa`](crate::isa::Isa) (which one runs is
//! chosen there, once). Each kernel is written once over [`F32s`] and compiled for each
//! set by [`for_each_isa!`]; the arithmetic (the polynomials of exp and erf included) is
//! the same operations on either width, so the two agree lane for lane.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::transpose8;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// Float32 lanes of one vector register, and the operations the kernels use on them.
/// Every method is `inline(always)` so that it compiles inside its caller, with the
/// caller's target features: the caller is compiled for the set (its features enabled)
/// and runs only where the CPU has it, which is each method's safety contract.
///
/// # Safety
/// Implemented only for the vector types of a vector set of [`Isa`](crate::isa::Isa).
pub unsafe trait F32s: Copy {
    const LANES: usize;
    /// The vector set these lanes belong to.
    const ISA: crate::isa::Isa;
    /// Which lanes a comparison held for.
    type Mask: Copy;
    /// A float64 accumulator of sums of lanes (`LANES` float64s, or half as many summed
    /// pairwise).
    type Sum: Copy;

    unsafe fn splat(x: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    /// The first `n` (below `LANES`) floats at `p`, the other lanes `fill`; reads only those.
    unsafe fn load_first(p: *const f32, n: usize, fill: f32) -> Self;
    /// Stores the first `n` (below `LANES`) lanes at `p`, and writes nothing else.
    unsafe fn store_first(self, p: *mut f32, n: usize);
    unsafe fn add(self, b: Self) -> Self;
    unsafe fn sub(self, b: Self) -> Self;
    unsafe fn mul(self, b: Self) -> Self;
    unsafe fn div(self, b: Self) -> Self;
    /// `self * b + c`, rounded once.
    unsafe fn mul_add(self, b: Self, c: Self) -> Self;
    /// `c - self * b`, rounded once.
    unsafe fn neg_mul_add(self, b: Self, c: Self) -> Self;
    /// The larger of the two, `b` when either is NaN (the instruction's rule).
    unsafe fn max(self, b: Self) -> Self;
    /// The smaller of the two, `b` when either is NaN.
    unsafe fn min(self, b: Self) -> Self;
    /// `self * 2^n` for lanes of `n` that are integers in [-254, 254] (as two factors
    /// `2^(n/2)`, so that neither overflows the exponent).
    unsafe fn scale_pow2(self, n: Self) -> Self;
    /// 2^n for `self` = y + 1.5 * 2^23 rounded, whose low mantissa bits hold the integer
    /// n = round(y) in [-126, 128]: those bits shifted into the exponent field (128:
    /// infinity).
    unsafe fn pow2_of_rounded(self) -> Self;
    /// `|self|`.
    unsafe fn abs(self) -> Self;
    /// `self < b`, false where either is NaN.
    unsafe fn lt(self, b: Self) -> Self::Mask;
    /// Not `self < b`: true where either is NaN.
    unsafe fn not_lt(self, b: Self) -> Self::Mask;
    /// Where `self` is NaN.
    unsafe fn is_nan(self) -> Self::Mask;
    /// `if_true` where `mask` holds, else `if_false`.
    unsafe fn select(mask: Self::Mask, if_true: Self, if_false: Self) -> Self;
    unsafe fn zero_sum() -> Self::Sum;
    /// `acc` plus the lanes of `self` in float64.
    unsafe fn add_to_sum(self, acc: Self::Sum) -> Self::Sum;
    /// `acc` plus the squares of `self - mean` in float64.
    unsafe fn add_squares_to_sum(self, mean: f64, acc: Self::Sum) -> Self::Sum;
    unsafe fn total(acc: Self::Sum) -> f64;
    /// The even and the odd floats of the `2 LANES` in `lo` then `hi`.
    unsafe fn even_odd(lo: Self, hi: Self) -> (Self, Self);
    /// The lanes, in the first `LANES` floats.
    unsafe fn to_array(self) -> [f32; 16];
    /// Lanes `shift..` of `self` followed by the first `shift` lanes of `next` (`shift` below
    /// `LANES`; a constant where inlined): the vector `shift` floats on from `self`'s.
    unsafe fn shifted(self, next: Self, shift: usize) -> Self;

    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller's.
        unsafe { Self::splat(0.0) }
    }

    /// The larger of the two, NaN in either winning (`conv::max_pool::max`'s rule).
    #[inline(always)]
    unsafe fn max_nan(self, b: Self) -> Self {
        // SAFETY: the caller's. (`b.max(self)` is `self` when either is NaN: a NaN `self`
        // stays, a NaN `b` is selected.)
        unsafe { Self::select(b.is_nan(), b, b.max(self)) }
    }

    /// The first `n` floats at `p` (the others `fill`): a whole vector when `n >= LANES`.
    #[inline(always)]
    unsafe fn load_up_to(p: *const f32, n: usize, fill: f32) -> Self {
        // SAFETY: the caller's.
        unsafe {
            if n >= Self::LANES {
                Self::load(p)
            } else {
                Self::load_first(p, n, fill)
            }
        }
    }

    /// Stores the first `n` lanes at `p`: a whole vector when `n >= LANES`.
    #[inline(always)]
    unsafe fn store_up_to(self, p: *mut f32, n: usize) {
        // SAFETY: the caller's.
        unsafe {
            if n >= Self::LANES {
                self.store(p)
            } else {
                self.store_first(p, n)
            }
        }
    }
}

/// `$vis unsafe fn $name(isa: Isa, args..) -> ret`: `$generic::<V>(args..)` compiled for
/// each vector set of [`Isa`](crate::isa::Isa) (`V` its [`F32s`], the set's features
/// enabled) and called for `isa`'s. Its safety contract is `$generic`'s, and that `isa`
/// is a vector set (not `Portable`) that the CPU runs. Const parameters
/// (`fn name<const K: usize>(..)`) pass on to `$generic::<V, K>`: each instance is a
/// function of its own per set, which LLVM optimises apart from the others (one function
/// holding every instance's inlined code is the slowest part of a build).
macro_rules! for_each_isa {
    ($(#[$attr:meta])* $vis:vis fn $name:ident $(<$(const $c:ident: $cty:ty),*>)? ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $generic:ident) => {
        $(#[$attr])*
        ///
        /// # Safety
        /// `isa` is a vector set that the CPU runs; and the generic function's contract.
        #[cfg(target_arch = "x86_64")]
        $vis unsafe fn $name $(<$(const $c: $cty),*>)? (isa: $crate::isa::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2 $(<$(const $c: $cty),*>)? ($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's.
                unsafe { $generic::<std::arch::x86_64::__m256 $($(, $c)*)?>($($arg),*) }
            }
            #[target_feature(enable = "avx512f,avx2,fma")]
            unsafe fn avx512 $(<$(const $c: $cty),*>)? ($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's.
                unsafe { $generic::<std::arch::x86_64::__m512 $($(, $c)*)?>($($arg),*) }
            }
            // SAFETY: the caller's: the CPU runs `isa`.
            unsafe {
                match isa {
                    $crate::isa::Isa::Avx2 => avx2 $(::<$($c),*>)? ($($arg),*),
                    $crate::isa::Isa::Avx512 => avx512 $(::<$($c),*>)? ($($arg),*),
                    $crate::isa::Isa::Portable => unreachable!(concat!(stringify!($name), " has no portable code")),
                }
            }
        }
    };
}
pub(crate) use for_each_isa;

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::isa::Isa;

    for_each_isa! {
        /// Each shift of `x`'s first vector into its second.
        fn shifts(x: &[f32; 32]) -> Vec<[f32; 16]> => shifts_generic
    }

    #[inline(always)]
    unsafe fn shifts_generic<V: F32s>(x: &[f32; 32]) -> Vec<[f32; 16]> {
        // SAFETY: the caller's (x holds two vectors of either width).
        unsafe {
            let (a, b) = (V::load(x.as_ptr()), V::load(x.as_ptr().add(V::LANES)));
            (0..V::LANES).map(|shift| a.shifted(b, shift).to_array()).collect()
        }
    }

    for_each_isa! {
        /// `a[i].max_nan(b[i])` lane by lane.
        fn max_nan(a: &[f32; 16], b: &[f32; 16]) -> [f32; 16] => max_nan_generic
    }

    #[inline(always)]
    unsafe fn max_nan_generic<V: F32s>(a: &[f32; 16], b: &[f32; 16]) -> [f32; 16] {
        // SAFETY: the caller's (a and b hold a vector of either width).
        unsafe { V::load(a.as_ptr()).max_nan(V::load(b.as_ptr())).to_array() }
    }

    #[test]
    fn max_nan_lets_a_nan_in_either_operand_win() {
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        let a = [1.0, nan, nan, -inf, 3.0, -2.0, 0.0, -0.0, nan, 5.0, -inf, inf, 1e-40, -7.0, 2.0, nan];
        let b = [nan, 1.0, nan, nan, -3.0, -1.0, -0.0, 0.0, -inf, 5.0, -inf, nan, 2e-40, -8.0, inf, -inf];
        for isa in Isa::every_available().filter(|&isa| isa != Isa::Portable) {
            // SAFETY: the CPU runs `isa`, a vector set.
            let got = unsafe { max_nan(isa, &a, &b) };
            for (i, ((&x, &y), &g)) in
                a.iter().zip(&b).zip(&got).enumerate().take(if isa == Isa::Avx2 { 8 } else { 16 })
            {
                let want = if x.is_nan() || y.is_nan() { nan } else { x.max(y) };
                // (Zeros of either sign are equal: which one a set returns is its own.)
                assert!(g == want || (g.is_nan() && want.is_nan()), "{isa:?} lane {i}: max_nan({x}, {y}) = {g}");
            }
        }
    }

    #[test]
    fn a_shifted_vector_holds_the_floats_shift_on() {
        let x: [f32; 32] = std::array::from_fn(|i| i as f32);
        for isa in Isa::every_available().filter(|&isa| isa != Isa::Portable) {
            // SAFETY: the CPU runs `isa`, a vector set.
            let got = unsafe { shifts(isa, &x) };
            let lanes = got.len();
            for (shift, v) in got.iter().enumerate() {
                assert_eq!(v[..lanes], x[shift..shift + lanes], "{isa:?}, shift {shift}");
            }
        }
    }
}
