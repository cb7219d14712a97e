//! 2-D max pooling of float32 planes (`aotc_abi::conv::MAX_POOL_SYMBOL`), for graphs that
//! never read the indices: each output row starts at -inf and takes the maximum with the
//! input row under each kernel tap (NaN wins), like the depthwise convolution's rows. With
//! AVX2 or AVX-512 (`crate::simd`), the usual geometries (horizontal stride 1, or 2
//! undilated) take [`lanes::Rows`].

use super::TapColumns;
use crate::guards::refuse_extern_call;
use crate::pool::for_items;
use aotc_abi::conv::Conv2d;

#[cfg(target_arch = "x86_64")]
mod lanes;

/// `out[N, C, OH, OW]` = the maximum of each window of `x[N, C, H, W]`, the geometry
/// `geometry[..count]` in [`Conv2d::to_list`]'s order (channels = out_channels).
///
/// # Safety
/// The buffers hold the contiguous tensors the geometry describes; `out` overlaps nothing.
#[no_mangle]
pub unsafe extern "C" fn __aotc_max_pool2d_f32(out: *mut f32, x: *const f32, geometry: *const i64, count: i64) {
    // SAFETY: the generated code passes its geometry list and its length.
    let list = unsafe { std::slice::from_raw_parts(geometry, count.max(0) as usize) };
    let Some((g, (x_len, _, out_len))) = Conv2d::windows_from_list(list).and_then(|g| Some((g, g.lens()?))) else {
        return refuse_extern_call("__aotc_max_pool2d_f32");
    };
    if g.channels != g.out_channels {
        return refuse_extern_call("__aotc_max_pool2d_f32");
    }
    if out_len == 0 || x_len == 0 {
        return;
    }
    // SAFETY: the caller's contract (sizes from the geometry).
    let (x, out) = unsafe { (std::slice::from_raw_parts(x, x_len), std::slice::from_raw_parts_mut(out, out_len)) };
    let (plane_in, positions) = (g.height * g.width, g.positions());
    let taps = g.kernel[0] * g.kernel[1];
    let columns = TapColumns::of(&g);
    let isa = crate::isa::Isa::best();
    for_items(out, out_len / positions, positions, out_len * taps, &|begin, end, part| {
        #[cfg(target_arch = "x86_64")]
        if isa != crate::isa::Isa::Portable && lanes::fits(&g) {
            let mut rows = lanes::Rows::new(&g);
            for (p, out) in (begin..end).zip(part.chunks_exact_mut(positions)) {
                // SAFETY: the CPU runs `isa`, a vector set; the buffers are for this geometry, which fits.
                unsafe { lanes::plane(isa, &mut rows, &g, &x[p * plane_in..][..plane_in], out) };
            }
            return;
        }
        for (p, out) in (begin..end).zip(part.chunks_exact_mut(positions)) {
            plane(&g, &columns, &x[p * plane_in..][..plane_in], out);
        }
    });
}

/// The 2x2 max pool at stride 2 of a pooled convolution's rows (`Conv2d::pool`): each
/// row of `width / 2` in `dst` from the next pair of rows of `width` in `src` (a last odd
/// column dropped), NaN winning.
pub(super) fn row_pairs(src: &[f32], width: usize, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let isa @ (crate::isa::Isa::Avx2 | crate::isa::Isa::Avx512) = crate::isa::Isa::best() {
        // SAFETY: the CPU runs `isa`, a vector set; the sizes are the function's contract.
        return unsafe { lanes::row_pairs(isa, src, width, dst) };
    }
    let half = width / 2;
    for (p, out) in dst.chunks_exact_mut(half.max(1)).enumerate().filter(|_| half > 0) {
        let (a, b) = (&src[2 * p * width..][..width], &src[(2 * p + 1) * width..][..width]);
        for (c, o) in out.iter_mut().enumerate() {
            *o = max(max(a[2 * c], a[2 * c + 1]), max(b[2 * c], b[2 * c + 1]));
        }
    }
}

/// One output plane, with the AVX2 code where the CPU has it.
fn plane(g: &Conv2d, columns: &[TapColumns], input: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::Isa::best() >= crate::isa::Isa::Avx2 {
        // SAFETY: the CPU has AVX2.
        return unsafe { plane_avx2(g, columns, input, out) };
    }
    plane_portable(g, columns, input, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plane_avx2(g: &Conv2d, columns: &[TapColumns], input: &[f32], out: &mut [f32]) {
    plane_portable(g, columns, input, out)
}

/// `a` or `b`, whichever is larger, NaN winning.
#[inline(always)]
pub(super) fn max(a: f32, b: f32) -> f32 {
    if b > a || b.is_nan() {
        b
    } else {
        a
    }
}

#[inline(always)]
fn plane_portable(g: &Conv2d, columns: &[TapColumns], input: &[f32], out: &mut [f32]) {
    let (width, stride) = (g.width, g.stride[1]);
    for (oh, row) in out.chunks_exact_mut(g.out_size[1]).enumerate() {
        row.fill(f32::NEG_INFINITY);
        for i in 0..g.kernel[0] {
            // The input row of kernel row i, when inside the plane.
            let Some(ih) = (oh * g.stride[0] + i * g.dilation[0]).checked_sub(g.padding[0]).filter(|&ih| ih < g.height)
            else {
                continue;
            };
            let src = &input[ih * width..][..width];
            for cols in columns {
                let dst = &mut row[cols.outputs.clone()];
                if stride == 1 {
                    for (o, &s) in dst.iter_mut().zip(&src[cols.first..]) {
                        *o = max(*o, s);
                    }
                } else {
                    for (o, &s) in dst.iter_mut().zip(src[cols.first..].iter().step_by(stride)) {
                        *o = max(*o, s);
                    }
                }
            }
        }
    }
}
