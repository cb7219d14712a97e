//! GEMM output passes. A Linear layer lowers to three kernels: one copying the bias into
//! the result, the GEMM accumulating onto it, and (for a GELU after it) the activation's
//! own pass over the result. For a float32 GEMM with a packed right operand the support
//! library's kernel adds the bias and applies the activation as it writes each register
//! tile (`aotc_abi::gemm::Activation`), so the three become one kernel and the result is
//! written once instead of three times.

use crate::ir::expr::ExprKind;
use crate::ir::{BufKind, ExternArg, Kernel, Matmul, Program};
use crate::lower::Lowered;
use aotc_abi::gemm::Activation;
use aotc_abi::internal_symbols::GELU;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::HashSet;

/// Fuses into every packed-B float32 matmul the bias copy just before it and the GELU just
/// after it, where the program allows.
pub fn fuse_gemm_epilogues(lowered: &mut Lowered) {
    // Buffers the caller sees keep their values: a GEMM result that is one is not replaced
    // by its activation.
    let mut keep: HashSet<_> = lowered.outputs.iter().map(|(_, b)| *b).collect();
    keep.extend(lowered.buffer_mutations.iter().map(|(b, _)| *b));
    keep.extend(lowered.input_mutations.iter().map(|(b, _)| *b));
    let prog = &mut lowered.program;
    let mut i = 0;
    while i < prog.kernels.len() {
        let Kernel::Matmul(m) = &prog.kernels[i] else {
            i += 1;
            continue;
        };
        if !m.packed_b || m.dtype != DType::F32 {
            i += 1;
            continue;
        }
        if let Some(bias) = i.checked_sub(1).and_then(|p| column_bias(prog, &prog.kernels[p], m)) {
            let nodes = prog.remove_kernel(i - 1);
            i -= 1;
            let Kernel::Matmul(m) = &mut prog.kernels[i] else { unreachable!() };
            m.bias = Some(bias);
            m.accumulate = false;
            merge_nodes(prog, i, nodes);
        }
        let Kernel::Matmul(m) = &prog.kernels[i] else { unreachable!() };
        if let Some(out) = prog.kernels.get(i + 1).and_then(|next| gelu_of(prog, next, m)) {
            if !keep.contains(&m.out) && !read_elsewhere(prog, m.out, [i, i + 1]) {
                let nodes = prog.remove_kernel(i + 1);
                let Kernel::Matmul(m) = &mut prog.kernels[i] else { unreachable!() };
                m.out = out;
                m.activation = Activation::Gelu;
                merge_nodes(prog, i, nodes);
            }
        }
        i += 1;
    }
}

/// The float32 weight `k` copies into every row of `m`'s result, when `k` is exactly that
/// (`out[.., j] = bias[j]` over the whole result, which `m` then accumulates onto).
fn column_bias(prog: &Program, k: &Kernel, m: &Matmul) -> Option<crate::ir::BufId> {
    let Kernel::Pointwise { out, ranges, body } = k else { return None };
    let ExprKind::Load { buf, index } = &body.kind else { return None };
    let (BufKind::Weight(_), DType::F32) = (&prog.buffers[*buf].kind, prog.buffers[*buf].dtype) else { return None };
    let last = ranges.len().checked_sub(1)?;
    let along_columns = index.offset.as_int() == Some(0) && matches!(index.terms.as_slice(), [(v, c)] if *v == last && c.as_int() == Some(1));
    let whole = ranges[last] == m.n && numel(ranges) == numel(&[m.batch.clone(), m.m.clone(), m.n.clone()]);
    (*out == m.out && m.accumulate && body.dtype == DType::F32 && along_columns && whole && m.a.buf != m.out).then_some(*buf)
}

/// The buffer `k` writes when it is the GELU of all of `m`'s result.
fn gelu_of(prog: &Program, k: &Kernel, m: &Matmul) -> Option<crate::ir::BufId> {
    let Kernel::Extern(call) = k else { return None };
    let [ExternArg::Buf(src), ExternArg::Size(n)] = call.args.as_slice() else { return None };
    let out = &prog.buffers[call.out];
    let all = *n == numel(&[m.batch.clone(), m.m.clone(), m.n.clone()]) && numel(&out.sizes) == *n;
    (call.name == GELU && *src == m.out && call.out != m.out && out.dtype == DType::F32 && all).then_some(call.out)
}

/// Element count of `sizes`, compared as integers where they are known.
fn numel(sizes: &[SymExpr]) -> SymExpr {
    let product = SymExpr::product(sizes);
    product.as_int().map_or(product, SymExpr::Int)
}

/// Whether a kernel other than those at `except` reads `buf`.
fn read_elsewhere(prog: &Program, buf: crate::ir::BufId, except: [usize; 2]) -> bool {
    prog.kernels.iter().enumerate().any(|(j, k)| !except.contains(&j) && k.inputs().0.iter().any(|&b| b == buf))
}

/// Adds the graph nodes of a fused kernel to kernel `i`'s (ascending, as the profile
/// names them).
fn merge_nodes(prog: &mut Program, i: usize, nodes: Vec<usize>) {
    if let Some(list) = prog.kernel_nodes.get_mut(i) {
        list.extend(nodes);
        list.sort_unstable();
        list.dedup();
    }
}
