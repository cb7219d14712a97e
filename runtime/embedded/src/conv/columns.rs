//! The [`Algorithm::Columns`](aotc_abi::conv::Algorithm) product: an implicit im2col.
//! The windows of one group's input planes form the GEMM's right operand
//! `[C/G * KH * KW, OH * OW]`, whose row `(c, i, j)` holds, for every output position, the
//! input at kernel tap `(i, j)` of channel `c` (0 in the padding). That matrix, KH * KW
//! times the input's size, never exists: pieces of it are written straight into the
//! GEMM's packed layout (`aotc_abi::gemm`: panels of NR columns, depth by depth) and the
//! GEMM reads them as a packed B ([`panels`]).
//!
//! Two ways to cut the work, as the GEMM itself cuts C (the longer side):
//! - more positions than output channels (the early, large planes): blocks of about
//!   [`BLOCK_COLUMNS`] positions, claimed one by one by the threads; each thread writes a
//!   block's windows one depth block at a time into its own buffer (which stays in L2) and
//!   runs the GEMM of that block and depth on its own. Both threads stay busy, and the
//!   windows are written once.
//! - otherwise (small planes, many channels): the whole operand is written once, its depth
//!   blocks spread over the threads, then one GEMM cuts the output channels over them.
//!   Cutting the positions would make each thread read the whole weight.

use super::max_pool::row_pairs;
use super::{Sums, TapColumns, Weight};
use crate::gemm::{gemm_packed, Bias, Operands, Packed, Problem};
use crate::pool::{self, SharedOut};
use crate::spare::Handle;
use aotc_abi::conv::Conv2d;
use aotc_abi::gemm::{Activation, KC, MR, NR};
use smallvec::SmallVec;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Positions per block of the first way: a KC x 256 block of windows is 256 KiB, half of
/// an L2, next to the weight's depth block.
const BLOCK_COLUMNS: usize = 256;

/// Above this many floats, the windows are not written whole (the second way) but block
/// by block: 8 MiB.
const WHOLE_MAX: usize = 2 << 20;

