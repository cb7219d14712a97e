//! The output pass of a register tile: `C = activation(alpha * tile + beta * C + bias +
//! addend)` as the tile is written, for rows of contiguous elements of C (vectors) or a
//! strided C (element by element).

use super::super::simd::Simd;
use super::super::{Addend, Bias, Element};
use aotc_abi::gemm::Activation;

/// Where a register tile goes: C at its top-left element, how many of its columns exist,
/// and `C = activation(alpha * tile + beta * C + bias)` with the [`Pass`] of its depth
/// block.
#[derive(Clone, Copy)]
pub(in crate::gemm) struct Out<T> {
    pub(super) c: *mut T,
    pub(super) rsc: isize,
    pub(super) csc: isize,
    pub(super) cols: usize,
    pub(super) alpha: T,
    pub(super) beta: T,
    pub(super) pass: Pass,
}

/// The output pass of one depth block's tile: the bias and the addend (float32, only ever
/// given to the float32 kernel) from the tile's first row and column, and the activation.
#[derive(Clone, Copy)]
pub(super) struct Pass {
    pub(super) bias: Bias,
    pub(super) addend: Option<Addend>,
    pub(super) activation: Activation,
}

impl Pass {
    /// Where the bias of element (r, j) of the tile is, as a `T`.
    #[inline(always)]
    fn bias<T>(&self, r: usize, j: usize) -> Option<*const T> {
        match self.bias {
            Bias::None => None,
            Bias::Rows(b) => Some(b.wrapping_add(r).cast()),
            Bias::Cols(b) => Some(b.wrapping_add(j).cast()),
        }
    }
}

/// The register tile `acc` (R rows of W vectors) written to `out`.
///
/// # Safety
/// The tile's R x `out.cols` elements are inside C (and the bias's and addend's); the CPU
/// runs `I`'s set (the caller is compiled for it).
#[inline(always)]
pub(super) unsafe fn write<T: Element, I: Simd<T>, const R: usize, const W: usize>(acc: [[I::V; W]; R], out: Out<T>) {
    // SAFETY: the caller's.
    unsafe {
        match (out.csc, out.cols == W * I::LANES) {
            (1, true) => write_rows::<T, I, R, W, true>(acc, out),
            (1, false) => write_rows::<T, I, R, W, false>(acc, out),
            _ => write_strided::<T, I, R, W>(acc, out),
        }
    }
}

/// [`write`] to a strided C (C transposed): each row summed element by element in a
/// whole tile row of memory, then (with an activation) activated as vectors, then written
/// out (at most two vectors of 16 floats).
///
/// # Safety
/// As [`write`].
#[inline(always)]
unsafe fn write_strided<T: Element, I: Simd<T>, const R: usize, const W: usize>(acc: [[I::V; W]; R], out: Out<T>) {
    let l = I::LANES;
    let activation = out.pass.activation;
    // SAFETY: the caller's.
    unsafe {
        let mut tmp = [T::ZERO; 32];
        let plain = matches!(out.pass.bias, Bias::None) && out.pass.addend.is_none() && activation == Activation::None;
        for (r, acc) in acc.iter().enumerate() {
            for (h, &v) in acc.iter().enumerate() {
                I::store(tmp.as_mut_ptr().add(h * l), v);
            }
            for (j, x) in tmp[..out.cols].iter_mut().enumerate() {
                let c = out.c.offset(r as isize * out.rsc + j as isize * out.csc);
                let v = if out.beta == T::ZERO { out.alpha * *x } else { out.alpha * *x + out.beta * *c };
                if plain {
                    *c = v;
                    continue;
                }
                let v = match out.pass.bias::<T>(r, j) {
                    Some(b) => v + *b,
                    None => v,
                };
                *x = match out.pass.addend {
                    Some(d) => v + *d.at::<T>(r, j),
                    None => v,
                };
            }
            if plain {
                continue;
            }
            let mut vs = [I::zero(); W];
            for (h, v) in vs.iter_mut().enumerate() {
                *v = I::load(tmp.as_ptr().add(h * l));
            }
            I::activate_each(&mut vs, activation);
            for (h, &v) in vs.iter().enumerate() {
                I::store(tmp.as_mut_ptr().add(h * l), v);
            }
            for (j, &v) in tmp[..out.cols].iter().enumerate() {
                *out.c.offset(r as isize * out.rsc + j as isize * out.csc) = v;
            }
        }
    }
}

