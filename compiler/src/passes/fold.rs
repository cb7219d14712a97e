//! Constant folding of weight copies: a pointwise kernel that only rearranges a weight
//! (the transpose of a Linear weight materialized for a batched product, a permute or an
//! expand of a constant) is computed here, once, and its buffer becomes a weight; the
//! kernel no longer runs on every call. Only plain copies are folded (a body that is one
//! load of a weight, every size and index coefficient known).

use crate::ir::expr::ExprKind;
use crate::ir::{BufKind, Kernel, Program};
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
        let Some(data) =
            (written_once && !keep.contains(&out)).then(|| copy_of_weight(prog, &prog.kernels[i])).flatten()
        else {
            i += 1;
            continue;
        };
        let w = prog.weights.len();
        prog.weights.push(data.into());
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
    let (BufKind::Scratch, BufKind::Weight(w)) = (&prog.buffers[*out].kind, &prog.buffers[*buf].kind) else {
        return None;
    };
    let dtype = prog.buffers[*out].dtype;
    if body.dtype != dtype || prog.buffers[*buf].dtype != dtype {
        return None;
    }
    let sizes =
        ranges.iter().map(|s| s.as_int().and_then(|v| usize::try_from(v).ok())).collect::<Option<Vec<usize>>>()?;
    sizes.iter().try_fold(1usize, |a, &s| a.checked_mul(s)).filter(|&c| c <= MAX_ELEMENTS)?;
    let mut coeffs = vec![0i64; sizes.len()];
    for (v, c) in &index.terms {
        *coeffs.get_mut(*v)? = c.as_int()?;
    }
    prog.weights[*w].strided(dtype.size(), index.offset.as_int()?, &sizes, &coeffs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::expr::{self, Affine};
    use aotc_abi::sym::SymExpr;
    use aotc_abi::DType;

    /// A 2 x 3 float32 weight and the kernel that writes its transpose into a scratch
    /// buffer, which a second kernel reads; `output` makes the transpose a graph output.
    fn transpose_program(output: bool) -> (Lowered, crate::ir::BufId) {
        let mut prog = Program::default();
        let bytes: Vec<u8> = [1f32, 2., 3., 4., 5., 6.].iter().flat_map(|v| v.to_le_bytes()).collect();
        prog.weights.push(bytes.into());
        let int = |v: i64| SymExpr::Int(v);
        let w = prog.add_buffer("w", DType::F32, vec![int(2), int(3)], BufKind::Weight(0));
        let t = prog.add_buffer("w_t", DType::F32, vec![int(3), int(2)], BufKind::Scratch);
        let user = prog.add_buffer("user", DType::F32, vec![int(3), int(2)], BufKind::Scratch);
        // t[i, j] = w[j, i]: element 3 j + i.
        let index = Affine::var(1).scale(&int(3)).plus(&Affine::var(0));
        prog.kernels.push(Kernel::Pointwise {
            out: t,
            ranges: vec![int(3), int(2)],
            body: expr::load(w, DType::F32, index),
        });
        let read = Affine::var(0).scale(&int(2)).plus(&Affine::var(1));
        prog.kernels.push(Kernel::Pointwise {
            out: user,
            ranges: vec![int(3), int(2)],
            body: expr::load(t, DType::F32, read),
        });
        let outputs = if output { vec![("w_t".to_string(), t)] } else { vec![("user".to_string(), user)] };
        (Lowered { program: prog, outputs, ..Default::default() }, t)
    }

    #[test]
    fn a_transposed_weight_becomes_a_weight_unless_it_is_an_output() {
        let (mut lowered, t) = transpose_program(false);
        fold_weight_copies(&mut lowered);
        let prog = &lowered.program;
        assert_eq!(prog.kernels.len(), 1, "the copy kernel is gone");
        let BufKind::Weight(k) = prog.buffers[t].kind else { panic!("w_t is {:?}", prog.buffers[t].kind) };
        let values: Vec<f32> = prog.weights[k]
            .bytes()
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(values, [1., 4., 2., 5., 3., 6.]);

        let (mut lowered, t) = transpose_program(true);
        fold_weight_copies(&mut lowered);
        assert_eq!(lowered.program.kernels.len(), 2, "an output keeps its kernel");
        assert!(matches!(lowered.program.buffers[t].kind, BufKind::Scratch));
    }
}
