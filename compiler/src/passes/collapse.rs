//! Adjacent loops of a pointwise or reduction kernel merged into one where every index
//! the body computes walks them as one (row-major order, and so what each iteration
//! reads and writes, unchanged), and unit loops dropped. The innermost loop is the one
//! code generation vectorizes: a mean over a 56 x 56 plane becomes one run of 3136
//! elements instead of 56 runs of 56, and a 7 x 7 plane's 49 elements one run (12
//! vectors and 1 element) instead of 7 runs of 1 vector and 3 elements.
//!
//! Output loops merge with output loops and reduced loops with reduced loops, never
//! across: a reduction's result is indexed by its output loops alone.
//!
//! Runs before `hoist`, whose outer loop is then the first one merged: a batch of images'
//! channels (`x[n, c, h, w] * gate[n, c]`) one loop, which reads the gate alone.

use crate::ir::expr::{substitute, visit, Affine, ExprKind, E};
use crate::ir::Kernel;
use crate::lower::tensor::same_size as same;
use crate::lower::Lowered;
use aotc_abi::sym::SymExpr;

pub fn collapse_loops(lowered: &mut Lowered) {
    for k in lowered.program.kernels.iter_mut() {
        match k {
            Kernel::Pointwise { ranges, body, .. } => collapse(ranges, 0, body),
            Kernel::Reduction { ranges, reduce, body, .. } => {
                // The reduced loops first: merging output loops renumbers the reduced
                // loops' variables after them, not the other way round.
                collapse(reduce, ranges.len(), body);
                collapse(ranges, 0, body);
            }
            Kernel::Matmul(_) | Kernel::Extern(_) => {}
        }
    }
}

/// Merges adjacent loops among `sizes`, whose variables are `first..first + sizes.len()`
/// of `body`, from the innermost pair outwards.
fn collapse(sizes: &mut Vec<SymExpr>, first: usize, body: &mut E) {
    let mut vars = body_vars(body).max(first + sizes.len());
    for a in (0..sizes.len().saturating_sub(1)).rev() {
        let (outer, inner) = (first + a, first + a + 1);
        // Which variable carries the merged loop; the other becomes 0.
        let keep_outer = if sizes[a + 1] == SymExpr::Int(1) {
            true
        } else if sizes[a] == SymExpr::Int(1) || walks_as_one(body, outer, inner, &sizes[a + 1]) {
            false
        } else {
            continue;
        };
        let map: Vec<Affine> = (0..vars)
            .map(|v| match v {
                _ if v < outer => Affine::var(v),
                _ if v == outer => {
                    if keep_outer {
                        Affine::var(outer)
                    } else {
                        Affine::constant(SymExpr::Int(0))
                    }
                }
                _ if v == inner => {
                    if keep_outer {
                        Affine::constant(SymExpr::Int(0))
                    } else {
                        Affine::var(outer)
                    }
                }
                _ => Affine::var(v - 1),
            })
            .collect();
        *body = substitute(body, &map);
        sizes[a] = merged(&sizes[a], &sizes[a + 1]);
        sizes.remove(a + 1);
        vars -= 1;
    }
}

/// One more than the highest loop variable `body` mentions (0 when none).
fn body_vars(body: &E) -> usize {
    let mut n = 0;
    visit(body, &mut |e| {
        if let ExprKind::Load { index: a, .. } | ExprKind::Index(a) = &e.kind {
            n = a.terms.iter().fold(n, |n, (v, _)| n.max(v + 1));
        }
    });
    n
}

/// Whether every index in `body` has `outer`'s coefficient equal to `inner`'s times
/// `inner_size`: then `outer * c_outer + inner * c_inner` is `(outer * inner_size +
/// inner) * c_inner`, a function of the merged loop's variable.
fn walks_as_one(body: &E, outer: usize, inner: usize, inner_size: &SymExpr) -> bool {
    let mut all = true;
    visit(body, &mut |e| {
        if let ExprKind::Load { index: a, .. } | ExprKind::Index(a) = &e.kind {
            all &= same(&a.coef(outer), &SymExpr::mul([a.coef(inner), inner_size.clone()]));
        }
    });
    all
}

/// `a * b`, as an integer where both are known.
fn merged(a: &SymExpr, b: &SymExpr) -> SymExpr {
    let product = SymExpr::mul([a.clone(), b.clone()]);
    product.as_int().map_or(product, SymExpr::Int)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::expr::{binary, load};
    use crate::ir::{BufId, Prim};
    use aotc_abi::DType;
    use cranelift_codegen::entity::EntityRef;

    fn index(offset: i64, terms: &[(usize, i64)]) -> Affine {
        Affine { offset: SymExpr::Int(offset), terms: terms.iter().map(|&(v, c)| (v, SymExpr::Int(c))).collect() }
    }

    fn loads(body: &E) -> Vec<Affine> {
        let mut out = vec![];
        visit(body, &mut |e| {
            if let ExprKind::Load { index, .. } = &e.kind {
                out.push(index.clone());
            }
        });
        out
    }

    #[test]
    fn a_plane_read_whole_becomes_one_loop_and_a_per_channel_read_keeps_its_loop() {
        // out[c, h, w] = x[c, h, w] * s[c] over [8, 5, 7]: h and w merge, c stays.
        let x = load(BufId::new(0), DType::F32, index(0, &[(0, 35), (1, 7), (2, 1)]));
        let s = load(BufId::new(1), DType::F32, index(0, &[(0, 1)]));
        let mut body = binary(Prim::Mul, x, s);
        let mut sizes = vec![SymExpr::Int(8), SymExpr::Int(5), SymExpr::Int(7)];
        collapse(&mut sizes, 0, &mut body);
        assert_eq!(sizes, vec![SymExpr::Int(8), SymExpr::Int(35)]);
        assert_eq!(loads(&body), vec![index(0, &[(0, 35), (1, 1)]), index(0, &[(0, 1)])]);
    }

    #[test]
    fn a_transposed_read_keeps_its_loops_and_unit_loops_go() {
        // x[w, h] read at out[h, 1, w]: no merge of h and w; the unit loop goes.
        let x = load(BufId::new(0), DType::F32, index(3, &[(0, 1), (2, 5)]));
        let mut body = binary(Prim::Add, x.clone(), x);
        let mut sizes = vec![SymExpr::Int(5), SymExpr::Int(1), SymExpr::Int(7)];
        collapse(&mut sizes, 0, &mut body);
        assert_eq!(sizes, vec![SymExpr::Int(5), SymExpr::Int(7)]);
        assert_eq!(loads(&body), vec![index(3, &[(0, 1), (1, 5)])]);
    }

    #[test]
    fn reduced_loops_merge_and_later_variables_move_down() {
        // A reduction over [2] of sums over [4, 6] (variables 1 and 2) of x[i0, i1, i2].
        let mut body = load(BufId::new(0), DType::F32, index(0, &[(0, 24), (1, 6), (2, 1)]));
        let mut reduce = vec![SymExpr::Int(4), SymExpr::Int(6)];
        collapse(&mut reduce, 1, &mut body);
        assert_eq!(reduce, vec![SymExpr::Int(24)]);
        assert_eq!(loads(&body), vec![index(0, &[(0, 24), (1, 1)])]);
    }
}
