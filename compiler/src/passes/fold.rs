//! Constant folding of weight copies: a pointwise kernel that only rearranges a weight
//! (the transpose of a Linear weight materialized for a batched product, a permute or an
//! expand of a constant) is computed here, once, and its buffer becomes a weight; the
//! kernel no longer runs on every call. Only plain copies are folded (a body that is one
//! load of a weight, every size and index coefficient known), and copies that widen a
//! float16 or bfloat16 weight to float32 (exact: a mixed-precision model's weights, which
//! the float32 convolutions and products then find constant and pack at compile time).

use crate::ir::expr::ExprKind;
use crate::ir::{BufKind, Kernel, Program};
use crate::lower::Lowered;
use aotc_abi::DType;

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
    let (load, widen) = match &body.kind {
        ExprKind::Cast(x) if body.dtype == DType::F32 && matches!(x.dtype, DType::F16 | DType::BF16) => (x, true),
        _ => (body, false),
    };
    let ExprKind::Load { buf, index } = &load.kind else { return None };
    let (BufKind::Scratch, BufKind::Weight(w)) = (&prog.buffers[*out].kind, &prog.buffers[*buf].kind) else {
        return None;
    };
    let dtype = prog.buffers[*buf].dtype;
    if body.dtype != prog.buffers[*out].dtype || load.dtype != dtype {
        return None;
    }
    let sizes =
        ranges.iter().map(|s| s.as_int().and_then(|v| usize::try_from(v).ok())).collect::<Option<Vec<usize>>>()?;
    sizes.iter().try_fold(1usize, |a, &s| a.checked_mul(s)).filter(|&c| c <= MAX_ELEMENTS)?;
    let mut coeffs = vec![0i64; sizes.len()];
    for (v, c) in &index.terms {
        *coeffs.get_mut(*v)? = c.as_int()?;
    }
    let bytes = prog.weights[*w].strided(dtype.size(), index.offset.as_int()?, &sizes, &coeffs)?;
    Some(if widen { widened(dtype, &bytes) } else { bytes })
}

/// The float32 bytes of the float16 or bfloat16 values in `bytes` (little-endian).
fn widened(dtype: DType, bytes: &[u8]) -> Vec<u8> {
    let halves = bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let value = |h: u16| match dtype {
        DType::BF16 => half::bf16::from_bits(h).to_f32(),
        _ => half::f16::from_bits(h).to_f32(),
    };
    halves.flat_map(|h| value(h).to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::expr::{self, Affine};
    use aotc_abi::sym::SymExpr;

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

    /// The float32 values of `buf`, which must have become a weight.
    fn weight_floats(prog: &Program, buf: crate::ir::BufId) -> Vec<f32> {
        let BufKind::Weight(k) = prog.buffers[buf].kind else { panic!("{buf:?} is {:?}", prog.buffers[buf].kind) };
        prog.weights[k].bytes().unwrap().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    }

    #[test]
    fn a_transposed_weight_becomes_a_weight_unless_it_is_an_output() {
        let (mut lowered, t) = transpose_program(false);
        fold_weight_copies(&mut lowered);
        let prog = &lowered.program;
        assert_eq!(prog.kernels.len(), 1, "the copy kernel is gone");
        assert_eq!(weight_floats(prog, t), [1., 4., 2., 5., 3., 6.]);

        let (mut lowered, t) = transpose_program(true);
        fold_weight_copies(&mut lowered);
        assert_eq!(lowered.program.kernels.len(), 2, "an output keeps its kernel");
        assert!(matches!(lowered.program.buffers[t].kind, BufKind::Scratch));
    }

    #[test]
    fn a_widened_float16_or_bfloat16_weight_becomes_a_float32_weight() {
        for (dtype, bits) in [(DType::F16, [0x3c00u16, 0xc500, 0x0001]), (DType::BF16, [0x3f80, 0xc0a0, 0x0001])] {
            let mut prog = Program::default();
            prog.weights.push(bits.iter().flat_map(|b| b.to_le_bytes()).collect::<Vec<u8>>().into());
            let n = SymExpr::Int(3);
            let w = prog.add_buffer("w", dtype, vec![n.clone()], BufKind::Weight(0));
            let wide = prog.add_buffer("wide", DType::F32, vec![n.clone()], BufKind::Scratch);
            let user = prog.add_buffer("user", DType::F32, vec![n.clone()], BufKind::Scratch);
            let body = expr::cast(expr::load(w, dtype, Affine::var(0)), DType::F32);
            prog.kernels.push(Kernel::Pointwise { out: wide, ranges: vec![n.clone()], body });
            let body = expr::load(wide, DType::F32, Affine::var(0));
            prog.kernels.push(Kernel::Pointwise { out: user, ranges: vec![n], body });
            let mut lowered = Lowered { program: prog, outputs: vec![("user".into(), user)], ..Default::default() };
            fold_weight_copies(&mut lowered);
            let prog = &lowered.program;
            assert_eq!(prog.kernels.len(), 1, "{dtype}: the widening kernel is gone");
            let smallest = if dtype == DType::F16 { 2f32.powi(-24) } else { f32::from_bits(0x0001_0000) };
            assert_eq!(weight_floats(prog, wide), [1.0, -5.0, smallest], "{dtype}");
        }
    }
}
