//! The single-threaded GEMM, blocked as in BLIS: B is packed in blocks of kc x nc (kept
//! in L3, or L2 for few rows of A), A in blocks of mc x kc (kept in L2), and a register
//! tile runs over kc; the tiles of a block go row of tiles by row of tiles, so that a
//! tile's rows of A stay in L1 while it crosses the block of B ([`sweep`]). The loop nest
//! is written once, generic over the instruction set ([`Simd`]): AVX2 + FMA runs a 6 x
//! (2 vectors) tile (6 x 16 for f32: 12 accumulators, 2 loads of B, 6 broadcasts of A per
//! depth), AVX-512 a 12 x (2 vectors) tile over two panels of A and two of B (12 x 32 for
//! f32: 24 accumulators, 2 loads of B, 12 broadcasts per depth), so both read the same
//! 16-column panels of B, which the compiler packs for either. Last columns of at most
//! one vector take a tile one vector wide. Packing copies any strides (zero included)
//! into unit-stride panels padded with zeros, so the inner loop never looks at the
//! strides. Few rows of A ([`short`]) take smaller blocks of B, and a single row of tiles
//! reads contiguous rows of B in place.
//!
//! Measured (benches/gemm.rs, one thread): on a 2-core AVX2 EPYC, AVX2 about 0.8 of the
//! FMA peak at 1024^3, 0.7 at 64 x 1024 x 4096 (0.88-0.92 with B packed at compile time,
//! Zen 3, since the output pass works on whole tiles; 0.6-0.66 at 96 x 16 x 1024); on a
//! 2-core Xeon with AVX-512 (Sapphire Rapids class), AVX-512 0.84-0.87 of the AVX-512
//! FMA peak at 1024^3; on bench_mlp's layers (64 x 1024 x 4096, 64 x 4096 x 1024,
//! 64 x 1024 x 1024) with B packed at compile time 0.73-0.85, 0.63-0.65 with B packed
//! here; 1.5 to 2 times the AVX2 loop nest on the same machine, above `matrixmultiply`'s
//! AVX-512 kernel (0.58-0.79).
//!
//! Cranelift emits no 256-bit vectors, hence this kernel compiled by rustc; run-time
//! detection (`super::Isa`) picks an instruction set and the whole loop nest is compiled
//! for it ([`avx2`], [`avx512`]).

use super::simd::{Avx2, Avx512, Simd};
use super::{Bias, Element, Operands, Problem};
use crate::spare;
use aotc_abi::gemm::{Activation, MR};
use std::arch::x86_64::*;

mod output;
mod pack;
pub(in crate::gemm) use output::Out;
use output::Pass;
use pack::{pack_a, pack_b};

/// The loop nest compiled for AVX2 + FMA, for [`super::Kernel`] (with `Operands::default()`)
/// and `super::gemm_packed`.
///
/// # Safety
/// `Isa::Avx2.available()`; the Kernel contract, and `super::gemm_packed`'s for this block
/// when an operand is packed (only ever float32).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn avx2<T: Element>(p: Problem<T>, packed: Operands)
where
    Avx2: Simd<T>,
{
    // SAFETY: the caller's contract.
    unsafe { blocked::<T, Avx2>(p, packed) }
}

/// [`avx2`] compiled for AVX-512F.
///
/// # Safety
/// `Isa::Avx512.available()`, and as [`avx2`].
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn avx512<T: Element>(p: Problem<T>, packed: Operands)
where
    Avx512: Simd<T>,
{
    // SAFETY: the caller's contract.
    unsafe { blocked::<T, Avx512>(p, packed) }
}

/// Rows of `I`'s register tile.
const fn tile_rows_of<T: Element, I: Simd<T>>() -> usize {
    I::TILE_PANELS * MR
}

/// Columns of `I`'s register tile.
const fn tile_cols_of<T: Element, I: Simd<T>>() -> usize {
    I::B_PANELS * I::VECTORS * I::LANES
}

/// The register tile (rows, columns) of `I`: blocks of C are cut at multiples of it.
pub fn register_tile<T: Element, I: Simd<T>>() -> (usize, usize) {
    (tile_rows_of::<T, I>(), tile_cols_of::<T, I>())
}

// The packed layout is both instruction sets' own panels.
const _: () = assert!(
    <Avx2 as Simd<f32>>::KC == aotc_abi::gemm::KC
        && <Avx512 as Simd<f32>>::KC == aotc_abi::gemm::KC
        && <Avx2 as Simd<f32>>::VECTORS * <Avx2 as Simd<f32>>::LANES == aotc_abi::gemm::NR
        && <Avx512 as Simd<f32>>::VECTORS * <Avx512 as Simd<f32>>::LANES == aotc_abi::gemm::NR
);

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

