//! im2col: the windows of one group's input planes as the GEMM's right operand, a
//! `[C/G * KH * KW, OH * OW]` row-major matrix whose row `(c, i, j)` holds, for every output
//! position, the input at kernel tap `(i, j)` of channel `c` (0 in the padding).

use super::{for_items, valid_outputs};
use aotc_abi::conv::Conv2d;

/// Fills `columns` (`depth() * positions()` floats) from `planes` (`C/G` planes of H x W).
pub fn gather(g: &Conv2d, planes: &[f32], columns: &mut [f32]) {
    let positions = g.positions();
    for_items(columns, g.depth(), positions, columns.len(), &|begin, end, rows| {
        for (r, row) in (begin..end).zip(rows.chunks_exact_mut(positions)) {
            gather_row(g, planes, r, row);
        }
    });
}

/// Row `r = (c * KH + i) * KW + j` of the matrix.
fn gather_row(g: &Conv2d, planes: &[f32], r: usize, row: &mut [f32]) {
    let [kh, kw] = g.kernel;
    let (c, i, j) = (r / (kh * kw), r / kw % kh, r % kw);
    let (height, width) = (g.height, g.width);
    let plane = &planes[c * height * width..][..height * width];
    let [out_h, out_w] = g.out_size;
    let (offset_h, offset_w) = (i * g.dilation[0], j * g.dilation[1]);
    let rows = valid_outputs(offset_h, g.padding[0], g.stride[0], height, out_h);
    let cols = valid_outputs(offset_w, g.padding[1], g.stride[1], width, out_w);
    for (oh, out) in row.chunks_exact_mut(out_w).enumerate() {
        if !rows.contains(&oh) {
            out.fill(0.0);
            continue;
        }
        let src = &plane[(oh * g.stride[0] + offset_h - g.padding[0]) * width..][..width];
        out[..cols.start].fill(0.0);
        out[cols.end..].fill(0.0);
        // The input column of output column `ow` is `ow * stride + first`.
        let first = offset_w as isize - g.padding[1] as isize;
        let start = (cols.start as isize * g.stride[1] as isize + first) as usize;
        if g.stride[1] == 1 {
            out[cols.clone()].copy_from_slice(&src[start..start + cols.len()]);
        } else {
            for (o, &s) in out[cols.clone()].iter_mut().zip(src[start..].iter().step_by(g.stride[1])) {
                *o = s;
            }
        }
    }
}