/// One group's `out[O/G, positions] = weight @ windows + sums` through the geometry's
/// activation, on up to `threads` threads; pooled (`g.pool`), the GEMMs write into a
/// buffer of whole row pairs, pooled into `out`. The buffers come from `spare`.
pub fn product(g: &Conv2d, weight: Weight, planes: &[f32], out: &mut [f32], sums: Sums, threads: usize, spare: Handle) {
    let (m, k, n) = (g.group_out_channels(), g.depth(), g.positions());
    let threads = super::threads_for(m * k * n, threads);
    let padded = n.next_multiple_of(NR);
    let taps = TapColumns::of(g);
    // Every depth of C's columns: A's depths from `pc` on, B read from its panels.
    let whole = Problem {
        m,
        k,
        n,
        alpha: 1.0,
        a: std::ptr::null(),
        rsa: k as isize,
        csa: 1,
        b: std::ptr::null(),
        rsb: 0,
        csb: 0,
        beta: 0.0,
        c: out.as_mut_ptr(),
        rsc: n as isize,
        csc: 1,
    };
    if m >= n && k * padded <= WHOLE_MAX {
        // (Every float is written: each panel depth whole, zeros past the end.)
        let mut windows = spare.take(k * padded);
        let base = SharedOut::new(&mut windows);
        pool::parallel_for(threads, k.div_ceil(KC), &|i| {
            let depths = KC.min(k - i * KC);
            // SAFETY: depth block i's panels, inside `windows` (k * padded floats), which
            // no other chunk writes.
            let block = unsafe { std::slice::from_raw_parts_mut(base.get().add(i * KC * padded), depths * padded) };
            panels(g, &taps, planes, 0..n, i * KC, block);
        });
        let (a, packed_a) = lhs(&weight, m, 0);
        let operands = Operands {
            a: packed_a,
            b: Packed::new(windows.as_ptr(), n, NR),
            bias: sums.bias(),
            addend: sums.addend(n, 0),
            activation: g.activation,
        };
        // Pooled: the full planes in a buffer first.
        let mut full = g.pool.then(|| spare.take(m * n));
        let c = full.as_mut().map_or(whole.c, |f| f.as_mut_ptr());
        // SAFETY: A is `weight` as `lhs` says, B the k x n windows packed just above (their
        // padded length), C = `out` or `full`, m x n row-major, a unique borrow; the bias m
        // floats.
        unsafe { gemm_packed(Problem { a, c, ..whole }, operands, threads, &pool::parallel_for) };
        if let Some(full) = full {
            let (pooled, width) = (out.len() / m, g.out_size[1]);
            for (o, dst) in out.chunks_exact_mut(pooled).enumerate() {
                row_pairs(&full[o * n..][..n], width, dst);
            }
        }
        return;
    }
    // Blocks of whole units (panels, or pairs of output rows when pooled), as many per
    // thread, their sizes within a unit of each other (784 positions as 4 blocks of 12 or
    // 13 panels, not 3 of 13 and one of 10).
    let (unit, all) = if g.pool { (2 * g.out_size[1], g.out_size[0] / 2) } else { (NR, n.div_ceil(NR)) };
    if all == 0 || unit == 0 {
        return;
    }
    let count = all.div_ceil((BLOCK_COLUMNS / unit).max(1)).next_multiple_of(threads).min(all);
    let width = all.div_ceil(count) * unit;
    let next = AtomicUsize::new(0);
    pool::parallel_for(threads, threads.min(count), &|_| {
        // (Borrowed whole: a closure capturing only its pointer fields would not be Sync.)
        let whole = &whole;
        // (Whole panels: a block of row pairs may end inside one.)
        // The thread's seat's buffers (see `conv::__aotc_conv2d_f32`'s images).
        let spare = Handle::current();
        let mut windows = spare.take(KC.min(k) * width.next_multiple_of(NR));
        // Pooled: each block's full rows, C of its GEMMs, before they are pooled into `out`.
        let mut rows = g.pool.then(|| spare.take(m * width));
        loop {
            let block = next.fetch_add(1, Ordering::Relaxed);
            if block >= count {
                return;
            }
            let units = all * block / count..all * (block + 1) / count;
            let cols = units.start * unit..n.min(units.end * unit);
            let (c, rsc) = match rows.as_mut() {
                Some(rows) => (rows.as_mut_ptr(), cols.len() as isize),
                None => (whole.c.wrapping_add(cols.start), whole.rsc),
            };
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                panels(g, &taps, planes, cols.clone(), pc, &mut windows);
                let (a, packed_a) = lhs(&weight, m, pc);
                // The first depth block writes C with the bias and the residual (never
                // pooled), the others add to it; the last applies the activation.
                let (beta, bias, addend) =
                    if pc == 0 { (0.0, sums.bias(), sums.addend(n, cols.start)) } else { (1.0, Bias::None, None) };
                let activation = if pc + kc == k { g.activation } else { Activation::None };
                let b = Packed::new(windows.as_ptr(), cols.len(), NR);
                let operands = Operands { a: packed_a, b, bias, addend, activation };
                let p = Problem { k: kc, n: cols.len(), a, beta, c, rsc, ..*whole };
                // SAFETY: A holds depths pc..pc + kc of the weight as `lhs` says; B those
                // depths of the block's windows, packed just above; C columns `cols` of
                // `out`, which no other block writes, or this thread's `rows` (m x
                // cols.len() of its m x width floats); the bias m floats.
                unsafe { gemm_packed(p, operands, 1, &pool::parallel_for) }
            }
            if let Some(rows) = &rows {
                let [out_h, out_w] = g.written_size();
                for o in 0..m {
                    // SAFETY: pooled rows `units` of output channel o lie in `out` (m planes
                    // of out_h x out_w) and are this block's alone.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(
                            whole.c.add(o * out_h * out_w + units.start * out_w),
                            units.len() * out_w,
                        )
                    };
                    row_pairs(&rows[o * cols.len()..][..cols.len()], g.out_size[1], dst);
                }
            }
        }
    });
}

/// The weight from depth `pc` on (a whole depth block of the packed one) as the GEMM's A:
/// its pointer, and the packed operand when it is packed.
fn lhs(weight: &Weight, m: usize, pc: usize) -> (*const f32, Option<Packed>) {
    match *weight {
        Weight::Rows(rows) => (rows[pc..].as_ptr(), None),
        Weight::Packed(packed) => {
            // Depth block pc starts at pc * padded (aotc_abi::gemm::panel_offset); on its
            // own it is a packed operand of its depth.
            let block = packed[pc * m.next_multiple_of(MR)..].as_ptr();
            (block, Packed::new(block, m, MR))
        }
    }
}

