//! Implicit im2col: the windows of one group's input planes as the GEMM's right operand
//! `[C/G * KH * KW, OH * OW]`, whose row `(c, i, j)` holds, for every output position, the
//! input at kernel tap `(i, j)` of channel `c` (0 in the padding). The GEMM asks for the
//! pieces of rows it packs ([`segment`]), so the matrix, KH * KW times the input's size,
//! never exists in memory.

use super::valid_outputs;
use aotc_abi::conv::Conv2d;

/// Writes elements `start..start + out.len()` of row `r = (c * KH + i) * KW + j` of the
/// matrix, from `planes` (`C/G` planes of H x W).
pub fn segment(g: &Conv2d, planes: &[f32], r: usize, start: usize, out: &mut [f32]) {
    let [kh, kw] = g.kernel;
    let (c, i, j) = (r / (kh * kw), r / kw % kh, r % kw);
    let (height, width) = (g.height, g.width);
    let plane = &planes[c * height * width..][..height * width];
    let [out_h, out_w] = g.out_size;
    let (offset_h, offset_w) = (i * g.dilation[0], j * g.dilation[1]);
    let rows = valid_outputs(offset_h, g.padding[0], g.stride[0], height, out_h);
    let cols = valid_outputs(offset_w, g.padding[1], g.stride[1], width, out_w);
    // The input column of output column `ow` is `ow * stride + offset_w - padding`.
    let (stride, shift) = (g.stride[1], offset_w as isize - g.padding[1] as isize);
    let (mut position, mut out) = (start, out);
    while !out.is_empty() {
        // The part of output row `oh` from column `ow0` on that this piece holds.
        let (oh, ow0) = (position / out_w, position % out_w);
        let (part, rest) = out.split_at_mut((out_w - ow0).min(out.len()));
        let (ow_end, valid) = (ow0 + part.len(), cols.start.max(ow0)..cols.end.min(ow0 + part.len()));
        if !rows.contains(&oh) || valid.is_empty() {
            part.fill(0.0);
        } else {
            let src = &plane[(oh * g.stride[0] + offset_h - g.padding[0]) * width..][..width];
            part[..valid.start - ow0].fill(0.0);
            part[valid.end - ow0..].fill(0.0);
            let first = (valid.start as isize * stride as isize + shift) as usize;
            let dst = &mut part[valid.start - ow0..valid.end - ow0];
            if stride == 1 {
                dst.copy_from_slice(&src[first..first + dst.len()]);
            } else {
                for (o, &s) in dst.iter_mut().zip(src[first..].iter().step_by(stride)) {
                    *o = s;
                }
            }
        }
        debug_assert!(ow_end <= out_w);
        position += part.len();
        out = rest;
    }
}
