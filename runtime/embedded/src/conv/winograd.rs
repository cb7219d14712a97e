//! The [`Algorithm::Winograd`](aotc_abi::conv::Algorithm) convolution, F(4x4, 3x3)
//! (`aotc_abi::conv::winograd` has the method, its matrices and the weight, transformed by
//! the compiler).
//!
//! The input is first copied, zero-padded, into planes of whole tiles plus slack
//! ([`Padded`]), so that the transforms read without bounds. The output's tiles are then
//! taken a block of whole *tile rows* at a time (a tile row: the tiles of four output rows
//! of one image; a block spans images), about [`BLOCK_TILES`] tiles, so that a block's
//! transformed inputs and products stay in L2. Per block:
//! 1. each input channel's tile rows are transformed into `V[ξ][c][t]`, 36 matrices of
//!    `[C, tiles]`;
//! 2. 36 GEMMs `M[ξ] = U[ξ] @ V[ξ]` on one thread (U packed at compile time);
//! 3. each output channel's tile rows are transformed back, into four rows of a thread's
//!    buffer, and written out through the epilogue (bias, residual, activation, or the 2x2
//!    max pool), which thus runs on whole rows.
//!
//! The threads claim blocks one by one. With fewer blocks than threads (small planes,
//! one image) a block's output channels are also cut between them: then the blocks'
//! inputs are first transformed into one shared V, the threads taking its input channels,
//! and the parts then read it (each transforming the whole input took 1.2x the time of a
//! part's GEMMs: DenseNet's 128 -> 32 at 14x14 ran 174 us on 1 thread, 141 on 2).
//! Both transforms are `T X T^T` for
//! a constant `T` ([`sandwich`], written once over [`Lanes`]): 8 tiles per vector with AVX2
//! ([`avx2`]), else one tile at a time.

#[cfg(target_arch = "x86_64")]
mod avx2;

use super::max_pool;
use crate::gemm::{gemm_packed, Operands, Packed, Problem};
use crate::pool::{self, SharedOut};
use crate::spare::{Buffer, Handle};
use aotc_abi::conv::winograd::{AT, BT, PATCH, POINTS, TILE};
use aotc_abi::conv::Conv2d;
use aotc_abi::gemm::{packed_len, padded, MR};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Tiles per block, about: with 64 channels in and out, V and M are 288 KiB each.
const BLOCK_TILES: usize = 32;

/// Floats past the end of V and M's buffers that a vector of 8 tiles may read.
const SLACK: usize = 8;

/// The distance between two points' matrices in V or M: `len` floats plus a cache line,
/// and never a multiple of 4 KiB, so that the 36 streams a transform reads or writes
/// (one per point) do not all map to the same L1 sets.
fn point_stride(len: usize) -> usize {
    let stride = len + 16;
    if stride.is_multiple_of(1024) {
        stride + 16
    } else {
        stride
    }
}