/// The output positions of one panel that lie on one output row: panel columns
/// `lo..lo + len` are positions `(oh, ow..ow + len)`.
#[derive(Clone, Copy)]
struct Run {
    lo: usize,
    len: usize,
    oh: usize,
    ow: usize,
}

/// Writes depths `pc..pc + kc` (kc = min(KC, depth - pc)) of positions `cols` of the
/// windows into `out` as that depth block of a packed B of `cols.len()` columns: the panel
/// from column `q` at `q * kc`, depth by depth, NR floats each (zeros past the end).
fn panels(g: &Conv2d, taps: &[TapColumns], planes: &[f32], cols: Range<usize>, pc: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::Isa::best() >= crate::isa::Isa::Avx2 {
        // SAFETY: the CPU has AVX2.
        return unsafe { panels_avx2(g, taps, planes, cols, pc, out) };
    }
    // SAFETY: plain Rust.
    unsafe { fill::<[f32; NR]>(g, taps, planes, cols, pc, out) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn panels_avx2(g: &Conv2d, taps: &[TapColumns], planes: &[f32], cols: Range<usize>, pc: usize, out: &mut [f32]) {
    // SAFETY: AVX2 is enabled here.
    unsafe { fill::<avx2::Lanes>(g, taps, planes, cols, pc, out) }
}

/// A panel's row being put together: NR lanes, 0 at first.
trait Row: Copy {
    /// # Safety
    /// The CPU runs the implementation's instructions (the same for the other methods).
    unsafe fn zero() -> Self;
    /// Lane t becomes `planes[base + t * stride]` for t in `lanes`; every such index lies
    /// in `planes`.
    unsafe fn gather(&mut self, planes: &[f32], base: isize, lanes: Range<usize>, stride: usize);
    /// Writes the NR lanes to `dst[..NR]`.
    unsafe fn store(self, dst: &mut [f32]);
}

impl Row for [f32; NR] {
    unsafe fn zero() -> Self {
        [0.0; NR]
    }

    #[inline(always)]
    unsafe fn gather(&mut self, planes: &[f32], base: isize, lanes: Range<usize>, stride: usize) {
        for t in lanes {
            self[t] = planes[(base + (t * stride) as isize) as usize];
        }
    }

    #[inline(always)]
    unsafe fn store(self, dst: &mut [f32]) {
        dst[..NR].copy_from_slice(&self);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Range, Row, NR};
    use std::arch::x86_64::*;

    /// The lanes in two registers. Loading the whole span of a run and blending it in
    /// keeps the row out of memory (scalar stores read back as a vector stall).
    #[derive(Clone, Copy)]
    pub struct Lanes([__m256; 2]);

    // SAFETY (every block): the caller's contract, AVX2; the loads stay inside `planes`
    // as checked.
    impl Row for Lanes {
        #[inline(always)]
        unsafe fn zero() -> Self {
            unsafe { Lanes([_mm256_setzero_ps(); 2]) }
        }

        #[inline(always)]
        unsafe fn gather(&mut self, planes: &[f32], base: isize, lanes: Range<usize>, stride: usize) {
            let start = usize::try_from(base).ok();
            let x = match start {
                Some(b) if stride == 1 && b + NR <= planes.len() => unsafe {
                    let p = planes[b..].as_ptr();
                    [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]
                },
                Some(b) if stride == 2 && b + 2 * NR <= planes.len() => unsafe {
                    let p = planes[b..].as_ptr();
                    // Even elements of 2 x 8: shuffle within 128-bit halves, then order
                    // the 64-bit pairs.
                    let evens = |a: __m256, b: __m256| {
                        _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(_mm256_shuffle_ps::<0x88>(
                            a, b,
                        ))))
                    };
                    [
                        evens(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))),
                        evens(_mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))),
                    ]
                },
                _ => {
                    // Near the ends of `planes`, or another stride: lane by lane.
                    let mut v = [0f32; NR];
                    unsafe {
                        self.store(&mut v);
                        v.gather(planes, base, lanes, stride);
                        *self = Lanes([_mm256_loadu_ps(v.as_ptr()), _mm256_loadu_ps(v.as_ptr().add(8))]);
                    }
                    return;
                }
            };
            if lanes == (0..NR) {
                self.0 = x;
                return;
            }
            unsafe {
                let (lo, hi) = (_mm256_set1_epi32(lanes.start as i32 - 1), _mm256_set1_epi32(lanes.end as i32));
                for (h, (v, x)) in self.0.iter_mut().zip(x).enumerate() {
                    let t =
                        _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * h as i32));
                    let inside = _mm256_and_si256(_mm256_cmpgt_epi32(t, lo), _mm256_cmpgt_epi32(hi, t));
                    *v = _mm256_blendv_ps(*v, x, _mm256_castsi256_ps(inside));
                }
            }
        }

        #[inline(always)]
        unsafe fn store(self, dst: &mut [f32]) {
            let dst = &mut dst[..NR];
            unsafe {
                _mm256_storeu_ps(dst.as_mut_ptr(), self.0[0]);
                _mm256_storeu_ps(dst.as_mut_ptr().add(8), self.0[1]);
            }
        }
    }
}

