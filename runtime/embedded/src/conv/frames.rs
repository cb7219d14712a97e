//! The input frames of one time tap of a 3-D convolution that runs as 2-D ones
//! (`aotc_abi::conv::FRAMES_SYMBOL`): a frames-first copy, one plane (height x width) at a
//! time, zeros for frames in the time padding.

use crate::guards::refuse_extern_call;
use crate::pool;
use aotc_abi::conv::Frames;

/// # Safety
/// `geometry` holds `count` int64s; `x` holds `N * C * T * plane` floats and `out`
/// `N * T_out * C * plane`, overlapping nothing.
#[no_mangle]
pub unsafe extern "C" fn __aotc_conv_frames_f32(out: *mut f32, x: *const f32, geometry: *const i64, count: i64) {
    // SAFETY: the generated code passes its geometry list and its length.
    let list = unsafe { std::slice::from_raw_parts(geometry, count.max(0) as usize) };
    let Some(g) = Frames::from_list(list) else { return refuse_extern_call("__aotc_conv_frames_f32") };
    let Some(out_len) = [g.batch, g.frames_out, g.channels, g.plane].iter().try_fold(1usize, |a, &b| a.checked_mul(b))
    else {
        return refuse_extern_call("__aotc_conv_frames_f32");
    };
    if out_len == 0 {
        return;
    }
    let (out_addr, x_addr) = (out as usize, x as usize);
    // Item i: output frame i % T_out of image i / T_out, all its channels.
    let items = g.batch * g.frames_out;
    let item_len = g.channels * g.plane;
    let copy = |range: std::ops::Range<usize>| {
        for i in range {
            let (n, t) = (i / g.frames_out, i % g.frames_out);
            // SAFETY: item i of `out` is inside it (the caller's contract).
            let dst = unsafe { std::slice::from_raw_parts_mut((out_addr as *mut f32).add(i * item_len), item_len) };
            let Some(f) = g.source(t) else {
                dst.fill(0.0);
                continue;
            };
            for (c, plane) in dst.chunks_exact_mut(g.plane).enumerate() {
                let at = ((n * g.channels + c) * g.frames + f) * g.plane;
                // SAFETY: frame f < T of channel c of image n is inside x, which `out` does not overlap.
                plane.copy_from_slice(unsafe { std::slice::from_raw_parts((x_addr as *const f32).add(at), g.plane) });
            }
        }
    };
    pool::for_ranges(items, out_len, &copy);
}
