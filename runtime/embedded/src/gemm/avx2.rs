//! The single-threaded AVX2 + FMA GEMM, blocked as in BLIS: B is packed in blocks of kc x nc
//! (kept in L3), A in blocks of mc x kc (kept in L2), and a 6 x (2 vectors) register tile
//! (6 x 16 for f32, 6 x 8 for f64: 12 accumulators, 2 loads of B, 1 broadcast of A) runs
//! over kc, reading a kc x NR panel of B that stays in L1; a last panel of at most one
//! vector's columns takes a tile one vector wide. Packing copies any strides
//! (zero included) into unit-stride panels padded with zeros, so the inner loop never
//! looks at the strides. Few rows of A ([`short`]) take smaller blocks of B, and a single
//! row panel reads contiguous rows of B in place.
//!
//! Measured on the 2-core AVX2 EPYC, busy with other builds (benches/gemm.rs): about 0.8
//! of the FMA peak at 1024^3 on 1 and 2 threads, 0.7 at 64 x 1024 x 4096 (packing B, read
//! from memory, costs a tenth: 0.78 with B packed at compile time); ahead of `matrixmultiply` and
//! the `gemm` crate at these sizes, behind the `gemm` crate on tiny products (m = 1 or 8,
//! 64^3).
//!
//! Cranelift emits no 256-bit vectors, hence this kernel compiled by rustc; runtime
//! detection picks it ([`available`]) and the whole loop nest is compiled for AVX2 + FMA.

use super::{Bias, Element, Operands, Problem};
use crate::spare;
use aotc_abi::gemm::Activation;
use std::arch::x86_64::*;

/// Rows of the register tile.
const MR: usize = 6;

/// The vector operations the kernel needs, on 256-bit vectors of `Self`.
pub trait Simd: Element {
    type V: Copy;
    const LANES: usize;
    /// Block sizes (rows of A, depth, columns of B) for the caches of AVX2-era x86 cores
    /// (32 KiB L1, 512 KiB+ L2): a kc x NR panel of B fills half of L1, an mc x kc block of
    /// A a quarter (f32) or half (f64) of L2, a kc x nc block of B 4 MiB.
    const MC: usize;
    const KC: usize;
    const NC: usize;
    /// Columns of the B blocks of [`short`], which stay in L2 (256 KiB).
    const NS: usize;
    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: Self) -> Self::V;
    unsafe fn load(p: *const Self) -> Self::V;
    unsafe fn store(p: *mut Self, v: Self::V);
    /// `a * b + c`, rounded once.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn vmul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn vadd(a: Self::V, b: Self::V) -> Self::V;
    /// The activation lane by lane (`crate::activation::scalar`'s values).
    unsafe fn activate(v: Self::V, activation: Activation) -> Self::V;
}

