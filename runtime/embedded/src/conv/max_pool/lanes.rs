//! The vector max pool (either width, [`F32s`]), by rows: each output row first takes the elementwise maximum of its
//! kernel's input rows (contiguous vectors, three rows per pass) into a row buffer padded with -inf, then the
//! maximum over each window along that row: at stride 1 straight from the buffer, at
//! stride 2 from its even and odd columns, split once per row, so that every tap is a
//! contiguous load again. -inf is the identity of the maximum, so the padding, and any
//! window that ceil mode puts past the input, read it and need no bounds.

use crate::simd::{for_each_isa, F32s};
use crate::spare::{Buffer, Handle};
use aotc_abi::conv::Conv2d;

/// The widest vector's lanes: the buffers are sized for it whatever the set.
const WIDEST: usize = 16;

/// Whether [`Rows`] runs this geometry: horizontal stride 1 (any dilation) or stride 2
/// with dilation 1; any vertical stride and dilation; rows of at least one vector of
/// outputs (4 x 4 outputs, bench_convnet's last pool, measured 0.13 ms here against 0.09
/// in the portable code: each row's passes cost more than its few maxima).
pub(super) fn fits(g: &Conv2d) -> bool {
    g.out_size[1] >= 8 && (g.stride[1] == 1 || (g.stride[1] == 2 && g.dilation[1] == 1))
}

/// One thread's buffers (the call's spare ones): the padded row (`row`), and at stride 2
/// its even and odd columns.
pub(super) struct Rows {
    row: Buffer,
    even: Buffer,
    odd: Buffer,
}

impl Rows {
    /// Buffers for `g` ([`fits`]), holding -inf.
    pub(super) fn new(g: &Conv2d) -> Rows {
        // Every window's last tap, in padded columns, for the vectors of outputs; and the
        // row pass's whole vectors.
        let reach = (g.out_size[1].next_multiple_of(WIDEST) - 1) * g.stride[1] + (g.kernel[1] - 1) * g.dilation[1] + 1;
        let rows_end = g.padding[1] + g.width.next_multiple_of(WIDEST);
        // Whole pairs of vectors for the split into even and odd columns.
        let len = rows_end.max(reach).next_multiple_of(2 * WIDEST);
        let half = if g.stride[1] == 2 { len / 2 } else { 0 };
        let spare = Handle::current();
        let mut rows = Rows { row: spare.take(len), even: spare.take(half), odd: spare.take(half) };
        for buffer in [&mut rows.row, &mut rows.even, &mut rows.odd] {
            buffer.fill(f32::NEG_INFINITY);
        }
        rows
    }
}

for_each_isa! {
    /// One plane: `out[OH * OW]` from `input[H * W]`, `rows` [`Rows::new`]'s for `g`, which
    /// [`fits`].
    pub(super) fn plane(rows: &mut Rows, g: &Conv2d, input: &[f32], out: &mut [f32]) => plane_generic
}