/// The register tile `acc` written to rows of contiguous elements of C (`out.csc` = 1):
/// `activation(alpha * acc + beta * C + bias + addend)`. `WHOLE`: every vector of the tile
/// is inside C (`out.cols` = W * LANES), else the last columns go through masked loads and
/// stores. The activation runs on the whole tile at once, between the sums and the stores:
/// a vector at a time, each activation's chain (SiLU's exp and divide) was waited on
/// before the next began. Row pointers step by `rsc` (no products to check): with few
/// depths (a 1x1 convolution of 16 channels) this pass costs as much as the multiply-adds.
///
/// # Safety
/// The tile's R x `out.cols` elements are inside C (and the bias's and addend's).
#[inline(always)]
unsafe fn write_rows<T: Element, I: Simd<T>, const R: usize, const W: usize, const WHOLE: bool>(
    mut acc: [[I::V; W]; R],
    out: Out<T>,
) {
    let l = I::LANES;
    let lanes = |h: usize| if WHOLE { l } else { out.cols.saturating_sub(h * l).min(l) };
    // SAFETY: the caller's; a vector with no lanes inside C (`lanes(h)` = 0) reads nothing.
    // Each term is its own pass over the tile, decided once (loops of constant length
    // whose accumulators stay in registers).
    unsafe {
        let load = |p: *const T, n: usize| if WHOLE || n == l { I::load(p) } else { I::load_first(p, n) };
        if out.alpha != T::ONE {
            let alpha = I::splat(out.alpha);
            for v in acc.as_flattened_mut() {
                *v = I::vmul(*v, alpha);
            }
        }
        if out.beta != T::ZERO {
            let (beta, mut c) = (I::splat(out.beta), out.c.cast_const());
            for acc in acc.iter_mut() {
                for (h, v) in acc.iter_mut().enumerate() {
                    let n = lanes(h);
                    if n > 0 {
                        *v = I::fmadd(load(c.add(h * l), n), beta, *v);
                    }
                }
                c = c.wrapping_offset(out.rsc);
            }
        }
        match out.pass.bias {
            Bias::None => {}
            Bias::Rows(b) => {
                for (r, acc) in acc.iter_mut().enumerate() {
                    let b = I::splat(*b.add(r).cast::<T>());
                    for v in acc.iter_mut() {
                        *v = I::vadd(*v, b);
                    }
                }
            }
            Bias::Cols(b) => {
                for h in 0..W {
                    let n = lanes(h);
                    if n > 0 {
                        let b = load(b.add(h * l).cast::<T>(), n);
                        for acc in acc.iter_mut() {
                            acc[h] = I::vadd(acc[h], b);
                        }
                    }
                }
            }
        }
        if let Some(d) = out.pass.addend {
            let mut at = d.at::<T>(0, 0);
            for acc in acc.iter_mut() {
                for (h, v) in acc.iter_mut().enumerate() {
                    let n = lanes(h);
                    if n > 0 {
                        *v = I::vadd(*v, load(at.add(h * l), n));
                    }
                }
                at = at.wrapping_offset(d.rs);
            }
        }
        I::activate_each(acc.as_flattened_mut(), out.pass.activation);
        let mut c = out.c;
        #[allow(clippy::needless_range_loop)]
        for r in 0..R {
            for h in 0..W {
                match lanes(h) {
                    0 => {}
                    n if WHOLE || n == l => I::store(c.add(h * l), acc[r][h]),
                    n => I::store_first(c.add(h * l), acc[r][h], n),
                }
            }
            c = c.wrapping_offset(out.rsc);
        }
    }
}