/// [`panels`] with rows of type `R`.
///
/// # Safety
/// The CPU runs `R`'s instructions.
#[inline(always)]
unsafe fn fill<R: Row>(
    g: &Conv2d,
    taps: &[TapColumns],
    planes: &[f32],
    cols: Range<usize>,
    pc: usize,
    out: &mut [f32],
) {
    let [kh, kw] = g.kernel;
    let (plane, kc) = (g.height * g.width, KC.min(g.depth() - pc));
    let out_w = g.out_size[1];
    let stride = g.stride[1];
    // Per run of the panel: the offset of each kernel row's input row (None outside the
    // plane), and for each kernel column the panel columns it reaches (lo..hi) and the
    // input column of panel column 0 (as if the run went on to the left).
    // (Inline: a panel spans at most NR runs, and short kernels fit 64 rows and columns.)
    let (mut runs, mut rows, mut columns) = (
        SmallVec::<[Run; NR]>::new(),
        SmallVec::<[Option<isize>; 64]>::new(),
        SmallVec::<[(Range<usize>, isize); 64]>::new(),
    );
    for (q0, panel) in cols.clone().step_by(NR).zip(out.chunks_exact_mut(kc * NR)) {
        runs.clear();
        let end = cols.end.min(q0 + NR);
        let mut q = q0;
        while q < end {
            let (oh, ow) = (q / out_w, q % out_w);
            let len = (out_w - ow).min(end - q);
            runs.push(Run { lo: q - q0, len, oh, ow });
            q += len;
        }
        rows.clear();
        columns.clear();
        for run in &runs {
            rows.extend((0..kh).map(|i| {
                let ih =
                    (run.oh * g.stride[0] + i * g.dilation[0]).checked_sub(g.padding[0]).filter(|&ih| ih < g.height);
                ih.map(|ih| (ih * g.width) as isize)
            }));
            columns.extend(taps.iter().map(|tap| {
                let (first, last) = (run.ow.max(tap.outputs.start), (run.ow + run.len).min(tap.outputs.end));
                let shift = (run.ow as isize - run.lo as isize - tap.outputs.start as isize) * stride as isize;
                if first < last {
                    (run.lo + first - run.ow..run.lo + last - run.ow, tap.first as isize + shift)
                } else {
                    (0..0, 0)
                }
            }));
        }
        // Depth pc is (c, i, j) = (pc / (kh kw), pc / kw % kh, pc % kw); the rows follow.
        let (mut c, mut i, mut j) = (pc / (kh * kw), pc / kw % kh, pc % kw);
        for dst in panel.chunks_exact_mut(NR) {
            // SAFETY (the three calls): the caller's contract.
            let mut v = unsafe { R::zero() };
            for r in 0..runs.len() {
                let (lanes, column) = columns[r * kw + j].clone();
                if let Some(row) = rows[r * kh + i].filter(|_| !lanes.is_empty()) {
                    unsafe { v.gather(planes, (c * plane) as isize + row + column, lanes, stride) };
                }
            }
            unsafe { v.store(dst) };
            j += 1;
            if j == kw {
                (i, j) = (i + 1, 0);
                if i == kh {
                    (c, i) = (c + 1, 0);
                }
            }
        }
    }
}
