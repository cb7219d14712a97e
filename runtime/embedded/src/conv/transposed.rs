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
use aotc_abi::gemm::{Activation, NR};

/// One group's `out[O/G, positions] = weight @ windows + sums` through the geometry's
/// activation, on up to `threads` threads; `weight` is the group's `[depth, O/G]` packed as
/// a right operand; `transform`, for a pointwise kernel, its input transform.
/// (Never pooled: the compiler does not choose this form then.)
#[allow(clippy::too_many_arguments)]
pub fn product(
    g: &Conv2d,
    weight: &[f32],
    planes: &[f32],
    transform: Option<Channels>,
    out: &mut [f32],
    sums: Sums,
    threads: usize,
    spare: Handle,
) {
    let (m, k, n) = (g.positions(), g.depth(), g.group_out_channels());
    let mut windows = (g.algorithm() != Algorithm::Pointwise || transform.is_some()).then(|| spare.take(k * m));
    match (windows.as_mut(), transform) {
        // (Few positions: the transformed planes are a small copy.)
        (Some(windows), Some(transform)) => {
            for (c, (row, plane)) in windows.chunks_exact_mut(m).zip(planes.chunks_exact(m)).enumerate() {
                transform.apply(c, plane, row);
            }
        }
        (Some(windows), None) => write_windows(g, planes, windows, threads),
        (None, _) => {}
    }
    let a = windows.as_ref().map_or(planes.as_ptr(), |w| w.as_ptr());
    // C row-major in a buffer, transposed into `out` at the end: written transposed in
    // place, every depth block's output pass would go element by element.
    let mut rows = spare.take(m * n);
    let p = Problem {
        m,
        k,
        n,
        alpha: 1.0,
        a,
        rsa: 1,
        csa: m as isize,
        b: std::ptr::null(),
        rsb: 0,
        csb: 0,
        beta: 0.0,
        c: rows.as_mut_ptr(),
        rsc: n as isize,
        csc: 1,
    };
    let operands = Operands {
        b: Packed::new(weight.as_ptr(), n, NR),
        bias: sums.bias.map_or(Bias::None, |b| Bias::Cols(b.as_ptr())),
        ..Operands::default()
    };
    // SAFETY: A is the k x m windows (or planes) read transposed, m x k with rows 1 apart
    // and columns m apart; B the group's weight packed as a k x n right operand
    // (`packed_group_len` floats, checked against the geometry by `lens`); C the m
    // x n `rows`, a unique borrow; the bias n floats.
    unsafe { gemm_packed(p, operands, threads, &pool::parallel_for) }
    write_planes(&rows, m, sums.residual, g.activation, out);
}

/// Output channels per block of [`write_planes`]: a cache line of each row of C.
const PLANES_PER_BLOCK: usize = 16;

/// `out[o, i] = activation(rows[i, o] + residual[o, i])`: the `[positions, O]` product
/// transposed into the `[O, positions]` planes, by blocks of [`PLANES_PER_BLOCK`] planes
/// (in L1), each row's cache line of the block read once. A row of C is O floats long,
/// often 4 or 8 KiB: the lines of a column all fall in the same few sets of L1, so read
/// plane by plane (a column at a time) nearly every read missed L1 (ShuffleNet's 192 ->
/// 1024 at 7x7: 234 -> 125 us in all).
fn write_planes(rows: &[f32], positions: usize, residual: Option<&[f32]>, activation: Activation, out: &mut [f32]) {
    if positions == 0 {
        return;
    }
    let n = out.len() / positions;
    for (block, planes) in out.chunks_mut(PLANES_PER_BLOCK * positions).enumerate() {
        let (first, count) = (block * PLANES_PER_BLOCK, planes.len() / positions);
        for (i, row) in rows.chunks_exact(n).enumerate() {
            for (plane, &x) in planes.chunks_exact_mut(positions).zip(&row[first..first + count]) {
                plane[i] = x;
            }
        }
        // (The block's planes are still in L1.)
        if let Some(residual) = residual {
            planes.iter_mut().zip(&residual[first * positions..]).for_each(|(y, &r)| *y += r);
        }
        crate::activation::apply(activation, planes);
    }
}

/// Writes the windows as a `[depth, positions]` matrix into `windows`: row `(c, i, j)` holds,
/// for each output position, the input at kernel tap `(i, j)` of channel `c` (0 in the
/// padding). Rows of depth are spread over `threads`.
fn write_windows(g: &Conv2d, planes: &[f32], windows: &mut [f32], threads: usize) {
    let positions = g.positions();
    let depth = g.depth();
    if positions == 0 || depth == 0 {
        return;
    }
    let taps = TapColumns::of(g);
    let same_size = g.stride == [1, 1] && g.out_size == [g.height, g.width];
    let ([kh, kw], plane_len) = (g.kernel, g.height * g.width);
    let chunks = if depth * positions >= 1 << 16 { threads } else { 1 };
    let base = SharedOut::new(windows);
    pool::parallel_for(chunks, chunks, &|chunk| {
        let rows = depth * chunk / chunks..depth * (chunk + 1) / chunks;
        // SAFETY: rows `rows` of `windows` (depth x positions floats), which the chunks
        // partition.
        let part =
            unsafe { std::slice::from_raw_parts_mut(base.get().add(rows.start * positions), rows.len() * positions) };
        for (p, row) in rows.zip(part.chunks_exact_mut(positions)) {
            // Row p is tap (i, j) of channel c.
            let (c, i, j) = (p / (kh * kw), p / kw % kh, p % kw);
            let plane = &planes[c * plane_len..][..plane_len];
            if same_size {
                shifted_plane(g, plane, [i, j], &taps[j], row);
            } else {
                window_row(g, plane, i, &taps[j], row);
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