/// `out = activation(conv(x, weight) + bias (+ residual))`, `weight` in
/// `WeightForm::Winograd`'s layout.
pub fn run(
    g: &Conv2d,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
) {
    let plan = Plan::new(g, threads);
    let spare = Handle::current();
    let input = Padded::new(g, &plan, x, spare);
    let out = SharedOut::new(out);
    let job = Job { g, plan: &plan, input: &input, weight, bias, residual, simd: simd() };
    let (v_len, m_len) = plan.buffer_lens(g);
    let next = AtomicUsize::new(0);
    let claim = || Some(next.fetch_add(1, Ordering::Relaxed)).filter(|&item| item < plan.items());
    // Inside the regions, each thread's seat's buffers (see `conv::__aotc_conv2d_f32`'s
    // images).
    let buffers = || (Handle::current().take(m_len), Handle::current().take(TILE * plan.row_len()));
    if plan.parts == 1 {
        // Each block transformed by the thread that multiplies it.
        pool::parallel_for(plan.threads, plan.threads.min(plan.items()), &|_| {
            let (mut v, (mut m, mut rows)) = (Handle::current().take(v_len), buffers());
            while let Some(block) = claim() {
                // SAFETY: `v` is this thread's; the block's tile rows of every output
                // channel are this item's alone.
                unsafe {
                    job.transform(block, 0..g.channels, v.as_mut_ptr(), v.len());
                    job.product(out.get(), block, 0, &v, &mut m, &mut rows);
                }
            }
        });
        return;
    }
    // The blocks' V side by side, each block's input channels cut between the threads.
    let mut shared = spare.take(plan.blocks * v_len);
    let base = SharedOut::new(&mut shared);
    let cuts = plan.threads;
    pool::parallel_for(plan.threads, plan.blocks * cuts, &|i| {
        let (block, cut) = (i / cuts, i % cuts);
        let channels = g.channels * cut / cuts..g.channels * (cut + 1) / cuts;
        // SAFETY: block `block`'s V, of which this chunk alone writes these channels' rows.
        unsafe { job.transform(block, channels, base.get().add(block * v_len), v_len) };
    });
    pool::parallel_for(plan.threads, plan.threads.min(plan.items()), &|_| {
        let (mut m, mut rows) = buffers();
        while let Some(item) = claim() {
            let (block, part) = (item / plan.parts, item % plan.parts);
            let v = &shared[block * v_len..][..v_len];
            // SAFETY: items write disjoint parts of the output: their block's tile rows of
            // their output channels.
            unsafe { job.product(out.get(), block, part, v, &mut m, &mut rows) };
        }
    });
}

/// The input, zero-padded: plane (n, c) is `rows` rows of `width` floats, row `u` column
/// `v` holding input `(u - padding[0], v - padding[1])`: every tile's 6x6 patch, and the
/// columns a vector of 8 tiles reads past a tile row's last patch (up to 8 tiles' worth).
pub(super) struct Padded {
    data: Buffer,
    rows: usize,
    width: usize,
}

impl Padded {
    fn new(g: &Conv2d, plan: &Plan, x: &[f32], spare: Handle) -> Padded {
        // A tile row's whole vectors of tiles, and the 4 columns of its last patch and
        // of the next vector's second load past them.
        let (rows, width) = (TILE * plan.tiles[0] + 2, plan.row_len() + 8);
        let plane = rows * width;
        let mut data = spare.take(g.batch * g.channels * plane);
        let (h, w) = (g.height, g.width);
        // Padded row u holds input row u - padding[0] (if any) at columns
        // padding[1]..padding[1] + cols, zeros around it: every float is written, as the
        // buffer holds what an earlier call left.
        let (left, cols) = (g.padding[1].min(width), w.min(width.saturating_sub(g.padding[1])));
        pool::for_items(&mut data, g.batch * g.channels, plane, x.len(), &|begin, _, part| {
            for (i, dst) in part.chunks_exact_mut(plane).enumerate() {
                let src = &x[(begin + i) * h * w..][..h * w];
                for (u, row) in dst.chunks_exact_mut(width).enumerate() {
                    match u.checked_sub(g.padding[0]).filter(|&y| y < h) {
                        Some(y) => {
                            row[..left].fill(0.0);
                            row[left..left + cols].copy_from_slice(&src[y * w..][..cols]);
                            row[left + cols..].fill(0.0);
                        }
                        None => row.fill(0.0),
                    }
                }
            }
        });
        Padded { data, rows, width }
    }

    /// Padded row `u` of plane (image, channel), from column 0.
    fn row(&self, g: &Conv2d, image: usize, channel: usize, u: usize) -> &[f32] {
        &self.data[((image * g.channels + channel) * self.rows + u) * self.width..][..self.width]
    }
}

