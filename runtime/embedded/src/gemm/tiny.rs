//! Products too small for packing and blocking to pay: an attention head's 8 x 8 x 8, a
//! few rows against a few columns. Below [`fits`]'s bounds the blocked kernel spends
//! more on packing both operands into panels, partial register tiles and their stores
//! than on the multiply-adds; here B's rows are copied once into a zero-padded block on
//! the stack and each row of C is one or two vectors of sums.

use super::simd::{Avx2, Simd};
use super::{Element, Problem};

/// Deepest product taken here (B's copy: MAX_K x 16 elements on the stack).
const MAX_K: usize = 64;
/// Most rows (beyond, the blocked kernel's reuse of B's panels pays).
const MAX_M: usize = 32;

/// Whether `p` is small enough, with rows of B and C contiguous.
pub fn fits<T: Element>(p: &Problem<T>) -> bool
where
    Avx2: Simd<T>,
{
    (1..=MAX_K).contains(&p.k) && p.m <= MAX_M && p.n <= 2 * <Avx2 as Simd<T>>::LANES && p.csb == 1 && p.csc == 1
}

/// `C = alpha * A @ B + beta * C` (`beta == 0` ignores C) for a problem that [`fits`].
///
/// # Safety
/// The CPU has AVX2 and FMA (`Isa::Avx2.available()`), `p` fits, and the Kernel contract.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemm<T: Element>(p: Problem<T>)
where
    Avx2: Simd<T>,
{
    let l = <Avx2 as Simd<T>>::LANES;
    let mut b = [[T::ZERO; 16]; MAX_K];
    // SAFETY (all): the rows, columns and depths below are inside A, B and C as the
    // problem describes them; `b` and `row` hold 2 * LANES <= 16 elements per row.
    unsafe {
        for (q, dst) in b.iter_mut().enumerate().take(p.k) {
            let src = p.b.offset(q as isize * p.rsb);
            for (j, d) in dst.iter_mut().enumerate().take(p.n) {
                *d = *src.add(j);
            }
        }
        let two = p.n > l;
        for i in 0..p.m {
            let a = p.a.offset(i as isize * p.rsa);
            let (mut acc0, mut acc1) = (Avx2::zero(), Avx2::zero());
            for (q, b) in b.iter().enumerate().take(p.k) {
                let x = Avx2::splat(*a.offset(q as isize * p.csa));
                acc0 = Avx2::fmadd(x, Avx2::load(b.as_ptr()), acc0);
                if two {
                    acc1 = Avx2::fmadd(x, Avx2::load(b.as_ptr().add(l)), acc1);
                }
            }
            let mut row = [T::ZERO; 16];
            Avx2::store(row.as_mut_ptr(), acc0);
            Avx2::store(row.as_mut_ptr().add(l), acc1);
            let c = p.c.offset(i as isize * p.rsc);
            for (j, &x) in row.iter().enumerate().take(p.n) {
                let c = c.add(j);
                *c = if p.beta == T::ZERO { p.alpha * x } else { p.alpha * x + p.beta * *c };
            }
        }
    }
}
