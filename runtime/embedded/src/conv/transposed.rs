//! The product run transposed, for a weight the compiler packed as a right operand
//! (`WeightForm::ColumnPanels`): `out^T[positions, O/G] = windows^T @ weight^T`, the output
//! positions as the GEMM's rows. For planes of few positions (ResNet's 7x7 layer4: 49),
//! where the usual orientation would leave most of its last 16-column panel empty: as rows
//! they fill whole register tiles but one short one, and the output channels fill the
//! panels.
//!
//! The windows are a plain `[depth, positions]` matrix (for a pointwise kernel the input
//! planes themselves, or those transformed by `Conv2d::input`, else written from the
//! input rows: [`write_windows`]), read as A with
//! its rows 1 apart; C is a `[positions, O/G]` buffer, transposed into `out` (onto the
//! residual, when there is one) before the activation.

use super::scaled::Channels;
use super::{Sums, TapColumns};
use crate::gemm::{gemm_packed, Bias, Operands, Packed, Problem};
use crate::pool::{self, SharedOut};
use crate::spare::Handle;
use aotc_abi::conv::{Algorithm, Conv2d};
use aotc_abi::gemm::{Activation, MR, NR};

/// One group's `out[O/G, positions] = weight @ windows + sums` through the geometry's
/// activation, on up to `threads` threads; `weight` is the group's `[depth, O/G]` packed as
/// a right operand; `transform`, for a pointwise kernel, its input transform.
/// (Never pooled: the compiler does not choose this form then.)
///
/// Each thread's GEMM and the transposition of its C run on the same thread, so that C
/// is transposed from the core's own cache. With at least as many positions as output
/// channels, the threads take ranges of positions (whole register tiles of the product's
/// rows), each with all it writes: its windows, its rows of C and its columns of the
/// output planes. (Windows written on one core and read on another cost a cache line's
/// transfer apiece: written whole, then cut between the GEMM's threads, DenseNet's 128 ->
/// 32 at 7x7 took 82 us on 2 threads, 68 on 1.) With more channels, the windows are written
/// once and the threads take ranges of output channels (whole panels of the weight), so
/// that each streams only its part of the weight (ResNet's 512 -> 2048 at 7x7: 4 MiB).
#[allow(clippy::too_many_arguments)]
pub fn product(
    g: &Conv2d,
    weight: &[f32],
    planes: &[f32],
    transform: Option<Channels>,
    out: &mut [f32],
    sums: Sums,
    threads: usize,
) {
    let (m, k, n) = (g.positions(), g.depth(), g.group_out_channels());
    if n == 0 {
        return;
    }
    let threads = super::threads_for(m * k * n, threads);
    let base = SharedOut::new(out);
    let part = |positions| Part { g, weight, planes, transform, sums, positions };
    if m >= n {
        let parts = threads.min(m.div_ceil(MR)).max(1);
        pool::parallel_for(parts, parts, &|i| {
            let part = part(share(i, parts, m, MR));
            let windows = part.windows(1);
            // SAFETY: `out` holds the group's `[n, m]` planes, whose columns
            // `part.positions` are this part's alone (the parts' ranges are disjoint).
            unsafe { part.multiply(windows.as_deref(), 0..n, base.get()) }
        });
    } else {
        let part = part(0..m);
        let windows = part.windows(threads);
        let parts = threads.min(n.div_ceil(NR)).max(1);
        pool::parallel_for(parts, parts, &|i| {
            let channels = share(i, parts, n, NR);
            // SAFETY: `out` holds the group's `[n, m]` planes, of which planes `channels`
            // are this part's alone (the parts' ranges are disjoint).
            unsafe { part.multiply(windows.as_deref(), channels, base.get()) }
        });
    }
}

/// Part `i` of `parts` of `0..len`, cut at multiples of `unit` (whole register tiles or
/// panels of the packed weight).
fn share(i: usize, parts: usize, len: usize, unit: usize) -> std::ops::Range<usize> {
    let units = len.div_ceil(unit);
    (units * i / parts * unit).min(len)..(units * (i + 1) / parts * unit).min(len)
}

/// The output positions `positions` of [`product`].
struct Part<'a> {
    g: &'a Conv2d,
    weight: &'a [f32],
    planes: &'a [f32],
    transform: Option<Channels<'a>>,
    sums: Sums<'a>,
    positions: std::ops::Range<usize>,
}