/// What every item of a call reads.
struct Job<'a> {
    g: &'a Conv2d,
    plan: &'a Plan,
    input: &'a Padded,
    weight: &'a [f32],
    bias: Option<&'a [f32]>,
    residual: Option<&'a [f32]>,
    /// Whether the transforms take [`avx2`]'s code (detected once per call).
    simd: bool,
}

/// Whether this CPU runs [`avx2`]'s transforms (AVX2 and FMA, which an AVX-512 CPU has).
fn simd() -> bool {
    crate::isa::Isa::best() >= crate::isa::Isa::Avx2
}

/// How a call is cut.
struct Plan {
    tiles: [usize; 2],
    /// Tile rows per block, and blocks (the last may be shorter).
    rows_per_block: usize,
    blocks: usize,
    /// Parts the output channels of a block are cut into, and channels per part (whole
    /// panels of the packed weight).
    parts: usize,
    part_channels: usize,
    threads: usize,
}

impl Plan {
    fn new(g: &Conv2d, threads: usize) -> Plan {
        let tiles = [g.out_size[0].div_ceil(TILE), g.out_size[1].div_ceil(TILE)];
        let rows = g.batch * tiles[0];
        let rows_per_block = (BLOCK_TILES / tiles[1].max(1)).clamp(1, rows.max(1));
        let blocks = rows.div_ceil(rows_per_block);
        // Multiply-adds: 36 per channel pair per tile of 16 positions.
        let work = g.batch * g.out_channels * g.positions() * g.channels * POINTS / (TILE * TILE);
        let threads = super::threads_for(work, threads);
        let parts =
            if blocks >= threads { 1 } else { threads.div_ceil(blocks).min(g.out_channels.div_ceil(2 * MR)).max(1) };
        let part_channels = g.out_channels.div_ceil(parts).next_multiple_of(MR);
        let parts = g.out_channels.div_ceil(part_channels).max(1);
        Plan { tiles, rows_per_block, blocks, parts, part_channels, threads }
    }

    fn items(&self) -> usize {
        self.blocks * self.parts
    }

    /// Floats of V and M for the largest block: each point's matrix at its
    /// [`point_stride`], and [`SLACK`].
    fn buffer_lens(&self, g: &Conv2d) -> (usize, usize) {
        let n = self.rows_per_block * self.tiles[1];
        (
            POINTS * point_stride(g.channels * self.v_row(n)) + SLACK,
            POINTS * point_stride(self.part_channels * n) + SLACK,
        )
    }

    /// Floats of one input channel's row of V[ξ] for a block of `n` tiles: the tiles, and
    /// room for the vector stores of its last tile row (up to 8 tiles), so that channels
    /// can be transformed apart, on different threads.
    fn v_row(&self, n: usize) -> usize {
        n + self.tiles[1].next_multiple_of(SLACK) - self.tiles[1]
    }

    /// Floats of one row of a tile row's outputs in a thread's buffer: whole vectors of 8
    /// tiles.
    fn row_len(&self) -> usize {
        TILE * self.tiles[1].next_multiple_of(8)
    }
}

