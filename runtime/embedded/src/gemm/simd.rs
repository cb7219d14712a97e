//! The vector instruction sets the blocked GEMM ([`super::blocked`]) is compiled for, as
//! marker types implementing [`Simd`] for each element type: AVX2 + FMA (256-bit vectors)
//! and AVX-512F (512-bit vectors, 32 registers). The loop nest is written once; each set
//! says its vector operations, its register tile and its cache blocks.

use super::blocked::{self, Out, B};
use super::Element;
use crate::simd::F32s;
use aotc_abi::gemm::Activation;
use std::arch::x86_64::*;

/// AVX2 + FMA: 16 vector registers of 256 bits.
pub struct Avx2;

/// AVX-512F (with AVX2 + FMA for the helpers compiled beside it): 32 registers of 512 bits.
pub struct Avx512;

/// The vector operations and the register tile of one instruction set on elements `T`.
///
/// The register tile is `TILE_PANELS` panels of A (of `aotc_abi::gemm::MR` rows each)
/// times `B_PANELS` panels of B of `VECTORS` vectors each: AVX2 takes 6 rows x 1 panel of
/// 2 vectors (12 accumulators of its 16 registers), AVX-512 12 rows x 2 panels of 1
/// vector (24 accumulators of 32). Both read panels of 16 float32 columns, those the
/// compiler packs.
pub trait Simd<T: Element> {
    type V: Copy;
    const LANES: usize;
    /// Panels of A (rows: `TILE_PANELS * MR`) in a register tile.
    const TILE_PANELS: usize;
    /// Vectors per row of a panel of B: the panels are `VECTORS * LANES` columns wide.
    const VECTORS: usize;
    /// Panels of B in a register tile (columns: `B_PANELS * VECTORS * LANES`).
    const B_PANELS: usize;
    /// Block sizes (rows of A, depth, columns of B): a kc x NR panel of B fills half of
    /// L1 (32 KiB+), an mc x kc block of A a fraction of L2, a kc x nc block of B 4 MiB
    /// of L3.
    const MC: usize;
    const KC: usize;
    const NC: usize;
    /// Columns of the B blocks of `blocked::short`, which stay in L2 (256 KiB).
    const NS: usize;
    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: T) -> Self::V;
    unsafe fn load(p: *const T) -> Self::V;
    unsafe fn store(p: *mut T, v: Self::V);
    /// The first `n` lanes (below LANES) from `p`, the others 0; nothing past them is read.
    unsafe fn load_first(p: *const T, n: usize) -> Self::V;
    /// Writes the first `n` lanes (below LANES) to `p`; nothing past them is touched.
    unsafe fn store_first(p: *mut T, v: Self::V, n: usize);
    /// `a * b + c`, rounded once.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn vmul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn vadd(a: Self::V, b: Self::V) -> Self::V;
    /// The activation of every lane of every vector (`crate::activation::scalar`'s values):
    /// ReLU in registers, the others through `crate::activation::apply`'s code, out of line.
    unsafe fn activate_each(vs: &mut [Self::V], activation: Activation);
    /// [`blocked::tile`] of R rows, S sets of accumulators and W vectors, compiled for this
    /// set as a function of its own, never inlined: inlined into one loop nest, the 24 tile
    /// shapes made functions of 90 000 lines of LLVM IR, which LLVM optimised on one core
    /// for most of the support library's build. A call per tile costs a few cycles against
    /// its depth of multiply-adds.
    ///
    /// # Safety
    /// As [`blocked::tile`]; the CPU runs this set.
    unsafe fn tile<const R: usize, const S: usize, const W: usize>(kc: usize, a: *const T, b: B<T>, out: Out<T>);
}