impl Part<'_> {
    /// The part's windows as a `[depth, positions]` matrix, written on up to `threads`
    /// threads; None for a pointwise kernel without an input transform, whose windows are
    /// the planes themselves.
    fn windows(&self, threads: usize) -> Option<crate::spare::Buffer> {
        let g = self.g;
        let (m, k, len) = (g.positions(), g.depth(), self.positions.len());
        if g.algorithm() == Algorithm::Pointwise && self.transform.is_none() {
            return None;
        }
        // The running thread's seat's buffers (see `conv::__aotc_conv2d_f32`'s images).
        let spare = Handle::current();
        let mut windows = spare.take(k * len);
        match self.transform {
            // (Few positions: the transformed planes are a small copy.)
            Some(transform) => {
                for (c, row) in windows.chunks_exact_mut(len.max(1)).take(k).enumerate() {
                    transform.apply(c, &self.planes[c * m..][self.positions.clone()], row);
                }
            }
            None => write_windows(g, self.planes, self.positions.clone(), &mut windows, threads, spare),
        }
        Some(windows)
    }

    /// Output planes `channels` at the part's positions, on the running thread: the
    /// product of its `windows` (see [`Part::windows`]) by those columns of the weight,
    /// then transposed into the planes.
    ///
    /// # Safety
    /// `out` holds the `[n, m]` planes, whose columns `positions` of planes `channels` no
    /// other thread touches meanwhile; `channels` starts at a panel of the weight.
    unsafe fn multiply(&self, windows: Option<&[f32]>, channels: std::ops::Range<usize>, out: *mut f32) {
        let g = self.g;
        let (m, k, n) = (g.positions(), g.depth(), g.group_out_channels());
        let (first, len, width) = (self.positions.start, self.positions.len(), channels.len());
        // A: the k x len windows (or the planes' columns), read transposed.
        let (a, csa) = match windows {
            Some(w) => (w.as_ptr(), len),
            None => (self.planes[first.min(self.planes.len())..].as_ptr(), m),
        };
        // C row-major in a buffer, transposed into `out` at the end: written transposed in
        // place, every depth block's output pass would go element by element.
        let mut rows = Handle::current().take(len * width);
        let p = Problem {
            m: len,
            k,
            n: width,
            alpha: 1.0,
            a,
            rsa: 1,
            csa: csa as isize,
            b: std::ptr::null(),
            rsb: 0,
            csb: 0,
            beta: 0.0,
            c: rows.as_mut_ptr(),
            rsc: width as isize,
            csc: 1,
        };
        let operands = Operands {
            b: Packed::new(self.weight.as_ptr(), n, NR).map(|b| b.skip(channels.start)),
            bias: self.sums.bias.map_or(Bias::None, |b| Bias::Cols(b[channels.start..].as_ptr())),
            ..Operands::default()
        };
        // SAFETY: A is len x k with rows 1 apart and columns `csa` apart, inside the windows
        // (or the planes, from column `first`); B the group's weight packed as a k x n right
        // operand (`packed_group_len` floats, checked against the geometry by `lens`), from
        // column `channels.start` (a panel's first) on for `width` columns; C the len x
        // width `rows`, a unique borrow; the bias `width` floats from there.
        unsafe { gemm_packed(p, operands, 1, &pool::parallel_for) }
        // SAFETY: the caller's.
        unsafe { write_planes(&rows, channels, self.positions.clone(), m, self.sums.residual, g.activation, out) }
    }
}

/// Output channels per block of [`write_planes`]: a cache line of each row of C.
const PLANES_PER_BLOCK: usize = 16;

