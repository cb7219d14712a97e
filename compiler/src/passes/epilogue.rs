//! Output passes fused after lowering, where the pattern is only visible in the kernels:
//!
//! - A Linear layer lowers to three kernels: one copying the bias into the result, the
//!   GEMM accumulating onto it, and (for a GELU after it) the activation's own pass over
//!   the result. For a float32 GEMM with a packed right operand the support library's
//!   kernel adds the bias and applies the activation as it writes each register tile
//!   (`aotc_abi::gemm::Activation`), so the three become one kernel and the result is
//!   written once instead of three times.
//! - A hardswish after a support-library convolution (five graph nodes: add, two clamps,
//!   mul, div, one pointwise kernel once lowered) becomes the convolution's activation.
//!   (A batch norm, residual add or ReLU after a convolution folds into it as it is
//!   lowered: `lower/aten/conv/epilogue.rs`.)

use crate::ir::expr::{ExprKind, E};
use crate::ir::{BufId, BufKind, ExternArg, Kernel, Matmul, Prim, Program};
use crate::lower::tensor::contiguous_strides;
use aotc_abi::conv::{self, ACTIVATION, ARG_GEOMETRY};
use crate::lower::Lowered;
use aotc_abi::gemm::Activation;
use aotc_abi::internal_symbols::GELU;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::HashSet;

/// Fuses into every packed-B float32 matmul the bias copy just before it and the GELU just
/// after it, and into every support-library convolution the hardswish just after it,
/// where the program allows.
pub fn fuse_epilogues(lowered: &mut Lowered) {
    // Buffers the caller sees keep their values: a result that is one is not replaced by
    // its activation.
    let mut keep: HashSet<_> = lowered.outputs.iter().map(|(_, b)| *b).collect();
    keep.extend(lowered.buffer_mutations.iter().map(|(b, _)| *b));
    keep.extend(lowered.input_mutations.iter().map(|(b, _)| *b));
    fuse_gemm_epilogues(&mut lowered.program, &keep);
    fuse_conv_hardswish(&mut lowered.program, &keep);
}

fn fuse_gemm_epilogues(prog: &mut Program, keep: &HashSet<BufId>) {
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

/// Moves the hardswish kernel right after each convolution into the convolution's output
/// pass: the convolution writes the hardswish's buffer, and its own result, read by
/// nothing else, is never stored.
fn fuse_conv_hardswish(prog: &mut Program, keep: &HashSet<BufId>) {
    let mut i = 0;
    while i + 1 < prog.kernels.len() {
        let (Kernel::Extern(call), Kernel::Pointwise { out, ranges, body }) = (&prog.kernels[i], &prog.kernels[i + 1]) else {
            i += 1;
            continue;
        };
        let Some(ExternArg::Sizes(geometry)) = call.args.get(ARG_GEOMETRY) else {
            i += 1;
            continue;
        };
        let no_activation = geometry.get(ACTIVATION).and_then(|a| a.as_int()) == Some(Activation::None.code());
        let result = &prog.buffers[call.out];
        let fusable = call.name == conv::SYMBOL
            && no_activation
            && hardswish_of(body) == Some(call.out)
            && contiguous_loads_only(body, ranges)
            && *ranges == result.sizes
            && prog.buffers[*out].dtype == DType::F32
            && !call.args.iter().any(|a| matches!(a, ExternArg::Buf(b) | ExternArg::Workspace(b) if b == out))
            && !keep.contains(&call.out)
            && !read_elsewhere(prog, call.out, [i, i + 1]);
        if fusable {
            let out = *out;
            let nodes = prog.remove_kernel(i + 1);
            let Kernel::Extern(call) = &mut prog.kernels[i] else { unreachable!() };
            call.out = out;
            if let ExternArg::Sizes(geometry) = &mut call.args[ARG_GEOMETRY] {
                geometry[ACTIVATION] = SymExpr::Int(Activation::Hardswish.code());
            }
            merge_nodes(prog, i, nodes);
        }
        i += 1;
    }
}

/// `x` when `body` is the hardswish of buffer `x`'s element, as the graph decomposes it:
/// `x * min(max(x + 3, 0), 6) / 6` (the product's factors either way round).
fn hardswish_of(body: &E) -> Option<BufId> {
    let constant = |e: &E, v: f64| matches!(&e.kind, ExprKind::Const(s) if s.as_f64() == v);
    let binary = |e: &E, op: Prim| match &e.kind {
        ExprKind::Binary(p, a, b) if *p == op => Some((a.clone(), b.clone())),
        _ => None,
    };
    let (product, six) = binary(body, Prim::Div)?;
    let (a, b) = binary(&product, Prim::Mul)?;
    let gate_of = |gate: &E| -> Option<E> {
        let (clamped, six) = binary(gate, Prim::Min)?;
        let (shifted, zero) = binary(&clamped, Prim::Max)?;
        let (x, three) = binary(&shifted, Prim::Add)?;
        (constant(&six, 6.0) && constant(&zero, 0.0) && constant(&three, 3.0)).then_some(x)
    };
    let (x, gated) = match (gate_of(&b), gate_of(&a)) {
        (Some(g), _) => (a, g),
        (None, Some(g)) => (b, g),
        (None, None) => return None,
    };
    let ExprKind::Load { buf, .. } = &x.kind else { return None };
    (constant(&six, 6.0) && x == gated && body.dtype == DType::F32).then_some(*buf)
}

/// Whether every load in `body` reads its buffer's element at the loop position, the
/// buffer being contiguous over `ranges` (so a kernel writing that position instead of
/// the pointwise kernel computes the same element).
fn contiguous_loads_only(body: &E, ranges: &[SymExpr]) -> bool {
    let strides = contiguous_strides(ranges);
    let mut all = true;
    crate::ir::expr::visit(body, &mut |e| match &e.kind {
        ExprKind::Load { index, .. } => {
            all &= index.offset.as_int() == Some(0)
                && index.terms.iter().all(|(v, _)| *v < ranges.len())
                && strides.iter().enumerate().all(|(v, s)| index.coef(v) == *s || ranges[v].as_int() == Some(1));
        }
        ExprKind::Const(_) | ExprKind::Binary(..) => {}
        _ => all = false,
    });
    all
}

/// The float32 weight `k` copies into every row of `m`'s result, when `k` is exactly that
/// (`out[.., j] = bias[j]` over the whole result, which `m` then accumulates onto).
fn column_bias(prog: &Program, k: &Kernel, m: &Matmul) -> Option<BufId> {
    let Kernel::Pointwise { out, ranges, body } = k else { return None };
    let ExprKind::Load { buf, index } = &body.kind else { return None };
    let (BufKind::Weight(_), DType::F32) = (&prog.buffers[*buf].kind, prog.buffers[*buf].dtype) else { return None };
    let last = ranges.len().checked_sub(1)?;
    let along_columns = index.offset.as_int() == Some(0) && matches!(index.terms.as_slice(), [(v, c)] if *v == last && c.as_int() == Some(1));
    let whole = ranges[last] == m.n && numel(ranges) == numel(&[m.batch.clone(), m.m.clone(), m.n.clone()]);
    (*out == m.out && m.accumulate && body.dtype == DType::F32 && along_columns && whole && m.a.buf != m.out).then_some(*buf)
}

/// The buffer `k` writes when it is the GELU of all of `m`'s result.
fn gelu_of(prog: &Program, k: &Kernel, m: &Matmul) -> Option<BufId> {
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
fn read_elsewhere(prog: &Program, buf: BufId, except: [usize; 2]) -> bool {
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