// The methods are `inline(always)` so that they are compiled inside `blocked`, with its
// target features; the intrinsics need AVX (and FMA), which `available` checked.
macro_rules! simd {
    ($t:ty, $v:ty, $lanes:expr, ($mc:expr, $kc:expr, $nc:expr, $ns:expr),
     $zero:ident, $splat:ident, $load:ident, $store:ident, $fmadd:ident, $mul:ident, $add:ident, $activate:path) => {
        impl Simd for $t {
            type V = $v;
            const LANES: usize = $lanes;
            const MC: usize = $mc;
            const KC: usize = $kc;
            const NC: usize = $nc;
            const NS: usize = $ns;
            #[inline(always)]
            unsafe fn zero() -> $v {
                // SAFETY: AVX, checked by `available`.
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
            unsafe fn fmadd(a: $v, b: $v, c: $v) -> $v {
                // SAFETY: FMA, checked by `available`.
                unsafe { $fmadd(a, b, c) }
            }
            #[inline(always)]
            unsafe fn vmul(a: $v, b: $v) -> $v {
                // SAFETY: AVX, checked by `available`.
                unsafe { $mul(a, b) }
            }
            #[inline(always)]
            unsafe fn vadd(a: $v, b: $v) -> $v {
                // SAFETY: AVX, checked by `available`.
                unsafe { $add(a, b) }
            }
            #[inline(always)]
            unsafe fn activate(v: $v, activation: Activation) -> $v {
                // SAFETY: AVX2 and FMA, checked by `available`.
                unsafe { $activate(v, activation) }
            }
        }
    };
}

simd!(
    f32,
    __m256,
    8,
    (120, 256, 4080, 256),
    _mm256_setzero_ps,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps,
    _mm256_mul_ps,
    _mm256_add_ps,
    crate::activation::avx2::lanes8
);
simd!(
    f64,
    __m256d,
    4,
    (120, 256, 2040, 128),
    _mm256_setzero_pd,
    _mm256_set1_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_fmadd_pd,
    _mm256_mul_pd,
    _mm256_add_pd,
    activate_f64
);

/// [`Simd::activate`] for 4 doubles: ReLU in the vector (the compiler fuses activations
/// only into float32 products), the others lane by lane.
#[inline(always)]
unsafe fn activate_f64(v: __m256d, activation: Activation) -> __m256d {
    // SAFETY: AVX, checked by `available`; `lanes` holds 4 doubles.
    unsafe {
        match activation {
            Activation::None => v,
            Activation::Relu => _mm256_max_pd(_mm256_setzero_pd(), v),
            _ => {
                let mut lanes = [0f64; 4];
                _mm256_storeu_pd(lanes.as_mut_ptr(), v);
                for x in &mut lanes {
                    *x = crate::activation::scalar(activation, *x as f32) as f64;
                }
                _mm256_loadu_pd(lanes.as_ptr())
            }
        }
    }
}

/// Whether this CPU runs the kernel.
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// The register tile (rows, columns).
pub fn register_tile<T: Simd>() -> (usize, usize) {
    (MR, 2 * T::LANES)
}

/// The kernel, for [`super::Kernel`].
///
/// # Safety
/// [`available`] is true, and the Kernel contract.
pub unsafe fn gemm<T: Simd>(p: Problem<T>) {
    // SAFETY: the caller's contract.
    unsafe { blocked(p, Operands::default()) }
}

// The packed layout is this kernel's own panels.
const _: () = assert!(
    <f32 as Simd>::KC == aotc_abi::gemm::KC
        && MR == aotc_abi::gemm::MR
        && 2 * <f32 as Simd>::LANES == aotc_abi::gemm::NR
);

/// The kernel with operands packed at compile time (`super::gemm_packed`).
///
/// # Safety
/// [`available`] is true, and `super::gemm_packed`'s contract for this block.
pub unsafe fn gemm_packed(p: Problem<f32>, packed: Operands) {
    // SAFETY: the caller's contract.
    unsafe { blocked(p, packed) }
}

/// Bytes of a packing buffer kept on the stack: small products (attention heads, a few
/// rows) would otherwise pay two heap allocations per call, more than their arithmetic.
/// Two per GEMM call: 16 KiB of stack.
const INLINE_BYTES: usize = 8 * 1024;

#[repr(C, align(64))]
struct Inline([std::mem::MaybeUninit<u8>; INLINE_BYTES]);

/// A 64-byte aligned buffer of `len` elements, written before it is read: on the stack
/// when it fits [`INLINE_BYTES`], else one of the call's spare buffers (`crate::spare`:
/// kept by the instance, so a steady call allocates nothing).
// (The inline variant's size is the point: it lives in the GEMM's frame.)
#[allow(clippy::large_enum_variant)]
enum Buffer<T> {
    Inline(Inline),
    Spare { storage: spare::Buffer, offset: usize, element: std::marker::PhantomData<T> },
}

impl<T> Buffer<T> {
    fn new(len: usize) -> Self {
        let bytes = len * size_of::<T>();
        if bytes <= INLINE_BYTES {
            return Buffer::Inline(Inline([std::mem::MaybeUninit::uninit(); INLINE_BYTES]));
        }
        // Floats enough for the bytes and for a 64-byte aligned start.
        let mut storage = spare::Handle::current().take((bytes + 64).div_ceil(size_of::<f32>()));
        let offset = storage.as_mut_ptr().cast::<u8>().align_offset(64);
        Buffer::Spare { storage, offset, element: std::marker::PhantomData }
    }

    /// Writing through the pointer is sound anywhere in the `len` elements; reading only
    /// where written.
    fn ptr(&mut self) -> *mut T {
        match self {
            Buffer::Inline(bytes) => bytes.0.as_mut_ptr().cast(),
            // 64-byte aligned, so aligned for T; `len` elements fit after the offset.
            Buffer::Spare { storage, offset, .. } => storage.as_mut_ptr().cast::<u8>().wrapping_add(*offset).cast(),
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn blocked<T: Simd>(p: Problem<T>, packed: Operands) {
    if p.m == 0 || p.n == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        if p.k == 0 {
            // (`gemm_packed` gives an empty product's output pass before this.)
            scale(p);
        } else if p.m <= T::MC {
            short(p, packed)
        } else {
            tall(p, packed)
        }
    }
}

// Only f32 is ever packed (gemm_packed), so T is f32 wherever a packed operand is read.

/// The `mc` x `kc` block of A at (ic, pc) as panels: the packed A's own, or copied into `buf`.
#[inline(always)]
unsafe fn a_panels<T: Simd>(
    p: &Problem<T>,
    packed: Operands,
    buf: *mut T,
    ic: usize,
    pc: usize,
    mc: usize,
    kc: usize,
) -> *const T {
    match packed.a {
        Some(a) => a.panels(p.k, pc, ic).cast(),
        None => {
            // SAFETY: the block lies inside A and fits `buf` (the callers size it so).
            unsafe { pack_a(buf, mc, kc, p.a.offset(ic as isize * p.rsa + pc as isize * p.csa), p.rsa, p.csa) };
            buf
        }
    }
}

/// The `kc` x `nc` block of B at (pc, jc) as panels: the packed B's own, or copied into
/// `buf`.
#[inline(always)]
unsafe fn b_panels<T: Simd>(
    p: &Problem<T>,
    packed: Operands,
    buf: *mut T,
    pc: usize,
    jc: usize,
    kc: usize,
    nc: usize,
) -> *const T {
    match packed.b {
        Some(b) => b.panels(p.k, pc, jc).cast(),
        None => {
            // SAFETY: the block lies inside B and fits `buf` (the callers size it so).
            unsafe { pack_b::<T>(buf, kc, nc, p.b.offset(pc as isize * p.rsb + jc as isize * p.csb), p.rsb, p.csb) };
            buf
        }
    }
}

/// The general loop nest: each kc x nc block of B is packed once and serves every mc x kc
/// block of A.
#[inline(always)]
unsafe fn tall<T: Simd>(p: Problem<T>, packed: Operands) {
    let nr = 2 * T::LANES;
    let mut a_buf = Buffer::<T>::new(if packed.a.is_some() { 0 } else { T::MC * T::KC.min(p.k) });
    let mut b_buf =
        Buffer::<T>::new(if packed.b.is_some() { 0 } else { T::KC.min(p.k) * T::NC.min(p.n.next_multiple_of(nr)) });
    let (a_pack, b_pack) = (a_buf.ptr(), b_buf.ptr());
    // Blocks of rows of equal size (whole panels, at most MC): 128 rows as 2 x 66, not
    // 120 + 8, whose last block would run short tiles.
    let blocks = p.m.div_ceil(T::MC);
    let mc_step = p.m.div_ceil(blocks).next_multiple_of(MR);
    // SAFETY (every block below): indices stay below m, k and n, inside the caller's
    // matrices; the packed blocks fit the buffers sized from the same bounds.
    for jc in (0..p.n).step_by(T::NC) {
        let nc = T::NC.min(p.n - jc);
        for pc in (0..p.k).step_by(T::KC) {
            let kc = T::KC.min(p.k - pc);
            // The first block of the depth applies beta; the others add to it.
            let beta = if pc == 0 { p.beta } else { T::ONE };
            let b_block = unsafe { b_panels(&p, packed, b_pack, pc, jc, kc, nc) };
            for ic in (0..p.m).step_by(mc_step) {
                let mc = mc_step.min(p.m - ic);
                let a_block = unsafe { a_panels(&p, packed, a_pack, ic, pc, mc, kc) };
                for jr in (0..nc).step_by(nr) {
                    let c = unsafe { p.c.offset(ic as isize * p.rsc + (jc + jr) as isize * p.csc) };
                    let out = Out {
                        c,
                        rsc: p.rsc,
                        csc: p.csc,
                        cols: nr.min(nc - jr),
                        alpha: p.alpha,
                        beta,
                        pass: pass(&p, packed, pc, kc, ic, jc + jr),
                    };
                    unsafe { panel(mc, kc, a_block, b_block.add(jr * kc), nr as isize, out) };
                }
            }
        }
    }
}

/// At most one block of A (m <= MC): A is packed once per depth block (which stays in L2
/// across all of B's columns), and B in kc x NS blocks that stay in L2 (a kc x NC block,
/// for so few rows of A, would round-trip through L3). A single row panel (m <= MR) reads
/// each element of B once: then B is not packed at all when its rows are contiguous.
///
/// The blocks' order: the depth outermost, unless B is packed here and C is larger than
/// [`C_IN_CACHE`] (and all of A fits there too): then B's columns, so that each block of C stays in cache
/// across the depth instead of C making a round trip to memory per depth block (64 x 1024
/// x 4096: 1 MiB of C, 4 depth blocks). (Columns outermost measured slower where C fits:
/// 0.76 against 0.81 of peak at 64 x 576 x 3136.) A packed here is then packed whole,
/// once.
#[inline(always)]
unsafe fn short<T: Simd>(p: Problem<T>, packed: Operands) {
    let nr = 2 * T::LANES;
    let rows = p.m.next_multiple_of(MR);
    let columns_outer =
        packed.b.is_none() && p.m * p.n * size_of::<T>() > C_IN_CACHE && rows * p.k * size_of::<T>() <= C_IN_CACHE;
    let a_len = if packed.a.is_some() {
        0
    } else if columns_outer {
        rows * p.k
    } else {
        rows * T::KC.min(p.k)
    };
    let mut a_buf = Buffer::<T>::new(a_len);
    let mut b_buf =
        Buffer::<T>::new(if packed.b.is_some() { 0 } else { T::KC.min(p.k) * T::NS.min(p.n.next_multiple_of(nr)) });
    let (a_pack, b_pack) = (a_buf.ptr(), b_buf.ptr());
    let direct = packed.b.is_none() && p.m <= MR && p.csb == 1;
    // B packed here from contiguous rows: the next block's rows are fetched into L2 while
    // this one's panels run, so that packing it does not wait on memory.
    let fetch = packed.b.is_none() && !direct && p.csb == 1;
    let (depths, columns) = (p.k.div_ceil(T::KC), p.n.div_ceil(T::NS));
    // The blocks (depth, columns) in order.
    let block = |i: usize| {
        if columns_outer {
            (i % depths * T::KC, i / depths * T::NS)
        } else {
            (i / columns * T::KC, i % columns * T::NS)
        }
    };
    // SAFETY (every block below): as in `tall`.
    for i in 0..depths * columns {
        let (pc, jc) = block(i);
        let (kc, nc) = (T::KC.min(p.k - pc), T::NS.min(p.n - jc));
        let beta = if pc == 0 { p.beta } else { T::ONE };
        // A packed here: depth block pc packed with its first columns, kept at rows * pc
        // when it is packed whole, else in the one block's buffer.
        let a_block = if packed.a.is_some() {
            unsafe { a_panels(&p, packed, a_pack, 0, pc, p.m, kc) }
        } else {
            let at = if columns_outer { unsafe { a_pack.add(rows * pc) } } else { a_pack };
            if jc == 0 {
                unsafe { a_panels(&p, packed, at, 0, pc, p.m, kc) };
            }
            at.cast_const()
        };
        let b = unsafe { p.b.offset(pc as isize * p.rsb + jc as isize * p.csb) };
        let b_block = if direct { b } else { unsafe { b_panels(&p, packed, b_pack, pc, jc, kc, nc) } };
        let next = (fetch && i + 1 < depths * columns).then(|| block(i + 1));
        let panels = nc.div_ceil(nr);
        for (q, jr) in (0..nc).step_by(nr).enumerate() {
            if let Some(next) = next {
                unsafe { fetch_share(&p, next, q, panels) };
            }
            let cols = nr.min(nc - jr);
            let (b, brs) = if !direct {
                (unsafe { b_block.add(jr * kc) }, nr as isize)
            } else if cols == nr {
                (unsafe { b.add(jr) }, p.rsb)
            } else {
                unsafe { pack_b::<T>(b_pack, kc, cols, b.add(jr), p.rsb, p.csb) };
                (b_pack.cast_const(), nr as isize)
            };
            let c = unsafe { p.c.offset((jc + jr) as isize * p.csc) };
            let out = Out {
                c,
                rsc: p.rsc,
                csc: p.csc,
                cols,
                alpha: p.alpha,
                beta,
                pass: pass(&p, packed, pc, kc, 0, jc + jr),
            };
            unsafe { panel(p.m, kc, a_block, b, brs, out) };
        }
    }
}

/// Share `q` of `shares` of the rows of B's block at (depth, column) `next` (its
/// contiguous rows, `short`'s blocks), fetched into L2.
///
/// # Safety
/// The CPU has SSE (as every caller here, compiled for AVX2).
#[inline(always)]
unsafe fn fetch_share<T: Simd>(p: &Problem<T>, (pc, jc): (usize, usize), q: usize, shares: usize) {
    let (depth, cols) = (T::KC.min(p.k - pc), T::NS.min(p.n - jc));
    for r in depth * q / shares..depth * (q + 1) / shares {
        let row = p.b.wrapping_offset((pc + r) as isize * p.rsb + jc as isize);
        for j in (0..cols).step_by(64 / size_of::<T>()) {
            // SAFETY: SSE (the caller's); a prefetch never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(j).cast()) };
        }
    }
}

/// Bytes of C (and of A) that [`short`] counts on staying in cache: half of an L2.
const C_IN_CACHE: usize = 512 * 1024;

/// The output pass of depth block `pc..pc + kc` for the tiles from C's (`row`, `col`): the
/// bias in the first block, the activation in the last.
#[inline(always)]
fn pass<T>(p: &Problem<T>, packed: Operands, pc: usize, kc: usize, row: usize, col: usize) -> Pass {
    Pass {
        bias: if pc == 0 { packed.bias.skip(row, col) } else { Bias::None },
        activation: if pc + kc == p.k { packed.activation } else { Activation::None },
    }
}

/// A packed block of `mc` rows of A times one panel of B (rows `brs` apart), into `out`.
/// A packed panel is followed by the next one B's loops take (the packed layout's order),
/// which each tile fetches a share of into the cache: a weight streamed from memory then
/// arrives before the panel's first tile needs it.
#[inline(always)]
unsafe fn panel<T: Simd>(mc: usize, kc: usize, a_pack: *const T, b: *const T, brs: isize, out: Out<T>) {
    let nr = 2 * T::LANES;
    let (tiles, packed) = (mc.div_ceil(MR), brs == nr as isize);
    // Depths of the next panel per tile (a depth is one cache line of 16 floats).
    let share = kc.div_ceil(tiles.max(1));
    let next = b.wrapping_add(kc * nr);
    for (t, ir) in (0..mc).step_by(MR).enumerate() {
        if packed {
            for p in t * share..((t + 1) * share).min(kc) {
                // A prefetch never faults, past the operand's end included.
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(p * nr).cast());
            }
        }
        // SAFETY: row ir of the block is inside C and the packed A.
        unsafe {
            let pass = Pass { bias: out.pass.bias.skip(ir, 0), ..out.pass };
            let out = Out { c: out.c.offset(ir as isize * out.rsc), pass, ..out };
            tile_rows(MR.min(mc - ir), kc, a_pack.add(ir * kc), b, brs, out);
        }
    }
}

/// `C = beta * C`: the product of an empty depth.
#[inline(always)]
unsafe fn scale<T: Element>(p: Problem<T>) {
    for i in 0..p.m as isize {
        for j in 0..p.n as isize {
            // SAFETY: (i, j) is inside C.
            unsafe {
                let c = p.c.offset(i * p.rsc + j * p.csc);
                *c = if p.beta == T::ZERO { T::ZERO } else { p.beta * *c };
            }
        }
    }
}

// The loops below step pointers instead of multiplying indices by strides: this crate keeps
// overflow checks in release builds, and a checked multiply per element costs as much as
// the copy. The pointers stay inside the caller's matrices whenever they are read.

/// Copies `rows` x `kc` of A into panels of MR rows: element (r, p) of a panel at
/// `p * MR + r`, rows past the last padded with zeros.
#[inline(always)]
unsafe fn pack_a<T: Element>(dst: *mut T, rows: usize, kc: usize, a: *const T, rsa: isize, csa: isize) {
    for i0 in (0..rows).step_by(MR) {
        let h = MR.min(rows - i0);
        let mut src = [a; MR];
        for (r, src) in src.iter_mut().enumerate().take(h) {
            *src = a.wrapping_offset((i0 + r) as isize * rsa);
        }
        // Float32 rows of contiguous depths (activations times packed weights, small
        // products where packing A costs as much as the multiply-adds): 4 depths at a time.
        if h == MR && csa == 1 && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
            // SAFETY: T is f32; as below, with each row's kc depths contiguous.
            unsafe { pack_panel_f32(dst.add(i0 * kc).cast(), kc, src.map(|s| s.cast())) };
            continue;
        }
        // SAFETY: dst holds MR * kc elements per panel; src[r] walks row i0 + r of A.
        unsafe {
            let mut d = dst.add(i0 * kc);
            for _ in 0..kc {
                for (r, src) in src.iter_mut().enumerate() {
                    // A full panel (the common case) gets the copy without the test.
                    *d.add(r) = if h == MR || r < h { **src } else { T::ZERO };
                    *src = src.wrapping_offset(csa);
                }
                d = d.add(MR);
            }
        }
    }
}

/// One full panel of [`pack_a`] from MR float32 rows of `kc` contiguous depths: 4 x 4
/// transposes (rows 0-3) and pair interleaves (rows 4-5) of 4 depths at a time, then the
/// depths left one by one.
///
/// # Safety
/// `dst` holds MR * kc floats, 8-byte aligned; each row holds `kc` floats.
#[inline(always)]
unsafe fn pack_panel_f32(dst: *mut f32, kc: usize, rows: [*const f32; MR]) {
    const _: () = assert!(MR == 6);
    let mut p = 0;
    // SAFETY (all): loads of depths p..p + 4 < kc of each row, stores inside depths p..p + 4
    // of the panel (6 floats each; the pairs 8-byte aligned: dst is, and 6 p + 4 is even).
    unsafe {
        while p + 4 <= kc {
            let r = rows.map(|row| _mm_loadu_ps(row.add(p)));
            let (t0, t1) = (_mm_unpacklo_ps(r[0], r[1]), _mm_unpacklo_ps(r[2], r[3]));
            let (t2, t3) = (_mm_unpackhi_ps(r[0], r[1]), _mm_unpackhi_ps(r[2], r[3]));
            let first = [_mm_movelh_ps(t0, t1), _mm_movehl_ps(t1, t0), _mm_movelh_ps(t2, t3), _mm_movehl_ps(t3, t2)];
            let (u0, u1) = (_mm_castps_pd(_mm_unpacklo_ps(r[4], r[5])), _mm_castps_pd(_mm_unpackhi_ps(r[4], r[5])));
            let d = dst.add(p * MR);
            for (j, v) in first.into_iter().enumerate() {
                _mm_storeu_ps(d.add(j * MR), v);
            }
            let pair = |j: usize| d.add(j * MR + 4).cast::<f64>();
            _mm_store_sd(pair(0), u0);
            _mm_storeh_pd(pair(1), u0);
            _mm_store_sd(pair(2), u1);
            _mm_storeh_pd(pair(3), u1);
            p += 4;
        }
        for p in p..kc {
            for (r, row) in rows.iter().enumerate() {
                *dst.add(p * MR + r) = *row.add(p);
            }
        }
    }
}

/// Panels [`pack_b`] writes at once.
const PACK_PANELS: usize = 4;

/// Copies `kc` x `cols` of B into panels of NR columns: element (p, j) of a panel at
/// `p * NR + j`, columns past the last padded with zeros.
#[inline(always)]
unsafe fn pack_b<T: Simd>(dst: *mut T, kc: usize, cols: usize, b: *const T, rsb: isize, csb: isize) {
    let nr = 2 * T::LANES;
    // SAFETY: dst holds NR * kc elements per panel; the sources walk B's elements (p, j) for
    // p < kc, j < cols.
    unsafe {
        if csb == 1 {
            // Contiguous rows: a few panels at a time (a few write streams, not one per
            // panel: the panels lie kc * NR apart, often a multiple of 4 KiB, where their
            // lines compete for the same L1 sets), depth by depth.
            for g0 in (0..cols).step_by(PACK_PANELS * nr) {
                let mut src = b;
                for p in 0..kc {
                    for j0 in (g0..cols.min(g0 + PACK_PANELS * nr)).step_by(nr) {
                        let (w, d) = (nr.min(cols - j0), dst.add(j0 * kc + p * nr));
                        if w == nr {
                            // A constant length: a few vector moves, not a call to memcpy.
                            std::ptr::copy_nonoverlapping(src.add(j0), d, nr);
                        } else {
                            for j in 0..nr {
                                *d.add(j) = if j < w { *src.add(j0 + j) } else { T::ZERO };
                            }
                        }
                    }
                    src = src.wrapping_offset(rsb);
                }
            }
        } else {
            // Strided rows: each column gathered down its run.
            for j0 in (0..cols).step_by(nr) {
                let w = nr.min(cols - j0);
                for j in 0..nr {
                    let (mut src, mut d) = (b.wrapping_offset((j0 + j) as isize * csb), dst.add(j0 * kc + j));
                    for _ in 0..kc {
                        *d = if j < w { *src } else { T::ZERO };
                        src = src.wrapping_offset(rsb);
                        d = d.add(nr);
                    }
                }
            }
        }
    }
}

/// One depth of the register tile: `acc[r] += a[r] * b[..W * LANES]`.
#[inline(always)]
unsafe fn step<T: Simd, const R: usize, const W: usize>(acc: &mut [[T::V; W]; R], a: *const T, b: *const T) {
    // SAFETY: a holds R elements and b W * LANES (the caller's panels).
    unsafe {
        let mut bv = [T::zero(); W];
        for (h, bv) in bv.iter_mut().enumerate() {
            *bv = T::load(b.add(h * T::LANES));
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = T::splat(*a.add(r));
            for (acc, &bv) in acc.iter_mut().zip(&bv) {
                *acc = T::fmadd(x, bv, *acc);
            }
        }
    }
}

/// Where a register tile goes: C at its top-left element, how many of its columns exist,
/// and `C = activation(alpha * tile + beta * C + bias)` with the [`Pass`] of its depth
/// block.
#[derive(Clone, Copy)]
struct Out<T> {
    c: *mut T,
    rsc: isize,
    csc: isize,
    cols: usize,
    alpha: T,
    beta: T,
    pass: Pass,
}

/// The output pass of one depth block's tile: the bias (float32, only ever given to the
/// float32 kernel) from the tile's first row and column, and the activation.
#[derive(Clone, Copy)]
struct Pass {
    bias: Bias,
    activation: Activation,
}

impl Pass {
    /// Where the bias of element (r, j) of the tile is, as a `T`.
    #[inline(always)]
    fn bias<T: Simd>(&self, r: usize, j: usize) -> Option<*const T> {
        match self.bias {
            Bias::None => None,
            Bias::Rows(b) => Some(b.wrapping_add(r).cast()),
            Bias::Cols(b) => Some(b.wrapping_add(j).cast()),
        }
    }
}

/// A tile of `rows` (1..=MR) rows: each height gets its own code so that a short tile does
/// no wasted multiply-adds, and short ones S sets of accumulators (summed at the end) for
/// about 10 independent chains: an FMA takes 4 to 5 cycles and two issue per cycle. A
/// panel of at most LANES columns (C's last, e.g. 1 of 16 at n = 49) takes the narrow
/// tile, one vector per row, reading the first half of each depth of the B panel.
#[inline(always)]
unsafe fn tile_rows<T: Simd>(rows: usize, kc: usize, a: *const T, b: *const T, brs: isize, out: Out<T>) {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        if out.cols <= T::LANES {
            return match rows {
                6 => tile::<T, 6, 2, 1>(kc, a, b, brs, out),
                5 => tile::<T, 5, 2, 1>(kc, a, b, brs, out),
                4 => tile::<T, 4, 3, 1>(kc, a, b, brs, out),
                3 => tile::<T, 3, 4, 1>(kc, a, b, brs, out),
                2 => tile::<T, 2, 6, 1>(kc, a, b, brs, out),
                _ => tile::<T, 1, 8, 1>(kc, a, b, brs, out),
            };
        }
        match rows {
            6 => tile::<T, 6, 1, 2>(kc, a, b, brs, out),
            5 => tile::<T, 5, 1, 2>(kc, a, b, brs, out),
            4 => tile::<T, 4, 1, 2>(kc, a, b, brs, out),
            3 => tile::<T, 3, 2, 2>(kc, a, b, brs, out),
            2 => tile::<T, 2, 3, 2>(kc, a, b, brs, out),
            _ => tile::<T, 1, 4, 2>(kc, a, b, brs, out),
        }
    }
}

