//! A pointwise convolution whose input channels are transformed first (`Conv2d::input`:
//! squeeze-and-excite's gate, `x * s[c]`, on the input of the 1x1 projection after it, or
//! a batch norm and ReLU, `relu(x * s[c] + t[c])`, DenseNet's pre-activation). The
//! transformed input is never written whole: the output positions go in blocks, each
//! block's input columns transformed into a buffer that stays in cache and multiplied
//! there by the packed weight, so the transform costs a read of the input instead of a
//! round trip of it through memory.

use super::Sums;
use crate::gemm::{gemm_packed, Operands, Packed, Problem};
use crate::guards::refuse_extern_call;
use crate::pool::{self, SharedOut};
use crate::spare::Handle;
use aotc_abi::conv::Conv2d;
use aotc_abi::gemm::{MR, NR};

/// Floats of a block's scaled input: 128 KiB, well inside a core's L2.
const BLOCK_FLOATS: usize = 1 << 15;

/// One image's input transform: channel c's factor `scale[c]`, and with a `shift`, its
/// offset `shift[c]` and a ReLU after.
#[derive(Clone, Copy)]
pub struct Channels<'a> {
    pub scale: &'a [f32],
    pub shift: Option<&'a [f32]>,
}

impl Channels<'_> {
    /// `dst = transform(src)` for input channel `c` (same lengths).
    pub fn apply(&self, c: usize, src: &[f32], dst: &mut [f32]) {
        let s = self.scale[c];
        match self.shift {
            None => dst.iter_mut().zip(src).for_each(|(y, &x)| *y = x * s),
            Some(shift) => {
                let t = shift[c];
                // Multiply then add, as the graph's kernel rounds; `<` keeps NaN.
                dst.iter_mut().zip(src).for_each(|(y, &x)| {
                    let v = x * s + t;
                    *y = if v < 0.0 { 0.0 } else { v };
                });
            }
        }
    }
}

/// `out[O, positions] = weight @ transform(planes) + sums` for one image through the
/// geometry's activation, on up to `threads` threads; `weight` is the `[O, C]` weight
/// packed as a left operand, `planes` the `[C, positions]` input.
#[allow(clippy::too_many_arguments)]
pub fn product(
    g: &Conv2d,
    weight: &[f32],
    planes: &[f32],
    transform: Channels,
    out: &mut [f32],
    sums: Sums,
    threads: usize,
) {
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
        for (c, (row, plane)) in scaled.chunks_exact_mut(width).zip(planes.chunks_exact(n)).enumerate() {
            transform.apply(c, &plane[first..][..width], row);
        }
        // (The whole struct copied: a closure capturing its fields would not be Sync.)
        let mut operands = operands;
        operands.addend = sums.addend(n, first);
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
            beta: 0.0,
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
