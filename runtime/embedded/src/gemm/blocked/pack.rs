//! Packing for [`super`]: blocks of A into panels of MR rows, blocks of B into panels of
//! NR columns, from any strides.

use super::super::simd::Simd;
use super::super::Element;
use aotc_abi::gemm::MR;
use std::arch::x86_64::*;

// The loops below step pointers instead of multiplying indices by strides: this crate keeps
// overflow checks in release builds, and a checked multiply per element costs as much as
// the copy. The pointers stay inside the caller's matrices whenever they are read.

/// Copies `rows` x `kc` of A into panels of MR rows: element (r, p) of a panel at
/// `p * MR + r`, rows past the last padded with zeros.
#[inline(always)]
pub(super) unsafe fn pack_a<T: Element>(dst: *mut T, rows: usize, kc: usize, a: *const T, rsa: isize, csa: isize) {
    for i0 in (0..rows).step_by(MR) {
        let h = MR.min(rows - i0);
        let mut src = [a; MR];
        for (r, src) in src.iter_mut().enumerate().take(h) {
            *src = a.wrapping_offset((i0 + r) as isize * rsa);
        }
        // Float32 rows of contiguous depths (activations times packed weights, small
        // products where packing A costs as much as the multiply-adds): 4 depths at a time.
        if h == MR && csa == 1 && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
            // SAFETY: T is f32; as below, with each row's kc depths contiguous.
            unsafe { pack_panel_f32(dst.add(i0 * kc).cast(), kc, src.map(|s| s.cast())) };
            continue;
        }
        // Columns of A contiguous (A read transposed: a convolution's windows with the
        // output positions as rows): each depth of the panel is one run of MR elements.
        // (Element by element, DenseNet's 49 x 1152 windows took a fifth of the GEMM.)
        if h == MR && rsa == 1 {
            // SAFETY: dst holds MR * kc elements per panel; the run of depth p is rows
            // i0..i0 + MR of A at depth p.
            unsafe {
                let (mut from, mut d) = (src[0], dst.add(i0 * kc));
                for _ in 0..kc {
                    std::ptr::copy_nonoverlapping(from, d, MR);
                    from = from.wrapping_offset(csa);
                    d = d.add(MR);
                }
            }
            continue;
        }
        // SAFETY: dst holds MR * kc elements per panel; src[r] walks row i0 + r of A.
        unsafe {
            let mut d = dst.add(i0 * kc);
            for _ in 0..kc {
                for (r, src) in src.iter_mut().enumerate() {
                    // A full panel (the common case) gets the copy without the test.
                    *d.add(r) = if h == MR || r < h { **src } else { T::ZERO };
                    *src = src.wrapping_offset(csa);
                }
                d = d.add(MR);
            }
        }
    }
}

/// One full panel of [`pack_a`] from MR float32 rows of `kc` contiguous depths: 4 x 4
/// transposes (rows 0-3) and pair interleaves (rows 4-5) of 4 depths at a time, then the
/// depths left one by one.
///
/// # Safety
/// `dst` holds MR * kc floats, 8-byte aligned; each row holds `kc` floats.
#[inline(always)]
unsafe fn pack_panel_f32(dst: *mut f32, kc: usize, rows: [*const f32; MR]) {
    const _: () = assert!(MR == 6);
    let mut p = 0;
    // SAFETY (all): loads of depths p..p + 4 < kc of each row, stores inside depths p..p + 4
    // of the panel (6 floats each; the pairs 8-byte aligned: dst is, and 6 p + 4 is even).
    unsafe {
        while p + 4 <= kc {
            let r = rows.map(|row| _mm_loadu_ps(row.add(p)));
            let (t0, t1) = (_mm_unpacklo_ps(r[0], r[1]), _mm_unpacklo_ps(r[2], r[3]));
            let (t2, t3) = (_mm_unpackhi_ps(r[0], r[1]), _mm_unpackhi_ps(r[2], r[3]));
            let first = [_mm_movelh_ps(t0, t1), _mm_movehl_ps(t1, t0), _mm_movelh_ps(t2, t3), _mm_movehl_ps(t3, t2)];
            let (u0, u1) = (_mm_castps_pd(_mm_unpacklo_ps(r[4], r[5])), _mm_castps_pd(_mm_unpackhi_ps(r[4], r[5])));
            let d = dst.add(p * MR);
            for (j, v) in first.into_iter().enumerate() {
                _mm_storeu_ps(d.add(j * MR), v);
            }
            let pair = |j: usize| d.add(j * MR + 4).cast::<f64>();
            _mm_store_sd(pair(0), u0);
            _mm_storeh_pd(pair(1), u0);
            _mm_store_sd(pair(2), u1);
            _mm_storeh_pd(pair(3), u1);
            p += 4;
        }
        for p in p..kc {
            for (r, row) in rows.iter().enumerate() {
                *dst.add(p * MR + r) = *row.add(p);
            }
        }
    }
}

/// Panels [`pack_b`] writes at once.
const PACK_PANELS: usize = 4;

/// Copies `kc` x `cols` of B into panels of NR columns: element (p, j) of a panel at
/// `p * NR + j`, columns past the last padded with zeros.
#[inline(always)]
pub(super) unsafe fn pack_b<T: Element, I: Simd<T>>(
    dst: *mut T,
    kc: usize,
    cols: usize,
    b: *const T,
    rsb: isize,
    csb: isize,
) {
    let nr = I::VECTORS * I::LANES;
    // SAFETY: dst holds NR * kc elements per panel; the sources walk B's elements (p, j) for
    // p < kc, j < cols.
    unsafe {
        if csb == 1 {
            // Contiguous rows: a few panels at a time (a few write streams, not one per
            // panel: the panels lie kc * NR apart, often a multiple of 4 KiB, where their
            // lines compete for the same L1 sets), depth by depth.
            for g0 in (0..cols).step_by(PACK_PANELS * nr) {
                let mut src = b;
                for p in 0..kc {
                    for j0 in (g0..cols.min(g0 + PACK_PANELS * nr)).step_by(nr) {
                        let (w, d) = (nr.min(cols - j0), dst.add(j0 * kc + p * nr));
                        if w == nr {
                            // A constant length: a few vector moves, not a call to memcpy.
                            std::ptr::copy_nonoverlapping(src.add(j0), d, nr);
                        } else {
                            for j in 0..nr {
                                *d.add(j) = if j < w { *src.add(j0 + j) } else { T::ZERO };
                            }
                        }
                    }
                    src = src.wrapping_offset(rsb);
                }
            }
        } else {
            // Strided rows: each column gathered down its run.
            for j0 in (0..cols).step_by(nr) {
                let w = nr.min(cols - j0);
                for j in 0..nr {
                    let (mut src, mut d) = (b.wrapping_offset((j0 + j) as isize * csb), dst.add(j0 * kc + j));
                    for _ in 0..kc {
                        *d = if j < w { *src } else { T::ZERO };
                        src = src.wrapping_offset(rsb);
                        d = d.add(nr);
                    }
                }
            }
        }
    }
}