/// The register tile: R rows of the packed A panel `a` times the first W vectors of each
/// row of the B panel `b` (kc rows of 2 * LANES contiguous elements, `brs` apart), written
/// to `out` (at most W * LANES columns); depth p accumulates in set p % S.
#[inline(always)]
unsafe fn tile<T: Simd, const R: usize, const S: usize, const W: usize>(
    kc: usize,
    a: *const T,
    b: *const T,
    brs: isize,
    out: Out<T>,
) {
    let l = T::LANES;
    // SAFETY: a holds kc * MR elements and b kc rows; out's R x cols elements are inside C.
    unsafe {
        // C's rows are far apart: start fetching them now, for the write at the end.
        for r in 0..R {
            let row = out.c.wrapping_offset(r as isize * out.rsc);
            _mm_prefetch::<_MM_HINT_T0>(row.cast());
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(W * l - 1).cast());
        }
        let mut sets = [[[T::zero(); W]; R]; S];
        let (mut a, mut b) = (a, b);
        // Several depths per iteration: the loop's own instructions would otherwise compete
        // with the 2 * R multiply-adds for issue slots.
        const UNROLL: usize = 4;
        for _ in 0..kc / (UNROLL * S) {
            for _ in 0..UNROLL {
                for acc in sets.iter_mut() {
                    step(acc, a, b);
                    a = a.add(MR);
                    b = b.wrapping_offset(brs);
                }
            }
        }
        for _ in 0..kc % (UNROLL * S) {
            step(&mut sets[0], a, b);
            a = a.add(MR);
            b = b.wrapping_offset(brs);
        }
        // Constant indices, no slices: the sets stay in registers (a slice of them, as
        // `&sets[1..]`, kept every accumulator in memory, stored after each multiply-add).
        let mut acc = sets[0];
        #[allow(clippy::needless_range_loop)]
        for set in 1..S {
            for r in 0..R {
                for h in 0..W {
                    acc[r][h] = T::vadd(acc[r][h], sets[set][r][h]);
                }
            }
        }
        let (alpha, beta) = (T::splat(out.alpha), T::splat(out.beta));
        let activation = out.pass.activation;
        if out.cols == W * l && out.csc == 1 {
            for (r, acc) in acc.iter().enumerate() {
                let c = out.c.offset(r as isize * out.rsc);
                for (h, &v) in acc.iter().enumerate() {
                    let c = c.add(h * l);
                    let v = T::vmul(v, alpha);
                    let v = if out.beta == T::ZERO { v } else { T::fmadd(T::load(c), beta, v) };
                    let v = match out.pass.bias {
                        Bias::None => v,
                        Bias::Rows(b) => T::vadd(v, T::splat(*b.add(r).cast::<T>())),
                        Bias::Cols(b) => T::vadd(v, T::load(b.add(h * l).cast::<T>())),
                    };
                    T::store(c, T::activate(v, activation));
                }
            }
        } else {
            // A partial or strided tile: summed element by element in a whole tile row of
            // memory, then (with an activation) activated as vectors, then written out.
            // (Tiny products run mostly here: the plain case stays one loop.)
            let mut tmp = [T::ZERO; 2 * 8];
            let plain = matches!(out.pass.bias, Bias::None) && activation == Activation::None;
            for (r, acc) in acc.iter().enumerate() {
                for (h, &v) in acc.iter().enumerate() {
                    T::store(tmp.as_mut_ptr().add(h * l), v);
                }
                for (j, x) in tmp[..out.cols].iter_mut().enumerate() {
                    let c = out.c.offset(r as isize * out.rsc + j as isize * out.csc);
                    let v = if out.beta == T::ZERO { out.alpha * *x } else { out.alpha * *x + out.beta * *c };
                    if plain {
                        *c = v;
                        continue;
                    }
                    *x = match out.pass.bias::<T>(r, j) {
                        Some(b) => v + *b,
                        None => v,
                    };
                }
                if plain {
                    continue;
                }
                for h in 0..W {
                    T::store(tmp.as_mut_ptr().add(h * l), T::activate(T::load(tmp.as_ptr().add(h * l)), activation));
                }
                for (j, &v) in tmp[..out.cols].iter().enumerate() {
                    *out.c.offset(r as isize * out.rsc + j as isize * out.csc) = v;
                }
            }
        }
    }
}