// The methods are `inline(always)` so that they are compiled inside the loop nest, with
// its target features (`blocked::avx2`, `blocked::avx512`), which `Isa::available` checked;
// `tile`, out of line, enables the set's features itself (`$features`).
macro_rules! simd {
    ($isa:ty, $features:literal, $t:ty, $v:ty, $lanes:expr, ($panels:expr, $vectors:expr, $b_panels:expr), ($mc:expr, $kc:expr, $nc:expr, $ns:expr),
     $zero:ident, $splat:ident, $load:ident, $store:ident, $load_first:path, $store_first:path, $fmadd:ident, $mul:ident,
     $add:ident, $activate:path) => {
        impl Simd<$t> for $isa {
            type V = $v;
            const LANES: usize = $lanes;
            const TILE_PANELS: usize = $panels;
            const VECTORS: usize = $vectors;
            const B_PANELS: usize = $b_panels;
            const MC: usize = $mc;
            const KC: usize = $kc;
            const NC: usize = $nc;
            const NS: usize = $ns;
            #[inline(always)]
            unsafe fn zero() -> $v {
                // SAFETY: the instruction set, checked by `Isa::available`.
                unsafe { $zero() }
            }
            #[inline(always)]
            unsafe fn splat(x: $t) -> $v {
                // SAFETY: as above.
                unsafe { $splat(x) }
            }
            #[inline(always)]
            unsafe fn load(p: *const $t) -> $v {
                // SAFETY: as above; the caller's p points to LANES elements.
                unsafe { $load(p) }
            }
            #[inline(always)]
            unsafe fn store(p: *mut $t, v: $v) {
                // SAFETY: as above.
                unsafe { $store(p, v) }
            }
            #[inline(always)]
            unsafe fn load_first(p: *const $t, n: usize) -> $v {
                // SAFETY: as above; it reads the first n lanes only.
                unsafe { $load_first(p, n) }
            }
            #[inline(always)]
            unsafe fn store_first(p: *mut $t, v: $v, n: usize) {
                // SAFETY: as above; it writes the first n lanes only.
                unsafe { $store_first(p, v, n) }
            }
            #[inline(always)]
            unsafe fn fmadd(a: $v, b: $v, c: $v) -> $v {
                // SAFETY: as above (FMA is part of both sets here).
                unsafe { $fmadd(a, b, c) }
            }
            #[inline(always)]
            unsafe fn vmul(a: $v, b: $v) -> $v {
                // SAFETY: as above.
                unsafe { $mul(a, b) }
            }
            #[inline(always)]
            unsafe fn vadd(a: $v, b: $v) -> $v {
                // SAFETY: as above.
                unsafe { $add(a, b) }
            }
            #[inline(always)]
            unsafe fn activate_each(vs: &mut [$v], activation: Activation) {
                // SAFETY: as above.
                unsafe { $activate(vs, activation) }
            }
            #[inline(never)]
            #[target_feature(enable = $features)]
            unsafe fn tile<const R: usize, const S: usize, const W: usize>(
                kc: usize,
                a: *const $t,
                b: B<$t>,
                out: Out<$t>,
            ) {
                // SAFETY: the caller's.
                unsafe { blocked::tile::<$t, Self, R, S, W>(kc, a, b, out) }
            }
        }
    };
}

simd!(
    Avx2,
    "avx2,fma",
    f32,
    __m256,
    8,
    (1, 2, 1),
    (120, 256, 4080, 256),
    _mm256_setzero_ps,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    f32_load_first::<__m256>,
    f32_store_first::<__m256>,
    _mm256_fmadd_ps,
    _mm256_mul_ps,
    _mm256_add_ps,
    crate::activation::lanes_each
);
simd!(
    Avx2,
    "avx2,fma",
    f64,
    __m256d,
    4,
    (1, 2, 1),
    (120, 256, 2040, 128),
    _mm256_setzero_pd,
    _mm256_set1_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    load_first_f64x4,
    store_first_f64x4,
    _mm256_fmadd_pd,
    _mm256_mul_pd,
    _mm256_add_pd,
    activate_each_f64x4
);
// AVX-512 cores have 1-2 MiB of L2: blocks of A of 144 rows (12 tiles) x 256 depths;
// blocks of B a whole number of tiles (32 columns) wide.
simd!(
    Avx512,
    "avx512f,avx2,fma",
    f32,
    __m512,
    16,
    (2, 1, 2),
    (144, 256, 4064, 256),
    _mm512_setzero_ps,
    _mm512_set1_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    f32_load_first::<__m512>,
    f32_store_first::<__m512>,
    _mm512_fmadd_ps,
    _mm512_mul_ps,
    _mm512_add_ps,
    crate::activation::lanes_each
);
simd!(
    Avx512,
    "avx512f,avx2,fma",
    f64,
    __m512d,
    8,
    (2, 1, 2),
    (144, 256, 2032, 128),
    _mm512_setzero_pd,
    _mm512_set1_pd,
    _mm512_loadu_pd,
    _mm512_storeu_pd,
    load_first_f64x8,
    store_first_f64x8,
    _mm512_fmadd_pd,
    _mm512_mul_pd,
    _mm512_add_pd,
    activate_each_f64x8
);

