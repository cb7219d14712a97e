//! Constant folding of weight copies: a pointwise kernel that only rearranges a weight
//! (the transpose of a Linear weight materialized for a batched product, a permute or an
//! expand of a constant) is computed here, once, and its buffer becomes a weight; the
//! kernel no longer runs on every call. Only plain copies are folded (a body that is one
//! load of a weight, every size and index coefficient known).

use crate::ir::expr::ExprKind;
use crate::ir::{strided_elements, BufKind, Kernel, Program};
use crate::lower::Lowered;

/// Folds every such kernel whose buffer is not an output (outputs never alias weights)
/// and is written by no other kernel.
pub fn fold_weight_copies(lowered: &mut Lowered) {
    let keep = lowered.caller_visible();
    let prog = &mut lowered.program;
    let mut i = 0;
    while i < prog.kernels.len() {
        let out = prog.kernels[i].out();
        // A buffer another kernel writes too (a GEMM accumulating onto the bias copied
        // into it) is not a constant.
        let written_once = prog.kernels.iter().filter(|k| k.out() == out).count() == 1;
        let Some(data) = (written_once && !keep.contains(&out)).then(|| copy_of_weight(prog, &prog.kernels[i])).flatten() else {
            i += 1;
            continue;
        };
        let w = prog.weights.len();
        prog.weights.push(data);
        prog.buffers[out].kind = BufKind::Weight(w);
        prog.remove_kernel(i);
    }
}

/// Most elements a folded copy may have (64 MiB of float32): larger rearrangements stay
/// kernels rather than growing the library.
const MAX_ELEMENTS: usize = 1 << 24;

/// The bytes kernel `k` would write, when it is a plain copy of a weight.
fn copy_of_weight(prog: &Program, k: &Kernel) -> Option<Vec<u8>> {
    let Kernel::Pointwise { out, ranges, body } = k else { return None };
    let ExprKind::Load { buf, index } = &body.kind else { return None };
    let (BufKind::Scratch, BufKind::Weight(w)) = (&prog.buffers[*out].kind, &prog.buffers[*buf].kind) else { return None };
    let dtype = prog.buffers[*out].dtype;
    if body.dtype != dtype || prog.buffers[*buf].dtype != dtype {
        return None;
    }
    let sizes = ranges.iter().map(|s| s.as_int().and_then(|v| usize::try_from(v).ok())).collect::<Option<Vec<usize>>>()?;
    sizes.iter().try_fold(1usize, |a, &s| a.checked_mul(s)).filter(|&c| c <= MAX_ELEMENTS)?;
    let mut coeffs = vec![0i64; sizes.len()];
    for (v, c) in &index.terms {
        *coeffs.get_mut(*v)? = c.as_int()?;
    }
    strided_elements(&prog.weights[*w], dtype.size(), index.offset.as_int()?, &sizes, &coeffs)
}
