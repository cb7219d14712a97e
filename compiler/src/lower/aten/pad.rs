//! Padding: constant (negative padding crops), reflection and replication.
//!
//! An output element reads the input at a source position computed per padded dimension:
//! reflection mirrors a position outside the input about its edge, replication clamps it
//! to the edge, and constant padding masks it out. The positions are not affine in the
//! output index, so the input is read through `LoadAt`, which cannot leave its buffer
//! whatever the position; the shape rules make the positions the right ones.

use super::registry::LowerFn;
use crate::ir::expr::{self, binary, index_value, unary, Affine, E};
use crate::ir::{Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("constant_pad_nd.default", constant_pad_nd),
    ("reflection_pad1d.default", |lw, a| edge_pad(lw, a, 1, Edge::Reflect)),
    ("reflection_pad2d.default", |lw, a| edge_pad(lw, a, 2, Edge::Reflect)),
    ("reflection_pad3d.default", |lw, a| edge_pad(lw, a, 3, Edge::Reflect)),
    ("replication_pad2d.default", |lw, a| edge_pad(lw, a, 2, Edge::Replicate)),
    ("replication_pad3d.default", |lw, a| edge_pad(lw, a, 3, Edge::Replicate)),
];

/// A size as an int64 value.
pub(super) fn int(s: &SymExpr) -> E {
    index_value(Affine::constant(s.clone()))
}

/// Loop variable `v` as an int64 value.
pub(super) fn var(v: usize) -> E {
    index_value(Affine::var(v))
}

pub(super) fn int_const(v: i64) -> E {
    expr::constant(Scalar::I(v), DType::I64)
}

/// What a padded position reads.
enum Edge {
    /// The value: positions outside the input are masked.
    Constant(E),
    /// The input mirrored about its first and last element (which are not repeated).
    Reflect,
    /// The nearest element of the input.
    Replicate,
}

/// (before, after) padding per padded dimension, outermost first, from torch's flat list
/// which starts with the last dimension: [last_before, last_after, second_last_before, ...].
fn pairs(flat: &[SymExpr]) -> Vec<(SymExpr, SymExpr)> {
    flat.chunks(2).rev().map(|p| (p[0].clone(), p[1].clone())).collect()
}

fn constant_pad_nd(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let flat = a.sym_ints(lw, "pad")?;
    if flat.len() % 2 != 0 || flat.len() > 2 * x.rank() {
        return Err(format!("pad has {} entries: it must be even and at most twice the rank {}", flat.len(), x.rank()));
    }
    let value = a.opt_scalar("value")?.unwrap_or(Scalar::I(0));
    let pads = pairs(&flat);
    let static_crop = pads.iter().all(|(b, e)| [b, e].iter().all(|p| p.as_int().is_some_and(|v| v <= 0)));
    if static_crop {
        return Ok(vec![crop(lw, &x, &pads)?]);
    }
    Ok(vec![pad(lw, &x, &pads, Edge::Constant(expr::constant(value, x.dtype)), &a.node_name())?])
}

/// Non-positive padding only: slices, a view.
fn crop(lw: &mut Lowerer, x: &TensorValue, pads: &[(SymExpr, SymExpr)]) -> Result<TensorValue, String> {
    let lead = x.rank() - pads.len();
    let mut out = x.clone();
    for (k, (before, after)) in pads.iter().enumerate() {
        let d = lead + k;
        let len = padded_size(lw, &x.sizes[d], before, after, d)?;
        out = out.slice(d, SymExpr::mul([before.clone(), SymExpr::Int(-1)]), len, 1);
    }
    Ok(out)
}

/// `size + before + after`, required not to be negative.
fn padded_size(
    lw: &mut Lowerer,
    size: &SymExpr,
    before: &SymExpr,
    after: &SymExpr,
    d: usize,
) -> Result<SymExpr, String> {
    let out = SymExpr::add([size.clone(), before.clone(), after.clone()]);
    lw.require(SymExpr::Int(0), GuardOp::Le, out.clone(), &format!("padding must not make dimension {d} negative"))?;
    Ok(out)
}

