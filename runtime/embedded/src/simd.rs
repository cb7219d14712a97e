//! The vector instruction sets the kernels are compiled for, and which one this CPU runs,
//! detected once: AVX-512 (16 lanes of float32) where the CPU has AVX-512F, else AVX2 with
//! FMA (8 lanes), else none (the kernels' portable code). The row and convolution kernels
//! are written once over [`F32s`], a vector of float32 lanes, and compiled for each set
//! by [`for_each_isa!`]; the arithmetic (the polynomials of exp and erf included) is the
//! same operations on either width, so the two agree lane for lane.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use std::sync::atomic::{AtomicU8, Ordering};

/// A vector instruction set the kernels are compiled for, narrower first (a CPU that
/// runs one runs those before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// AVX2 and FMA: 8 lanes.
    Avx2,
    /// AVX-512F (with AVX2 and FMA, which every AVX-512 CPU has): 16 lanes.
    Avx512,
}

/// [`detect`]'s answer, cached: 0 until known, then 1 + its code.
static DETECTED: AtomicU8 = AtomicU8::new(0);

/// The widest set this CPU runs, None without AVX2 and FMA (an x86-64 baseline CPU, or
/// another architecture); in tests, the one [`with_isa`] forces.
pub fn isa() -> Option<Isa> {
    #[cfg(test)]
    if let code @ 1.. = FORCED.load(Ordering::Relaxed) {
        return [None, Some(Isa::Avx2), Some(Isa::Avx512)][code as usize - 1];
    }
    let code = match DETECTED.load(Ordering::Relaxed) {
        0 => {
            let code = match detect() {
                None => 1,
                Some(Isa::Avx2) => 2,
                Some(Isa::Avx512) => 3,
            };
            DETECTED.store(code, Ordering::Relaxed);
            code
        }
        code => code,
    };
    [None, Some(Isa::Avx2), Some(Isa::Avx512)][code as usize - 1]
}

fn detect() -> Option<Isa> {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        return Some(if std::is_x86_feature_detected!("avx512f") { Isa::Avx512 } else { Isa::Avx2 });
    }
    None
}

/// Whether this CPU runs `isa`.
pub fn runs(isa: Isa) -> bool {
    self::isa() >= Some(isa)
}

/// Every set this CPU runs, narrowest first: the tests run each kernel on all of them.
#[cfg(test)]
pub fn runnable() -> Vec<Isa> {
    match detect() {
        None => vec![],
        Some(Isa::Avx2) => vec![Isa::Avx2],
        Some(Isa::Avx512) => vec![Isa::Avx2, Isa::Avx512],
    }
}

/// The set [`isa`] answers while a test runs [`with_isa`]: 0 for none forced, else 1 +
/// its code (0 for no set, 1 AVX2, 2 AVX-512).
#[cfg(test)]
static FORCED: AtomicU8 = AtomicU8::new(0);

/// Runs `f` with [`isa`] answering `isa` (which this CPU must run, or None: the portable
/// code), so that a test covers each set through the entry points. The tests that force
/// one take turns; the others meanwhile run on the forced set, which computes the same.
#[cfg(test)]
pub fn with_isa<R>(isa: Option<Isa>, f: impl FnOnce() -> R) -> R {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    /// Ends the forcing, also when `f` panics.
    struct Unforce;
    impl Drop for Unforce {
        fn drop(&mut self) {
            FORCED.store(0, Ordering::Relaxed);
        }
    }
    assert!(isa <= detect(), "{isa:?} on a CPU that runs {:?}", detect());
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    FORCED.store(1 + isa.map_or(0, |isa| isa as u8 + 1), Ordering::Relaxed);
    let _unforce = Unforce;
    f()
}

/// [`runnable`]'s sets, then None (the portable code).
#[cfg(test)]
pub fn every_isa() -> impl Iterator<Item = Option<Isa>> {
    runnable().into_iter().map(Some).chain([None])
}

/// Float32 lanes of one vector register, and the operations the kernels use on them.
/// Every method is `inline(always)` so that it compiles inside its caller, with the
/// caller's target features: the caller is compiled for the set (its features enabled)
/// and runs only where the CPU has it, which is each method's safety contract.
///
/// # Safety
/// Implemented only for the vector types of a set of [`Isa`].
pub unsafe trait F32s: Copy {
    const LANES: usize;
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
    /// Rounded to the nearest integer, ties to even.
    unsafe fn round(self) -> Self;
    /// `self * 2^n` for lanes of `n` that are integers in [-254, 254] (as two factors
    /// `2^(n/2)`, so that neither overflows the exponent).
    unsafe fn scale_pow2(self, n: Self) -> Self;
    /// `|self|`.
    unsafe fn abs(self) -> Self;
    /// `self` with the sign bit of `sign` set where it is set there.
    unsafe fn or_sign(self, sign: Self) -> Self;
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
/// each [`Isa`] (`V` its [`F32s`], the set's features enabled) and called for `isa`'s.
/// Its safety contract is `$generic`'s, and that the CPU runs `isa`.
macro_rules! for_each_isa {
    ($(#[$attr:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $generic:ident) => {
        $(#[$attr])*
        ///
        /// # Safety
        /// The CPU runs `isa`; and the generic function's contract.
        #[cfg(target_arch = "x86_64")]
        $vis unsafe fn $name(isa: $crate::simd::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's.
                unsafe { $generic::<std::arch::x86_64::__m256>($($arg),*) }
            }
            #[target_feature(enable = "avx512f,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's.
                unsafe { $generic::<std::arch::x86_64::__m512>($($arg),*) }
            }
            // SAFETY: the caller's: the CPU runs `isa`.
            unsafe {
                match isa {
                    $crate::simd::Isa::Avx2 => avx2($($arg),*),
                    $crate::simd::Isa::Avx512 => avx512($($arg),*),
                }
            }
        }
    };
}
pub(crate) use for_each_isa;