#[inline(always)]
unsafe fn plane_generic<V: F32s>(rows: &mut Rows, g: &Conv2d, input: &[f32], out: &mut [f32]) {
    // Plain index loops throughout: an iterator adapter's loop can end up in a function
    // of its own, compiled without the target features, where every intrinsic is a call.
    let (width, pad, ow, taps) = (g.width, g.padding[1], g.out_size[1], g.kernel[1]);
    // The even and odd columns the windows read: up to the last vector of outputs' last tap.
    let pairs = (ow.next_multiple_of(V::LANES) + (taps - 1) / 2).div_ceil(V::LANES);
    for oh in 0..g.out_size[0] {
        let dst = &mut out[oh * ow..][..ow];
        // The row pass writes whole vectors from `pad` (-inf past the input row).
        let row = &mut rows.row[pad..][..width.next_multiple_of(V::LANES)];
        // The kernel rows inside the plane, taken GROUP at a time in one pass over the row.
        let (mut group, mut count, mut first): ([&[f32]; GROUP], usize, bool) = ([&[]; GROUP], 0, true);
        for i in 0..g.kernel[0] {
            let Some(ih) = (oh * g.stride[0] + i * g.dilation[0]).checked_sub(g.padding[0]).filter(|&ih| ih < g.height)
            else {
                continue;
            };
            group[count] = &input[ih * width..][..width];
            count += 1;
            if count == GROUP {
                // SAFETY: the CPU runs V's set (the caller's).
                unsafe { max_rows_into::<V>(row, &group, first) };
                (count, first) = (0, false);
            }
        }
        if count > 0 {
            // SAFETY: the CPU runs V's set (the caller's).
            unsafe { max_rows_into::<V>(row, &group[..count], first) };
            first = false;
        }
        if first {
            // No kernel row inside the plane: every window is empty.
            row.fill(f32::NEG_INFINITY);
        }
        if g.stride[1] == 2 {
            // SAFETY: the CPU runs V's set (the caller's).
            unsafe { split::<V>(&rows.row, &mut rows.even, &mut rows.odd, pairs) };
        }
        // Where output 0's tap j reads (`Rows::new` sized the buffers for a vector of
        // outputs from any tap).
        let tap = |j: usize| match g.stride[1] {
            1 => rows.row[j * g.dilation[1]..].as_ptr(),
            _ => (if j.is_multiple_of(2) { &rows.even } else { &rows.odd })[j / 2..].as_ptr(),
        };
        // SAFETY (all): the CPU runs V's set (the caller's); each tap holds a vector of
        // outputs from any output's start.
        unsafe {
            match taps {
                2 => windows::<V, 2>(dst, [tap(0), tap(1)]),
                3 => windows::<V, 3>(dst, [tap(0), tap(1), tap(2)]),
                _ => windows_any::<V>(dst, taps, tap),
            }
        }
    }
}

/// Kernel rows whose maximum one pass over the row takes: the usual 3x3 pool's, which
/// then stores each vector once instead of copying the first row and reading and storing
/// the row again for each other one. Kernels bench, 1 thread (AMD EPYC Zen 4): SqueezeNet's
/// three pools 223/167/131 -> 174/114/89 us, ResNet's 220 -> 199, a 3x3 at stride 1
/// 155 -> 102.
const GROUP: usize = 3;

/// `row[c]` = the maximum of the rows `srcs[..][c]` and, unless `first`, of `row[c]`, NaN
/// winning, a whole vector at a time: -inf past the rows' end (`row` holds whole vectors).
///
/// # Safety
/// The CPU runs V's set.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // (index loops: see `plane_generic`; 2x2 pools ran 15% slower with iterators)
unsafe fn max_rows_into<V: F32s>(row: &mut [f32], srcs: &[&[f32]], first: bool) {
    let width = srcs[0].len();
    for s in 0..srcs.len() {
        assert!(srcs[s].len() == width);
    }
    assert!(row.len() >= width.next_multiple_of(V::LANES));
    let mut c = 0;
    while c < width {
        // SAFETY: the caller's; the floats of every row from c below width, a vector of
        // `row` from c (checked above).
        unsafe {
            let (d, n) = (row.as_mut_ptr().add(c), width - c);
            let mut v = V::load_up_to(srcs[0].as_ptr().add(c), n, f32::NEG_INFINITY);
            for s in 1..srcs.len() {
                v = v.max_nan(V::load_up_to(srcs[s].as_ptr().add(c), n, f32::NEG_INFINITY));
            }
            if !first {
                v = V::load(d).max_nan(v);
            }
            v.store(d);
        }
        c += V::LANES;
    }
}

/// The even and odd columns of the first `pairs` pairs of vectors of `row`.
///
/// # Safety
/// The CPU runs V's set.
#[inline(always)]
unsafe fn split<V: F32s>(row: &[f32], even: &mut [f32], odd: &mut [f32], pairs: usize) {
    let lanes = V::LANES;
    assert!(row.len() >= pairs * 2 * lanes && even.len() >= pairs * lanes && odd.len() >= pairs * lanes);
    for c in 0..pairs {
        // SAFETY: the caller's; 2 * lanes floats of `row` from 2 c lanes, `lanes` of
        // `even` and `odd` from c lanes (checked above).
        unsafe {
            let s = row.as_ptr().add(2 * c * lanes);
            let (e, o) = V::even_odd(V::load(s), V::load(s.add(lanes)));
            e.store(even.as_mut_ptr().add(c * lanes));
            o.store(odd.as_mut_ptr().add(c * lanes));
        }
    }
}

