//! Output passes fused after lowering, where the pattern is only visible in the kernels:
//!
//! - A Linear layer lowers to three kernels: one copying the bias into the result, the
//!   GEMM accumulating onto it, and (for a GELU after it) the activation's own pass over
//!   the result. For a float32 GEMM with a packed right operand the support library's
//!   kernel adds the bias and applies the activation as it writes each register tile
//!   (`aotc_abi::gemm::Activation`), so the three become one kernel and the result is
//!   written once instead of three times.
//! - A hardswish (five graph nodes: add, two clamps, mul, div; one pointwise kernel once
//!   lowered), a SiLU (sigmoid and mul), a GELU (the support library's kernel) or a ReLU after a support-library
//!   convolution or such a GEMM becomes its activation. (A batch norm, residual add or ReLU after a convolution folds
//!   into it as it is lowered: `lower/aten/conv/epilogue.rs`.)

use crate::ir::expr::{ExprKind, E};
use crate::ir::{BufId, BufKind, ExternArg, ExternCall, Kernel, Matmul, Prim, Program};
use crate::lower::tensor::contiguous_strides;
use crate::lower::Lowered;
use aotc_abi::conv::{self, ACTIVATION, ARG_GEOMETRY, POOL};
use aotc_abi::gemm::Activation;
use aotc_abi::internal_symbols::GELU;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::HashSet;