impl Job<'_> {
    /// Block `block`'s tile rows (global: image n's row ty is `n * tiles[0] + ty`).
    fn rows(&self, block: usize) -> std::ops::Range<usize> {
        let per_block = self.plan.rows_per_block;
        block * per_block..((block + 1) * per_block).min(self.g.batch * self.plan.tiles[0])
    }

    /// Input channels `channels` of block `block` transformed into the block's V (`v_len`
    /// floats at `v`): 36 matrices `[C, tiles]`, a channel's row [`Plan::v_row`] floats.
    ///
    /// # Safety
    /// `v` points to `v_len` floats ([`Plan::buffer_lens`]), whose rows of these channels
    /// no other thread reads or writes meanwhile.
    unsafe fn transform(&self, block: usize, channels: std::ops::Range<usize>, v: *mut f32, v_len: usize) {
        let (g, plan) = (self.g, self.plan);
        let rows = self.rows(block);
        let [tiles_y, tiles_x] = plan.tiles;
        let v_row = plan.v_row(rows.len() * tiles_x);
        let point = point_stride(g.channels * v_row);
        assert!(v_len >= POINTS * point + SLACK);
        // A tile row's vector stores spill up to 7 floats into the channel's next tile
        // row (written next) or past its tiles (the row's room for them, never read).
        for c in channels {
            for (i, row) in rows.clone().enumerate() {
                let (image, ty) = (row / tiles_y, row % tiles_y);
                let patch_rows: [&[f32]; PATCH] = std::array::from_fn(|k| self.input.row(g, image, c, TILE * ty + k));
                let at = Strided { first: c * v_row + i * tiles_x, point, len: tiles_x };
                // SAFETY: the caller's; `at` and its vectors' spill lie in channel c's rows.
                unsafe { transform_input(patch_rows, v, v_len, at, self.simd) };
            }
        }
    }

    /// Part `part`'s output channels of block `block` from the block's transformed input
    /// `v`, into `out`, through a thread's buffers for M and for a tile row's outputs.
    ///
    /// # Safety
    /// `out` holds the geometry's output; no other thread writes this block's rows of these
    /// channels.
    unsafe fn product(
        &self,
        out: *mut f32,
        block: usize,
        part: usize,
        v: &[f32],
        m_buf: &mut [f32],
        row_buf: &mut [f32],
    ) {
        let (g, plan) = (self.g, self.plan);
        let rows = self.rows(block);
        let channels = part * plan.part_channels..((part + 1) * plan.part_channels).min(g.out_channels);
        let [tiles_y, tiles_x] = plan.tiles;
        // Tiles in the block: the GEMMs' columns.
        let n = rows.len() * tiles_x;
        let v_row = plan.v_row(n);
        let (v_point, m_point) = (point_stride(g.channels * v_row), point_stride(channels.len() * n));
        debug_assert!(v.len() >= POINTS * v_point + SLACK && m_buf.len() >= POINTS * m_point + SLACK);
        let m = channels.len();
        let point_len = packed_len(g.channels, g.out_channels, MR).unwrap_or(0);
        let padded_rows = padded(g.out_channels, MR).unwrap_or(0);
        for xi in 0..POINTS {
            let u = self.weight[xi * point_len..][..point_len].as_ptr();
            let p = Problem {
                m,
                k: g.channels,
                n,
                alpha: 1.0,
                a: u,
                rsa: 0,
                csa: 0,
                b: v[xi * v_point..].as_ptr(),
                rsb: v_row as isize,
                csb: 1,
                beta: 0.0,
                c: m_buf[xi * m_point..].as_mut_ptr(),
                rsc: n as isize,
                csc: 1,
            };
            let a = Packed { data: u, padded: padded_rows, start: channels.start };
            // SAFETY: U[ξ] is packed for all output channels (`weight_len`), read from
            // this part's first one (a multiple of MR); V[ξ] is C x n with rows
            // `v_row` apart, and M[ξ] m x n row-major in this thread's buffer.
            unsafe { gemm_packed(p, Operands { a: Some(a), ..Operands::default() }, 1, &pool::parallel_for) };
        }
        let [height, width] = g.out_size;
        let [out_h, out_w] = g.written_size();
        let row_len = plan.row_len();
        for (i, row) in rows.enumerate() {
            let (image, ty) = (row / tiles_y, row % tiles_y);
            // The tile row's output rows, or pooled, its (up to) two rows of maxima.
            let (first_row, out_rows) = if g.pool {
                (TILE / 2 * ty, out_h.saturating_sub(TILE / 2 * ty).min(TILE / 2))
            } else {
                (TILE * ty, (height - TILE * ty).min(TILE))
            };
            for (j, o) in channels.clone().enumerate() {
                let at = Strided { first: j * n + i * tiles_x, point: m_point, len: tiles_x };
                transform_output(m_buf, at, row_buf, row_len, self.simd);
                let first = (image * g.out_channels + o) * out_h * out_w + first_row * out_w;
                // SAFETY: the tile row's output rows lie in the output (the caller's
                // contract) and are this item's alone.
                let dst = unsafe { std::slice::from_raw_parts_mut(out.add(first), out_rows * out_w) };
                let epilogue = Epilogue {
                    bias: self.bias.map_or(0.0, |b| b[o]),
                    residual: self.residual.map(|r| &r[first..][..out_rows * width]),
                    activation: g.activation,
                    width,
                    pool: g.pool,
                };
                finish(row_buf, row_len, dst, &epilogue, self.simd);
            }
        }
    }
}

