//! A pointwise convolution whose input channels are scaled first (`Conv2d::input_scale`:
//! squeeze-and-excite's gate, `x * s[c]`, on the input of the 1x1 projection after it).
//! The scaled input is never written whole: the output positions go in blocks, each
//! block's input columns scaled into a buffer that stays in cache and multiplied there
//! by the packed weight, so the gate costs a read of the input instead of a round trip of
//! it through memory.

use super::Sums;
use crate::gemm::{gemm_packed, Operands, Packed, Problem};
use crate::guards::refuse_extern_call;
use crate::pool::{self, SharedOut};
use crate::spare::Handle;
use aotc_abi::conv::Conv2d;
use aotc_abi::gemm::{MR, NR};

/// Floats of a block's scaled input: 128 KiB, well inside a core's L2.
const BLOCK_FLOATS: usize = 1 << 15;

/// `out[O, positions] = weight @ (planes * scale) + sums` for one image through the
/// geometry's activation, on up to `threads` threads; `weight` is the `[O, C]` weight
/// packed as a left operand, `planes` the `[C, positions]` input, `scale` its `C` factors.
pub fn product(g: &Conv2d, weight: &[f32], planes: &[f32], scale: &[f32], out: &mut [f32], sums: Sums, threads: usize) {
    let (m, k, n) = (g.out_channels, g.channels, g.positions());
    if n == 0 {
        return;
    }
    // Columns per block: whole panels, as many as the buffer holds, at least one.
    let columns = (BLOCK_FLOATS / k.max(1)).next_multiple_of(NR).max(NR).min(n);
    let blocks = n.div_ceil(columns);
    let Some(a) = Packed::new(weight.as_ptr(), m, MR) else { return refuse_extern_call("__aotc_conv2d_f32") };
    let operands = Operands { a: Some(a), bias: sums.bias(), activation: g.activation, ..Operands::default() };
    let base = SharedOut::new(out);
    pool::parallel_for(threads.min(blocks), blocks, &|block| {
        let (first, width) = (block * columns, columns.min(n - block * columns));
        let mut scaled = Handle::current().take(k * width);
        for ((row, plane), &s) in scaled.chunks_exact_mut(width).zip(planes.chunks_exact(n)).zip(scale) {
            row.iter_mut().zip(&plane[first..][..width]).for_each(|(y, &x)| *y = x * s);
        }
        let p = Problem {
            m,
            k,
            n: width,
            alpha: 1.0,
            a: weight.as_ptr(),
            rsa: k as isize,
            csa: 1,
            b: scaled.as_ptr(),
            rsb: width as isize,
            csb: 1,
            beta: sums.beta(),
            // Columns `first..first + width` of the m x n output.
            c: base.get().wrapping_add(first),
            rsc: n as isize,
            csc: 1,
        };
        // SAFETY: A is the weight packed for m rows (`packed_group_len` floats, checked
        // against the geometry by `lens`); B the k x width block, a buffer of this chunk;
        // C the block's columns of `out`, which the blocks partition; the bias m floats.
        unsafe { gemm_packed(p, operands, 1, &pool::parallel_for) }
    });
}