/// Fuses into every packed-B float32 matmul the bias copy just before it, and into it and
/// every support-library convolution the activation just after it, where the program
/// allows.
pub fn fuse_epilogues(lowered: &mut Lowered) {
    // A result the caller sees is not replaced by its activation.
    let keep = lowered.caller_visible();
    let prog = &mut lowered.program;
    let mut i = 0;
    while i < prog.kernels.len() {
        match &prog.kernels[i] {
            Kernel::Matmul(m) if m.packed_b && m.dtype == DType::F32 => {
                if let Some(bias) = i.checked_sub(1).and_then(|p| column_bias(prog, &prog.kernels[p], m)) {
                    let nodes = prog.remove_kernel(i - 1);
                    i -= 1;
                    let Kernel::Matmul(m) = &mut prog.kernels[i] else { unreachable!() };
                    m.bias = Some(bias);
                    m.accumulate = false;
                    merge_nodes(prog, i, nodes);
                }
                if let Some((out, activation)) = take_next_activation(prog, i, &keep) {
                    let Kernel::Matmul(m) = &mut prog.kernels[i] else { unreachable!() };
                    m.out = out;
                    m.activation = activation;
                }
            }
            Kernel::Extern(call) if call.name == conv::SYMBOL && conv_activation(call) == Some(Activation::None) => {
                if let Some((out, activation)) = take_next_activation(prog, i, &keep) {
                    let Kernel::Extern(call) = &mut prog.kernels[i] else { unreachable!() };
                    call.out = out;
                    if let ExternArg::Sizes(geometry) = &mut call.args[ARG_GEOMETRY] {
                        geometry[ACTIVATION] = SymExpr::Int(activation.code());
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
}

/// The activation code in a convolution call's geometry; None when its output is pooled
/// (an activation after the pool is not one before it).
fn conv_activation(call: &ExternCall) -> Option<Activation> {
    let Some(ExternArg::Sizes(geometry)) = call.args.get(ARG_GEOMETRY) else { return None };
    if geometry.get(POOL)?.as_int()? != 0 {
        return None;
    }
    Activation::from_code(geometry.get(ACTIVATION)?.as_int()?)
}

/// When kernel `i + 1` applies an activation to all of kernel `i`'s float32 result and
/// nothing else reads that result: removes it (its graph nodes go to kernel `i`) and gives
/// the buffer it wrote, which kernel `i` is then to write, and the activation.
fn take_next_activation(prog: &mut Program, i: usize, keep: &HashSet<BufId>) -> Option<(BufId, Activation)> {
    let src = prog.kernels[i].out();
    let result = &prog.buffers[src];
    let (out, activation) = match prog.kernels.get(i + 1)? {
        Kernel::Pointwise { out, ranges, body } => {
            let (x, activation) = activation_of(body)?;
            // Same elements in the same order (a view may have added unit dimensions).
            (x == src && contiguous_loads_only(body, ranges) && numel(ranges) == numel(&result.sizes))
                .then_some((*out, activation))?
        }
        Kernel::Extern(call) => {
            let [ExternArg::Buf(x), ExternArg::Size(n)] = call.args.as_slice() else { return None };
            (call.name == GELU && *x == src && *n == numel(&result.sizes)).then_some((call.out, Activation::Gelu))?
        }
        _ => return None,
    };
    let reads_out = prog.kernels[i].inputs().0[1..].contains(&out);
    let fusable = result.dtype == DType::F32
        && prog.buffers[out].dtype == DType::F32
        && numel(&prog.buffers[out].sizes) == numel(&result.sizes)
        && out != src
        && !reads_out
        && !keep.contains(&src)
        && !read_elsewhere(prog, src, [i, i + 1]);
    if !fusable {
        return None;
    }
    let nodes = prog.remove_kernel(i + 1);
    merge_nodes(prog, i, nodes);
    Some((out, activation))
}

/// `(x, activation)` when `body` is an activation of buffer `x`'s element, as the graph
/// decomposes it: ReLU `max(x, 0)`, SiLU `x * sigmoid(x)`, hardswish `x * min(max(x + 3,
/// 0), 6) / 6` (the commutative operations' operands either way round).
fn activation_of(body: &E) -> Option<(BufId, Activation)> {
    let constant = |e: &E, v: f64| matches!(&e.kind, ExprKind::Const(s) if s.as_f64() == v);
    let binary = |e: &E, op: Prim| match &e.kind {
        ExprKind::Binary(p, a, b) if *p == op => Some((a.clone(), b.clone())),
        _ => None,
    };
    let load = |e: &E| match &e.kind {
        ExprKind::Load { buf, .. } => Some(*buf),
        _ => None,
    };
    if body.dtype != DType::F32 {
        return None;
    }
    if let Some((a, b)) = binary(body, Prim::Max) {
        let x = if constant(&b, 0.0) {
            a
        } else if constant(&a, 0.0) {
            b
        } else {
            return None;
        };
        return Some((load(&x)?, Activation::Relu));
    }
    if let Some((a, b)) = binary(body, Prim::Mul) {
        let sigmoid_of = |e: &E| match &e.kind {
            ExprKind::Unary(Prim::Sigmoid, x) => Some(x.clone()),
            _ => None,
        };
        let silu = match (sigmoid_of(&b), sigmoid_of(&a)) {
            (Some(x), _) if x == a => Some(a),
            (_, Some(x)) if x == b => Some(b),
            _ => None,
        };
        if let Some(x) = silu {
            return Some((load(&x)?, Activation::Silu));
        }
    }
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
    (constant(&six, 6.0) && x == gated).then_some((load(&x)?, Activation::Hardswish))
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
        ExprKind::Const(_) | ExprKind::Binary(..) | ExprKind::Unary(..) => {}
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
    let along_columns = index.offset.as_int() == Some(0)
        && matches!(index.terms.as_slice(), [(v, c)] if *v == last && c.as_int() == Some(1));
    let whole = ranges[last] == m.n && numel(ranges) == numel(&[m.batch.clone(), m.m.clone(), m.n.clone()]);
    (*out == m.out && m.accumulate && body.dtype == DType::F32 && along_columns && whole && m.a.buf != m.out)
        .then_some(*buf)
}

/// Element count of `sizes`, compared as integers where they are known.
fn numel(sizes: &[SymExpr]) -> SymExpr {
    let product = SymExpr::product(sizes);
    product.as_int().map_or(product, SymExpr::Int)
}

/// Whether a kernel other than those at `except` reads `buf`.
pub(super) fn read_elsewhere(prog: &Program, buf: BufId, except: [usize; 2]) -> bool {
    prog.kernels.iter().enumerate().any(|(j, k)| !except.contains(&j) && k.inputs().0.contains(&buf))
}

/// Adds the graph nodes of a fused kernel to kernel `i`'s (ascending, as the profile
/// names them).
pub(super) fn merge_nodes(prog: &mut Program, i: usize, nodes: Vec<usize>) {
    if let Some(list) = prog.kernel_nodes.get_mut(i) {
        list.extend(nodes);
        list.sort_unstable();
        list.dedup();
    }
}