for_each_isa! {
    /// [`super::row_pairs`]: a vector of outputs from two vectors of columns of both rows
    /// at a time, the last one partial (one by one, the NaN-aware scalar maximum of a
    /// 16-lane tail measured slower than the 8-lane code). `src` holds a pair of rows of
    /// `width` per row of `width / 2` in `dst`.
    pub(super) fn row_pairs(src: &[f32], width: usize, dst: &mut [f32]) => row_pairs_generic
}

#[inline(always)]
unsafe fn row_pairs_generic<V: F32s>(src: &[f32], width: usize, dst: &mut [f32]) {
    let (half, lanes) = (width / 2, V::LANES);
    let pairs = dst.len() / half.max(1);
    assert!(src.len() >= pairs * 2 * width && dst.len() >= pairs * half);
    for p in 0..pairs {
        let (a, b) = (&src[2 * p * width..][..width], &src[(2 * p + 1) * width..][..width]);
        let out = &mut dst[p * half..][..half];
        let mut c = 0;
        while c < half {
            // Columns 2c.. of both rows, up to 2 half <= width.
            let (n, columns) = (half - c, 2 * (half - c));
            // SAFETY: the CPU runs V's set (the caller's); the loads read `columns` floats
            // of both rows from 2c (inside them), the store the `n` outputs from c.
            unsafe {
                let (a, b) = (a.as_ptr().add(2 * c), b.as_ptr().add(2 * c));
                let lo = V::load_up_to(a, columns, 0.0).max_nan(V::load_up_to(b, columns, 0.0));
                let hi = if columns > lanes {
                    let rest = columns - lanes;
                    V::load_up_to(a.add(lanes), rest, 0.0).max_nan(V::load_up_to(b.add(lanes), rest, 0.0))
                } else {
                    V::zero()
                };
                let (even, odd) = V::even_odd(lo, hi);
                even.max_nan(odd).store_up_to(out.as_mut_ptr().add(c), n);
            }
            c += lanes;
        }
    }
}

/// `dst[o] = max over taps j of tap_at[j][o]`, a vector of outputs at a time (a last
/// partial one through a partial store: small planes, as 4 x 4, are all tail); `K` known,
/// so that the taps' pointers stay in registers. Before, a closure per tap returned a
/// slice, bounds-checked per vector, and the even and odd columns were split as far as
/// 16-lane vectors reach: with whole-vector row passes (no partial store per row, and no
/// memcpy for a partial load), kernels bench, 1 thread, AMD EPYC Zen 3, best of 4
/// alternating: SqueezeNet's pools 330/237/186 -> 160/109/84 us, ResNet's 251 -> 165, a
/// 3x3 at stride 1 155 -> 97.
///
/// # Safety
/// The CPU runs V's set; each `tap_at[j]` holds `dst.len()` rounded up to a vector.
#[inline(always)]
unsafe fn windows<V: F32s, const K: usize>(dst: &mut [f32], tap_at: [*const f32; K]) {
    let (len, lanes) = (dst.len(), V::LANES);
    let mut o = 0;
    while o < len {
        // SAFETY: the caller's.
        unsafe {
            let mut v = V::load(tap_at[0].add(o));
            for at in &tap_at[1..] {
                v = v.max_nan(V::load(at.add(o)));
            }
            v.store_up_to(dst.as_mut_ptr().add(o), len - o);
        }
        o += lanes;
    }
}

/// [`windows`] for a kernel width known only at run time: `taps` taps, tap j at `tap(j)`.
///
/// # Safety
/// As [`windows`].
#[inline(always)]
unsafe fn windows_any<V: F32s>(dst: &mut [f32], taps: usize, tap: impl Fn(usize) -> *const f32) {
    let (len, lanes) = (dst.len(), V::LANES);
    let mut o = 0;
    while o < len {
        // SAFETY: the caller's.
        unsafe {
            let mut v = V::splat(f32::NEG_INFINITY);
            for j in 0..taps {
                v = v.max_nan(V::load(tap(j).add(o)));
            }
            v.store_up_to(dst.as_mut_ptr().add(o), len - o);
        }
        o += lanes;
    }
}