/// Where one tile row's values lie in V or M: point ξ's `len` values from
/// `first + ξ * point`. The buffer holds [`SLACK`] floats past the last point's.
#[derive(Clone, Copy)]
pub(super) struct Strided {
    pub first: usize,
    pub point: usize,
    pub len: usize,
}

/// What the output pass adds and applies: `activation(y + bias + residual)`, into output
/// rows of `width` (the residual shaped as they are); or with `pool` (and no residual),
/// the maximum of each 2x2 window, into rows of `width / 2`.
pub(super) struct Epilogue<'a> {
    pub bias: f32,
    pub residual: Option<&'a [f32]>,
    pub activation: aotc_abi::gemm::Activation,
    pub width: usize,
    pub pool: bool,
}

/// What the transforms compute on: one tile's value (a float) or 8 tiles' (a vector).
pub(super) trait Lanes: Copy {
    /// # Safety
    /// The CPU has the vector's instruction set.
    unsafe fn zero() -> Self;
    /// `self * c + acc`.
    ///
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn mul_add(self, c: f32, acc: Self) -> Self;
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn zero() -> Self {
        0.0
    }
    #[inline(always)]
    unsafe fn mul_add(self, c: f32, acc: Self) -> Self {
        self * c + acc
    }
}

/// `T X T^T` for a constant `T` of `R` rows (`B^T`: the input transform; `A^T`: the
/// output's): `T`'s zeros skipped and its ones left to the compiler (a multiply by a
/// constant 1 folds away), row by row, then column by column.
///
/// # Safety
/// The CPU has `L`'s instruction set.
#[inline(always)]
pub(super) unsafe fn sandwich<L: Lanes, const R: usize>(t: &[[f32; PATCH]; R], x: &[[L; PATCH]; PATCH]) -> [[L; R]; R] {
    // (Plain index loops: a closure could be compiled apart, without the caller's target
    // features, where every vector operation is a call.)
    // SAFETY (all): the caller's.
    unsafe {
        // X T^T, held transposed: xt[j][k] = (X T^T)[k][j].
        let mut xt = [[L::zero(); PATCH]; R];
        for j in 0..R {
            for k in 0..PATCH {
                xt[j][k] = combine(&t[j], &x[k]);
            }
        }
        // (T X T^T)[i][j] = sum over k of T[i][k] (X T^T)[k][j].
        let mut y = [[L::zero(); R]; R];
        for i in 0..R {
            for j in 0..R {
                y[i][j] = combine(&t[i], &xt[j]);
            }
        }
        y
    }
}

/// `sum over l of t[l] x[l]`, `t`'s zeros skipped.
///
/// # Safety
/// As [`sandwich`].
#[inline(always)]
unsafe fn combine<L: Lanes>(t: &[f32; PATCH], x: &[L; PATCH]) -> L {
    // SAFETY (all): the caller's.
    unsafe {
        let mut acc = L::zero();
        for l in 0..PATCH {
            if t[l] != 0.0 {
                acc = x[l].mul_add(t[l], acc);
            }
        }
        acc
    }
}