/// reflection_padNd / replication_padNd over the last `k` dimensions of a tensor of rank
/// k + 1 or k + 2 (an optional batch dimension, then channels).
fn edge_pad(lw: &mut Lowerer, a: &Args, k: usize, edge: Edge) -> R {
    let x = a.tensor(lw, "self")?;
    let flat = a.sym_ints(lw, "padding")?;
    if flat.len() != 2 * k {
        return Err(format!("padding has {} entries, expected {}", flat.len(), 2 * k));
    }
    if x.rank() != k + 1 && x.rank() != k + 2 {
        return Err(format!("expected a {}-D or {}-D input, got rank {}", k + 1, k + 2, x.rank()));
    }
    Ok(vec![pad(lw, &x, &pairs(&flat), edge, &a.node_name())?])
}

/// Pads the trailing `pads.len()` dimensions of `x`.
fn pad(
    lw: &mut Lowerer,
    x: &TensorValue,
    pads: &[(SymExpr, SymExpr)],
    edge: Edge,
    name: &str,
) -> Result<TensorValue, String> {
    let lead = x.rank() - pads.len();
    let mut sizes = x.sizes.clone();
    let mut index: Vec<E> = (0..x.rank()).map(var).collect();
    let mut inside: Option<E> = None;
    for (k, (before, after)) in pads.iter().enumerate() {
        let d = lead + k;
        let n = x.sizes[d].clone();
        sizes[d] = padded_size(lw, &n, before, after, d)?;
        require_edge_rule(lw, &edge, &n, before, after, d)?;
        // The position in the input's coordinates, outside 0..n in the padding.
        let s = binary(Prim::Sub, var(d), int(before));
        index[d] = match &edge {
            Edge::Constant(_) => {
                let within =
                    binary(Prim::And, binary(Prim::Ge, s.clone(), int_const(0)), binary(Prim::Lt, s.clone(), int(&n)));
                inside = Some(match inside {
                    Some(c) => binary(Prim::And, c, within),
                    None => within,
                });
                s
            }
            Edge::Reflect => reflect(s, &n),
            Edge::Replicate => clamp(s, &n),
        };
    }
    let value = lw.load_at_indices(x, &index, name);
    let body = match (inside, edge) {
        (Some(c), Edge::Constant(fill)) => expr::select(c, value, fill),
        _ => value,
    };
    Ok(TensorValue::lazy(x.dtype, sizes, body))
}

/// The conditions under which the source position of every output element lies in the
/// input, as torch states them.
fn require_edge_rule(
    lw: &mut Lowerer,
    edge: &Edge,
    n: &SymExpr,
    before: &SymExpr,
    after: &SymExpr,
    d: usize,
) -> Result<(), String> {
    match edge {
        Edge::Constant(_) => Ok(()),
        Edge::Reflect => {
            for p in [before, after] {
                lw.require(
                    SymExpr::add([p.clone(), SymExpr::Int(1)]),
                    GuardOp::Le,
                    n.clone(),
                    &format!("reflection padding must be smaller than dimension {d}"),
                )?;
            }
            Ok(())
        }
        Edge::Replicate => lw.require(
            SymExpr::Int(1),
            GuardOp::Le,
            n.clone(),
            &format!("replication padding needs a non-empty dimension {d}"),
        ),
    }
}

/// Position `s` mirrored into `0..n` (one reflection suffices as the padding is < n):
/// `(n-1) - |(n-1) - |s||`.
fn reflect(s: E, n: &SymExpr) -> E {
    let last = int(&SymExpr::add([n.clone(), SymExpr::Int(-1)]));
    binary(Prim::Sub, last.clone(), unary(Prim::Abs, binary(Prim::Sub, last, unary(Prim::Abs, s))))
}

/// Position `s` clamped into `0..n`.
fn clamp(s: E, n: &SymExpr) -> E {
    let last = int(&SymExpr::add([n.clone(), SymExpr::Int(-1)]));
    binary(Prim::Min, binary(Prim::Max, s, int_const(0)), last)
}