#[inline(always)]
unsafe fn blocked<T: Element, I: Simd<T>>(p: Problem<T>, packed: Operands) {
    if p.m == 0 || p.n == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        if p.k == 0 {
            // (`gemm_packed` gives an empty product's output pass before this.)
            scale(p);
        } else if p.m <= I::MC {
            short::<T, I>(p, packed)
        } else {
            tall::<T, I>(p, packed)
        }
    }
}

// Only f32 is ever packed (gemm_packed), so T is f32 wherever a packed operand is read.

/// The `mc` x `kc` block of A at (ic, pc) as panels: the packed A's own, or copied into `buf`.
#[inline(always)]
unsafe fn a_panels<T: Element>(
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
unsafe fn b_panels<T: Element, I: Simd<T>>(
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
            unsafe { pack_b::<T, I>(buf, kc, nc, p.b.offset(pc as isize * p.rsb + jc as isize * p.csb), p.rsb, p.csb) };
            buf
        }
    }
}

/// The general loop nest: each kc x nc block of B is packed once and serves every mc x kc
/// block of A.
#[inline(always)]
unsafe fn tall<T: Element, I: Simd<T>>(p: Problem<T>, packed: Operands) {
    let (nr, tc) = (I::VECTORS * I::LANES, tile_cols_of::<T, I>());
    let mut a_buf = Buffer::<T>::new(if packed.a.is_some() { 0 } else { I::MC * I::KC.min(p.k) });
    let mut b_buf =
        Buffer::<T>::new(if packed.b.is_some() { 0 } else { I::KC.min(p.k) * I::NC.min(p.n.next_multiple_of(tc)) });
    let (a_pack, b_pack) = (a_buf.ptr(), b_buf.ptr());
    // Blocks of rows of equal size (whole panels, at most MC): 128 rows as 2 x 66, not
    // 120 + 8, whose last block would run short tiles.
    let blocks = p.m.div_ceil(I::MC);
    let mc_step = p.m.div_ceil(blocks).next_multiple_of(tile_rows_of::<T, I>());
    // SAFETY (every block below): indices stay below m, k and n, inside the caller's
    // matrices; the packed blocks fit the buffers sized from the same bounds.
    for jc in (0..p.n).step_by(I::NC) {
        let nc = I::NC.min(p.n - jc);
        for pc in (0..p.k).step_by(I::KC) {
            let kc = I::KC.min(p.k - pc);
            // The first block of the depth applies beta; the others add to it.
            let beta = if pc == 0 { p.beta } else { T::ONE };
            let b_block = unsafe { b_panels::<T, I>(&p, packed, b_pack, pc, jc, kc, nc) };
            for ic in (0..p.m).step_by(mc_step) {
                let mc = mc_step.min(p.m - ic);
                let a_block = unsafe { a_panels(&p, packed, a_pack, ic, pc, mc, kc) };
                let block = Block { pc, kc, row: ic, mc, col: jc, nc, beta };
                let b = |jr| B {
                    at: unsafe { b_block.add(jr * kc) },
                    rs: nr as isize,
                    panel: kc * nr,
                    next: std::ptr::null(),
                };
                unsafe { sweep::<T, I>(&p, packed, block, a_block, b, |_, _| std::ptr::null()) };
            }
        }
    }
}