/// One tile row transformed, `V = B^T d B` per tile (`rows`: the 6 padded input rows
/// under it, tile t's patch at columns 4t..4t + 6), into V (`v_len` floats at `v`) at `at`.
/// (Through a pointer: threads transform the channels of one V side by side.)
///
/// # Safety
/// `v` points to `v_len` floats; no other thread touches those at `at`'s tiles (and with
/// `simd`, the 7 after each point's) meanwhile.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
unsafe fn transform_input(rows: [&[f32]; PATCH], v: *mut f32, v_len: usize, at: Strided, simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the CPU has AVX2 (`simd`); the rows are padded rows (the columns of
        // whole vectors of tiles and 8 more); the caller's for `v`.
        return unsafe { avx2::transform_input(rows, v, v_len, at) };
    }
    assert!(at.first + (POINTS - 1) * at.point + at.len <= v_len);
    for t in 0..at.len {
        let d: [[f32; PATCH]; PATCH] = std::array::from_fn(|k| std::array::from_fn(|l| rows[k][TILE * t + l]));
        // SAFETY: scalar arithmetic; the writes lie in `v` (asserted) at `at`'s tiles.
        unsafe {
            let values = sandwich(&BT, &d);
            for (xi, value) in values.as_flattened().iter().enumerate() {
                *v.add(at.first + xi * at.point + t) = *value;
            }
        }
    }
}

/// One tile row of one output channel, `Y = A^T M A` per tile (`m` at `at`: its 36
/// products), into `rows`: `TILE` rows of `row_len` floats, tile t's outputs at columns
/// 4t..4t + 4.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn transform_output(m: &[f32], at: Strided, rows: &mut [f32], row_len: usize, simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the CPU has AVX2 and FMA (`simd`); `m` has the slack `Strided` says and
        // each row holds whole vectors of tiles (`Plan::row_len`).
        return unsafe { avx2::transform_output(m, at, rows, row_len) };
    }
    for t in 0..at.len {
        let p: [[f32; PATCH]; PATCH] =
            std::array::from_fn(|i| std::array::from_fn(|j| m[at.first + (PATCH * i + j) * at.point + t]));
        // SAFETY: scalar arithmetic.
        let y = unsafe { sandwich(&AT, &p) };
        for (r, ys) in y.iter().enumerate() {
            rows[r * row_len + TILE * t..][..TILE].copy_from_slice(ys);
        }
    }
}

/// A tile row's outputs (`rows`, as [`transform_output`] wrote them) through the epilogue
/// into `out`: its output rows, or pooled, its rows of maxima.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn finish(rows: &[f32], row_len: usize, out: &mut [f32], epilogue: &Epilogue, simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the CPU has AVX2 and FMA (`simd`); each row holds whole vectors of
        // tiles, past the output's width.
        return unsafe { avx2::finish(rows, row_len, out, epilogue) };
    }
    let (width, y) = (epilogue.width, |v: f32| crate::activation::scalar(epilogue.activation, v + epilogue.bias));
    if epilogue.pool {
        let pooled = width / 2;
        for (r, dst) in out.chunks_exact_mut(pooled.max(1)).enumerate() {
            let at = |i: usize, c: usize| y(rows[(2 * r + i) * row_len + c]);
            for (c, o) in dst.iter_mut().enumerate() {
                *o = [at(0, 2 * c), at(0, 2 * c + 1), at(1, 2 * c), at(1, 2 * c + 1)]
                    .into_iter()
                    .fold(f32::NEG_INFINITY, max_pool::max);
            }
        }
        return;
    }
    for (r, dst) in out.chunks_exact_mut(width.max(1)).enumerate() {
        for (c, o) in dst.iter_mut().enumerate() {
            let residual = epilogue.residual.map_or(0.0, |res| res[r * width + c]);
            *o = crate::activation::scalar(epilogue.activation, rows[r * row_len + c] + epilogue.bias + residual);
        }
    }
}