/// `out[o, i] = activation(rows[i - first, o - channels.start] + residual[o, i])` for the
/// positions `i` of `positions` and the planes `o` of `channels`: the `[positions,
/// channels]` product transposed into columns of the `[n, m]` planes, by blocks of
/// [`PLANES_PER_BLOCK`] planes (in L1), each row's cache line of the block read once. A
/// row of C is often 4 or 8 KiB: the lines of a column all fall in the same few sets of
/// L1, so read plane by plane (a column at a time) nearly every read missed L1
/// (ShuffleNet's 192 -> 1024 at 7x7: 234 -> 125 us in all).
///
/// # Safety
/// `out` holds planes of `m` floats, at least `channels.end` of them, whose columns
/// `positions` of planes `channels` no other thread touches meanwhile.
unsafe fn write_planes(
    rows: &[f32],
    channels: std::ops::Range<usize>,
    positions: std::ops::Range<usize>,
    m: usize,
    residual: Option<&[f32]>,
    activation: Activation,
    out: *mut f32,
) {
    let (first, len, width) = (positions.start, positions.len(), channels.len());
    assert!(positions.end <= m && rows.len() >= len * width);
    // SAFETY: plane o's columns `positions`, inside `out` and this caller's alone.
    let plane = |o: usize| unsafe { std::slice::from_raw_parts_mut(out.add(o * m + first), len) };
    for block in channels.clone().step_by(PLANES_PER_BLOCK) {
        let block = block..(block + PLANES_PER_BLOCK).min(channels.end);
        // SAFETY: the block's columns of the `len` rows of `rows` (asserted), and its
        // planes' columns `positions` (the caller's).
        unsafe {
            let columns = rows.as_ptr().add(block.start - channels.start);
            transpose(columns, width, block.len(), len, out.add(block.start * m + first), m);
        }
        // (The block's planes are still in L1.)
        for o in block {
            let plane = plane(o);
            if let Some(residual) = residual {
                plane.iter_mut().zip(&residual[o * m + first..]).for_each(|(y, &r)| *y += r);
            }
            crate::activation::apply(activation, plane);
        }
    }
}

/// `planes[o * m + i] = rows[i * width + o]` for `count` planes and `len` positions: 8 x 8
/// blocks transposed in registers where the CPU has AVX2 (on AVX-512 CPUs too), the edges
/// one float at a time.
///
/// # Safety
/// `rows` holds `len` rows `width` apart of `count` floats, `planes` `count` planes `m`
/// apart of `len` floats.
unsafe fn transpose(rows: *const f32, width: usize, count: usize, len: usize, planes: *mut f32, m: usize) {
    let (mut vector_planes, mut vector_len) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if crate::isa::Isa::best() >= crate::isa::Isa::Avx2 {
        (vector_planes, vector_len) = (count / 8 * 8, len / 8 * 8);
        // SAFETY: AVX2 is available; the blocks lie inside both (the caller's).
        unsafe { transpose_blocks_avx2(rows, width, vector_planes, vector_len, planes, m) };
    }
    for o in 0..count {
        let done = if o < vector_planes { vector_len } else { 0 };
        for i in done..len {
            // SAFETY: the caller's.
            unsafe { *planes.add(o * m + i) = *rows.add(i * width + o) };
        }
    }
}

/// [`transpose`] of `count` planes by `len` positions, both multiples of 8.
///
/// # Safety
/// As [`transpose`]; the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose_blocks_avx2(rows: *const f32, width: usize, count: usize, len: usize, planes: *mut f32, m: usize) {
    use std::arch::x86_64::{_mm256_loadu_ps, _mm256_storeu_ps};
    for o in (0..count).step_by(8) {
        for i in (0..len).step_by(8) {
            // SAFETY: rows i..i + 8 of columns o..o + 8, planes o..o + 8 at positions
            // i..i + 8, inside both (the caller's).
            unsafe {
                let block = std::array::from_fn(|r| _mm256_loadu_ps(rows.add((i + r) * width + o)));
                for (j, v) in crate::simd::transpose8(block).into_iter().enumerate() {
                    _mm256_storeu_ps(planes.add((o + j) * m + i), v);
                }
            }
        }
    }
}