/// At most one block of A (m <= MC): A is packed once per depth block (which stays in L2
/// across all of B's columns), and B in kc x NS blocks that stay in L2 (a kc x NC block,
/// for so few rows of A, would round-trip through L3). A single row of tiles reads
/// each element of B once: then B is not packed at all when its rows are contiguous.
///
/// The blocks' order: the depth outermost, unless B is packed here and C is larger than
/// [`C_IN_CACHE`] (and all of A fits there too): then B's columns, so that each block of C stays in cache
/// across the depth instead of C making a round trip to memory per depth block (64 x 1024
/// x 4096: 1 MiB of C, 4 depth blocks). (Columns outermost measured slower where C fits:
/// 0.76 against 0.81 of peak at 64 x 576 x 3136.) A packed here is then packed whole,
/// once.
#[inline(always)]
unsafe fn short<T: Element, I: Simd<T>>(p: Problem<T>, packed: Operands) {
    let (nr, tc) = (I::VECTORS * I::LANES, tile_cols_of::<T, I>());
    let rows = p.m.next_multiple_of(MR);
    let columns_outer =
        packed.b.is_none() && p.m * p.n * size_of::<T>() > C_IN_CACHE && rows * p.k * size_of::<T>() <= C_IN_CACHE;
    let a_len = if packed.a.is_some() {
        0
    } else if columns_outer {
        rows * p.k
    } else {
        rows * I::KC.min(p.k)
    };
    let mut a_buf = Buffer::<T>::new(a_len);
    let mut b_buf =
        Buffer::<T>::new(if packed.b.is_some() { 0 } else { I::KC.min(p.k) * I::NS.min(p.n.next_multiple_of(tc)) });
    let (a_pack, b_pack) = (a_buf.ptr(), b_buf.ptr());
    let direct = packed.b.is_none() && p.m <= tile_rows_of::<T, I>() && p.csb == 1;
    // B packed here from contiguous rows: the next block's rows are fetched into L2 while
    // this one's panels run, so that packing it does not wait on memory.
    let fetch = packed.b.is_none() && !direct && p.csb == 1;
    let (depths, columns) = (p.k.div_ceil(I::KC), p.n.div_ceil(I::NS));
    // The blocks (depth, columns) in order.
    let block = |i: usize| {
        if columns_outer {
            (i % depths * I::KC, i / depths * I::NS)
        } else {
            (i / columns * I::KC, i % columns * I::NS)
        }
    };
    // SAFETY (every block below): as in `tall`.
    for i in 0..depths * columns {
        let (pc, jc) = block(i);
        let (kc, nc) = (I::KC.min(p.k - pc), I::NS.min(p.n - jc));
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
        let b_block = if direct { b } else { unsafe { b_panels::<T, I>(&p, packed, b_pack, pc, jc, kc, nc) } };
        let next = (i + 1 < depths * columns).then(|| block(i + 1));
        // The next block of B on its way to L2 while this one runs, a share before each
        // tile: B's rows that will be packed, or the panels packed at compile time (a
        // weight streamed from memory).
        let fetch_next = |call, calls| match next {
            Some(next) if fetch => {
                unsafe { fetch_share::<T, I>(&p, next, call, calls) };
                std::ptr::null()
            }
            Some((pc, jc)) if packed.b.is_some() => {
                let (kc, nc) = (I::KC.min(p.k - pc), I::NS.min(p.n - jc));
                let panels = unsafe { b_panels::<T, I>(&p, packed, b_pack, pc, jc, kc, nc) };
                panels.wrapping_add(kc * nc.next_multiple_of(nr) * call / calls)
            }
            _ => std::ptr::null(),
        };
        let in_panels = |at| B { at, rs: nr as isize, panel: kc * nr, next: std::ptr::null() };
        let b_tile = |jr: usize| {
            if !direct {
                in_panels(unsafe { b_block.add(jr * kc) })
            } else if tc.min(nc - jr) == tc {
                // B's own rows: the tile's panels lie side by side.
                B { at: unsafe { b.add(jr) }, rs: p.rsb, panel: nr, next: std::ptr::null() }
            } else {
                // (One row of tiles: each column tile is asked for once.)
                unsafe { pack_b::<T, I>(b_pack, kc, nc - jr, b.add(jr), p.rsb, p.csb) };
                in_panels(b_pack.cast_const())
            }
        };
        let block = Block { pc, kc, row: 0, mc: p.m, col: jc, nc, beta };
        unsafe { sweep::<T, I>(&p, packed, block, a_block, b_tile, fetch_next) };
    }
}