/// [`Simd::load_first`] of float32: the row kernels' (`crate::simd`), zeros past `n`.
#[inline(always)]
unsafe fn f32_load_first<V: F32s>(p: *const f32, n: usize) -> V {
    // SAFETY: the caller's: the vector set, `n` below LANES floats at `p`.
    unsafe { V::load_first(p, n, 0.0) }
}

/// [`Simd::store_first`] of float32: the row kernels' (`crate::simd`).
#[inline(always)]
unsafe fn f32_store_first<V: F32s>(p: *mut f32, v: V, n: usize) {
    // SAFETY: as above.
    unsafe { v.store_first(p, n) }
}

// [`Simd::load_first`] and [`Simd::store_first`] of float64, masked: lanes outside the
// mask are neither read nor written, so they never fault. (Float64 products are rare: the
// AVX2 masked store, slow on AMD, is not worth avoiding here.)
// SAFETY (every block below): the instruction set, the caller's; `p` holds `n` elements.

/// AVX2's mask of the first `n` of 4 64-bit lanes.
#[inline(always)]
unsafe fn first_lanes_x4(n: usize) -> __m256i {
    // SAFETY: AVX2, the caller's.
    unsafe { _mm256_cmpgt_epi64(_mm256_set1_epi64x(n as i64), _mm256_setr_epi64x(0, 1, 2, 3)) }
}
#[inline(always)]
unsafe fn load_first_f64x4(p: *const f64, n: usize) -> __m256d {
    unsafe { _mm256_maskload_pd(p, first_lanes_x4(n)) }
}
#[inline(always)]
unsafe fn store_first_f64x4(p: *mut f64, v: __m256d, n: usize) {
    unsafe { _mm256_maskstore_pd(p, first_lanes_x4(n), v) }
}
#[inline(always)]
unsafe fn load_first_f64x8(p: *const f64, n: usize) -> __m512d {
    unsafe { _mm512_maskz_loadu_pd(((1u32 << n) - 1) as __mmask8, p) }
}
#[inline(always)]
unsafe fn store_first_f64x8(p: *mut f64, v: __m512d, n: usize) {
    unsafe { _mm512_mask_storeu_pd(p, ((1u32 << n) - 1) as __mmask8, v) }
}

/// [`Simd::activate_each`] for vectors of 4 doubles: ReLU in the vector (the compiler fuses
/// activations only into float32 products), the others lane by lane.
#[inline(always)]
unsafe fn activate_each_f64x4(vs: &mut [__m256d], activation: Activation) {
    // SAFETY: AVX, checked by `Isa::Avx2.available()`; `lanes` holds 4 doubles.
    unsafe {
        for v in vs {
            *v = match activation {
                Activation::None => *v,
                Activation::Relu => _mm256_max_pd(_mm256_setzero_pd(), *v),
                _ => {
                    let mut lanes = [0f64; 4];
                    _mm256_storeu_pd(lanes.as_mut_ptr(), *v);
                    scalar_activation(&mut lanes, activation);
                    _mm256_loadu_pd(lanes.as_ptr())
                }
            }
        }
    }
}

/// [`activate_each_f64x4`] for vectors of 8 doubles.
#[inline(always)]
unsafe fn activate_each_f64x8(vs: &mut [__m512d], activation: Activation) {
    // SAFETY: AVX-512F, checked by `Isa::Avx512.available()`; `lanes` holds 8 doubles.
    unsafe {
        for v in vs {
            *v = match activation {
                Activation::None => *v,
                Activation::Relu => _mm512_max_pd(_mm512_setzero_pd(), *v),
                _ => {
                    let mut lanes = [0f64; 8];
                    _mm512_storeu_pd(lanes.as_mut_ptr(), *v);
                    scalar_activation(&mut lanes, activation);
                    _mm512_loadu_pd(lanes.as_ptr())
                }
            }
        }
    }
}

/// Out of line: inlined, each activation's scalar code was compiled into every tile shape.
#[inline(never)]
fn scalar_activation(lanes: &mut [f64], activation: Activation) {
    for x in lanes {
        *x = crate::activation::scalar(activation, *x as f32) as f64;
    }
}