/// Writes the windows of output positions `positions` as a `[depth, positions]` matrix
/// into `windows`: row `(c, i, j)` holds, for each of those positions, the input at kernel
/// tap `(i, j)` of channel `c` (0 in the padding). Rows of depth are spread over `threads`;
/// a part of the positions is cut from whole rows written into a buffer of one row (in L1).
fn write_windows(
    g: &Conv2d,
    planes: &[f32],
    positions: std::ops::Range<usize>,
    windows: &mut [f32],
    threads: usize,
    spare: Handle,
) {
    let (m, len, depth) = (g.positions(), positions.len(), g.depth());
    if len == 0 || depth == 0 {
        return;
    }
    let taps = TapColumns::of(g);
    let same_size = g.stride == [1, 1] && g.out_size == [g.height, g.width];
    let ([kh, kw], plane_len) = (g.kernel, g.height * g.width);
    let chunks = if depth * len >= 1 << 16 { threads } else { 1 };
    let base = SharedOut::new(windows);
    pool::parallel_for(chunks, chunks, &|chunk| {
        let rows = depth * chunk / chunks..depth * (chunk + 1) / chunks;
        // SAFETY: rows `rows` of `windows` (depth x len floats), which the chunks partition.
        let part = unsafe { std::slice::from_raw_parts_mut(base.get().add(rows.start * len), rows.len() * len) };
        let mut whole_row = (len < m).then(|| spare.take(m));
        for (p, dst) in rows.zip(part.chunks_exact_mut(len)) {
            // Row p is tap (i, j) of channel c.
            let (c, i, j) = (p / (kh * kw), p / kw % kh, p % kw);
            let plane = &planes[c * plane_len..][..plane_len];
            let row = match whole_row.as_mut() {
                Some(row) => &mut row[..m],
                None => &mut *dst,
            };
            if same_size {
                shifted_plane(g, plane, [i, j], &taps[j], row);
            } else {
                window_row(g, plane, i, &taps[j], row);
            }
            if let Some(row) = &whole_row {
                dst.copy_from_slice(&row[positions.clone()]);
            }
        }
    });
}

/// [`window_row`] for a stride-1 convolution whose output is as large as its input (3x3
/// with padding 1): the row is the plane shifted by tap `(i, j)`'s offset, one copy
/// with zeros before and after (the rows in the padding), then zeros in the columns in
/// the padding. Row by row, a 7 x 7 plane took three calls to memset and memcpy per 7
/// floats (DenseNet's 128 -> 32 at 7x7, the whole convolution on 1 thread: 87 -> 66 us).
fn shifted_plane(g: &Conv2d, plane: &[f32], [i, j]: [usize; 2], tap: &TapColumns, row: &mut [f32]) {
    let (h, w) = (g.height, g.width);
    // Output q reads plane[q + shift] when its row and column are inside the plane.
    let shift = (i * g.dilation[0]) as isize - g.padding[0] as isize;
    let shift = shift * w as isize + (j * g.dilation[1]) as isize - g.padding[1] as isize;
    let len = (h * w) as isize;
    let (start, end) = ((-shift).clamp(0, len) as usize, (len - shift).clamp(0, len) as usize);
    let start = start.min(end);
    row[..start].fill(0.0);
    row[end..].fill(0.0);
    row[start..end].copy_from_slice(&plane[(start as isize + shift) as usize..][..end - start]);
    // Column by column (a padding of 1 is one column): a fill per row would call memset.
    let inside = tap.outputs.clone();
    for col in (0..inside.start).chain(inside.end..w) {
        row.iter_mut().skip(col).step_by(w).for_each(|x| *x = 0.0);
    }
}

/// The windows' row of kernel tap `(i, j)` over one input plane, one output row at a
/// time: the input row that kernel row `i` reaches (zeros outside the plane), the columns
/// that kernel column `j` (`tap`) reaches inside it (zeros in the padding).
fn window_row(g: &Conv2d, plane: &[f32], i: usize, tap: &TapColumns, row: &mut [f32]) {
    let (out_w, stride) = (g.out_size[1], g.stride[1]);
    for (oh, dst) in row.chunks_exact_mut(out_w).enumerate() {
        let ih = (oh * g.stride[0] + i * g.dilation[0]).checked_sub(g.padding[0]).filter(|&ih| ih < g.height);
        let Some(ih) = ih.filter(|_| !tap.outputs.is_empty()) else {
            dst.fill(0.0);
            continue;
        };
        dst[..tap.outputs.start].fill(0.0);
        dst[tap.outputs.end..].fill(0.0);
        let (src, dst) = (&plane[ih * g.width + tap.first..], &mut dst[tap.outputs.clone()]);
        if stride == 1 {
            dst.copy_from_slice(&src[..dst.len()]);
        } else {
            dst.iter_mut().zip(src.iter().step_by(stride)).for_each(|(d, &x)| *d = x);
        }
    }
}