/// Share `q` of `shares` of the rows of B's block at (depth, column) `next` (its
/// contiguous rows, `short`'s blocks), fetched into L2.
///
/// # Safety
/// The CPU has SSE (as every caller here, compiled for AVX2).
#[inline(always)]
unsafe fn fetch_share<T: Element, I: Simd<T>>(p: &Problem<T>, (pc, jc): (usize, usize), q: usize, shares: usize) {
    let (depth, cols) = (I::KC.min(p.k - pc), I::NS.min(p.n - jc));
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
/// bias and the addend in the first block, the activation in the last.
#[inline(always)]
fn pass<T>(p: &Problem<T>, packed: Operands, pc: usize, kc: usize, row: usize, col: usize) -> Pass {
    let first = pc == 0;
    Pass {
        bias: if first { packed.bias.skip(row, col) } else { Bias::None },
        addend: if first { packed.addend.map(|d| d.skip(row, col)) } else { None },
        activation: if pc + kc == p.k { packed.activation } else { Activation::None },
    }
}

/// A register tile's columns of B: `B_PANELS` panels of NR columns, `panel` elements
/// apart, each of kc rows `rs` apart (packed: NR apart, and the panels kc * NR apart; B's
/// own rows: the panels side by side, NR apart); and, unless null, where the tile fetches
/// memory into L2 as it runs (two cache lines per few depths: the next block of B).
#[derive(Clone, Copy)]
pub(super) struct B<T> {
    at: *const T,
    rs: isize,
    panel: usize,
    next: *const T,
}

/// A block of C: depths `pc..pc + kc`, rows `row..row + mc`, columns `col..col + nc`,
/// written with `beta` (the caller's in the first depth block, else 1).
#[derive(Clone, Copy)]
struct Block<T> {
    pc: usize,
    kc: usize,
    row: usize,
    mc: usize,
    col: usize,
    nc: usize,
    beta: T,
}

/// The product of `block`: its rows of A packed at `a` times its columns of B (`b(jr)`:
/// the register tile's from column `col + jr` on), into C. Row tiles outer: a tile's
/// rows of A (12 KB for AVX-512) stay in L1 while it crosses the block of B, which stays
/// in L2 (each tile of B in L1 instead, 32 KB, left too little of it for A: 0.81 against
/// 0.87 of peak at 1024^3). `fetch(call, calls)` runs before each of the block's `calls`
/// register tiles, and says where the tile fetches into L2 as it runs (or null).
#[inline(always)]
unsafe fn sweep<T: Element, I: Simd<T>>(
    p: &Problem<T>,
    packed: Operands,
    block: Block<T>,
    a: *const T,
    b: impl Fn(usize) -> B<T>,
    fetch: impl Fn(usize, usize) -> *const T,
) {
    let (tr, tc) = (tile_rows_of::<T, I>(), tile_cols_of::<T, I>());
    let Block { pc, kc, row, mc, col, nc, beta } = block;
    let calls = mc.div_ceil(tr) * nc.div_ceil(tc);
    for (t, ir) in (0..mc).step_by(tr).enumerate() {
        for (q, jr) in (0..nc).step_by(tc).enumerate() {
            let next = fetch(t * nc.div_ceil(tc) + q, calls);
            // SAFETY: the tile lies inside C and the packed blocks (the caller's).
            unsafe {
                let out = Out {
                    c: p.c.offset((row + ir) as isize * p.rsc + (col + jr) as isize * p.csc),
                    rsc: p.rsc,
                    csc: p.csc,
                    cols: tc.min(nc - jr),
                    alpha: p.alpha,
                    beta,
                    pass: pass(p, packed, pc, kc, row + ir, col + jr),
                };
                tile_rows::<T, I>(tr.min(mc - ir), kc, a.add(ir * kc), B { next, ..b(jr) }, out);
            }
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

/// One depth of the register tile: `acc[r] += a[r] * b[..W * LANES]`, rows past MR from
/// the next panel of A, `panel` elements further on, vectors past VECTORS from the next
/// panel of B, `b_panel` elements further on.
#[inline(always)]
unsafe fn step<T: Element, I: Simd<T>, const R: usize, const W: usize>(
    acc: &mut [[I::V; W]; R],
    a: *const T,
    panel: usize,
    b: *const T,
    b_panel: usize,
) {
    // SAFETY: a holds min(R, MR) elements and a + panel the rest; b and b + b_panel hold
    // the W vectors (the caller's panels).
    unsafe {
        let mut bv = [I::zero(); W];
        for (h, bv) in bv.iter_mut().enumerate() {
            *bv = I::load(b.add(h / I::VECTORS * b_panel + h % I::VECTORS * I::LANES));
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = I::splat(*a.add(if r < MR { r } else { panel + r - MR }));
            for (acc, &bv) in acc.iter_mut().zip(&bv) {
                *acc = I::fmadd(x, bv, *acc);
            }
        }
    }
}

/// A tile of `rows` (1..=MR * TILE_PANELS) rows: each height gets its own code so that a
/// short tile does no wasted multiply-adds, and short ones S sets of accumulators (summed
/// at the end) for about 10 independent chains: an FMA takes 4 to 5 cycles and two issue
/// per cycle. Columns of B of at most LANES (C's last, e.g. 1 of 16 at n = 49) take the
/// narrow tile, one vector per row, reading the first vector of each depth of the B
/// panel; the others two vectors (AVX2: of one panel; AVX-512: of two).
#[inline(always)]
unsafe fn tile_rows<T: Element, I: Simd<T>>(rows: usize, kc: usize, a: *const T, b: B<T>, out: Out<T>) {
    const _: () = assert!(MR == 6);
    // SAFETY: the caller's contract, passed on.
    unsafe {
        if out.cols <= I::LANES {
            // (Heights above MR exist only for two-panel tiles: `panel` never asks them of
            // a one-panel set, nor two vectors of B of AVX-512's f64 or AVX2's sets with
            // more than 6 rows.)
            return match rows {
                12 => I::tile::<12, 1, 1>(kc, a, b, out),
                11 => I::tile::<11, 1, 1>(kc, a, b, out),
                10 => I::tile::<10, 1, 1>(kc, a, b, out),
                9 => I::tile::<9, 1, 1>(kc, a, b, out),
                8 => I::tile::<8, 1, 1>(kc, a, b, out),
                7 => I::tile::<7, 2, 1>(kc, a, b, out),
                6 => I::tile::<6, 2, 1>(kc, a, b, out),
                5 => I::tile::<5, 2, 1>(kc, a, b, out),
                4 => I::tile::<4, 3, 1>(kc, a, b, out),
                3 => I::tile::<3, 4, 1>(kc, a, b, out),
                2 => I::tile::<2, 6, 1>(kc, a, b, out),
                _ => I::tile::<1, 8, 1>(kc, a, b, out),
            };
        }
        match rows {
            12 => I::tile::<12, 1, 2>(kc, a, b, out),
            11 => I::tile::<11, 1, 2>(kc, a, b, out),
            10 => I::tile::<10, 1, 2>(kc, a, b, out),
            9 => I::tile::<9, 1, 2>(kc, a, b, out),
            8 => I::tile::<8, 1, 2>(kc, a, b, out),
            7 => I::tile::<7, 1, 2>(kc, a, b, out),
            6 => I::tile::<6, 1, 2>(kc, a, b, out),
            5 => I::tile::<5, 1, 2>(kc, a, b, out),
            4 => I::tile::<4, 1, 2>(kc, a, b, out),
            3 => I::tile::<3, 2, 2>(kc, a, b, out),
            2 => I::tile::<2, 3, 2>(kc, a, b, out),
            _ => I::tile::<1, 4, 2>(kc, a, b, out),
        }
    }
}

/// The register tile: R rows of the packed A panels from `a` times the first W vectors of
/// each row of B's panels `b`, written to `out` (at most W * LANES columns); depth p
/// accumulates in set p % S.
#[inline(always)]
pub(super) unsafe fn tile<T: Element, I: Simd<T>, const R: usize, const S: usize, const W: usize>(
    kc: usize,
    a: *const T,
    b: B<T>,
    out: Out<T>,
) {
    let l = I::LANES;
    // SAFETY: a holds kc * MR elements per panel of the tile's rows, b kc rows; out's R x
    // cols elements are inside C.
    unsafe {
        // C's rows are far apart: start fetching them now, for the write at the end.
        for r in 0..R {
            let row = out.c.wrapping_offset(r as isize * out.rsc);
            _mm_prefetch::<_MM_HINT_T0>(row.cast());
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(W * l - 1).cast());
        }
        let mut sets = [[[I::zero(); W]; R]; S];
        let (mut a, mut at, mut next) = (a, b.at, b.next);
        // Several depths per iteration: the loop's own instructions would otherwise compete
        // with the 2 * R multiply-adds for issue slots.
        const UNROLL: usize = 4;
        for _ in 0..kc / (UNROLL * S) {
            if !next.is_null() {
                // A prefetch never faults.
                _mm_prefetch::<_MM_HINT_T1>(next.cast());
                _mm_prefetch::<_MM_HINT_T1>(next.wrapping_byte_add(64).cast());
                next = next.wrapping_byte_add(128);
            }
            for _ in 0..UNROLL {
                for acc in sets.iter_mut() {
                    step::<T, I, R, W>(acc, a, kc * MR, at, b.panel);
                    a = a.add(MR);
                    at = at.wrapping_offset(b.rs);
                }
            }
        }
        for _ in 0..kc % (UNROLL * S) {
            step::<T, I, R, W>(&mut sets[0], a, kc * MR, at, b.panel);
            a = a.add(MR);
            at = at.wrapping_offset(b.rs);
        }
        // Constant indices, no slices: the sets stay in registers (a slice of them, as
        // `&sets[1..]`, kept every accumulator in memory, stored after each multiply-add).
        let mut acc = sets[0];
        #[allow(clippy::needless_range_loop)]
        for set in 1..S {
            for r in 0..R {
                for h in 0..W {
                    acc[r][h] = I::vadd(acc[r][h], sets[set][r][h]);
                }
            }
        }
        output::write::<T, I, R, W>(acc, out);
    }
}
