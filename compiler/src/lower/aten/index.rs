//! Indexing by data and by position: gather, index_select, embedding, cat.
//!
//! Indices read from tensors are checked on every use (`CheckIndex`): one out of range
//! fails the call with AOTC_ERR_INDEX naming the node, never an out-of-bounds access.
//! Positions computed by the lowering itself read through `LoadAt`, which cannot leave
//! its buffer.

use super::registry::LowerFn;
use crate::ir::expr::{self, binary, index_value, Affine, E};
use crate::ir::Prim;
use crate::lower::args::Args;
use crate::lower::tensor::{norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("index_select.default", index_select),
    ("gather.default", gather),
    ("embedding.default", embedding),
    ("cat.default", cat),
];

fn node_name(a: &Args) -> String {
    a.node.name.clone().unwrap_or_else(|| "index".into())
}

/// An int64 constant or symbolic size as an expression.
fn size_value(s: &SymExpr) -> E {
    index_value(Affine::constant(s.clone()))
}

impl Lowerer<'_> {
    /// The element of `v` at per-dimension indices `idx` (int64 expressions), reading
    /// through `LoadAt`: `v` is realized first.
    pub fn load_at_indices(&mut self, v: &TensorValue, idx: &[E], name: &str) -> E {
        let (_, r) = self.strided(v, name);
        let offset = idx.iter().zip(&r.strides).fold(size_value(&r.offset), |acc, (i, s)| {
            let term = if *s == SymExpr::Int(1) { i.clone() } else { binary(Prim::Mul, i.clone(), size_value(s)) };
            binary(Prim::Add, acc, term)
        });
        let numel = SymExpr::product(self.prog.buffers[r.buf].sizes.iter());
        expr::load_at(r.buf, v.dtype, numel, offset)
    }

    /// `value` (an index read from a tensor) checked against a dimension of size `bound`;
    /// `wrap`: negative values count from the end (python indexing).
    pub fn checked_index(&mut self, value: E, bound: SymExpr, wrap: bool, what: &str) -> E {
        let (site, record) = self.prog.index_site(format!("{}: {what}", self.node_desc));
        expr::check_index(value, bound, wrap, site, record)
    }
}

/// The loop variables of an output of `rank` dimensions as int64 expressions.
fn var_values(rank: usize) -> Vec<E> {
    (0..rank).map(|d| index_value(Affine::var(d))).collect()
}

fn index_select(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int("dim")?, x.rank())?;
    let index = a.tensor(lw, "index")?;
    if index.rank() > 1 {
        return Err(format!("index must be 0-D or 1-D, got rank {}", index.rank()));
    }
    if x.rank() == 0 {
        // A 0-dim self: its one element, if the (one) index is 0 or -1.
        let first = index.load(&vec![Affine::constant(SymExpr::Int(0)); index.rank()]);
        let i = lw.checked_index(first, SymExpr::Int(1), false, "index_select of a 0-dim tensor");
        let body = lw.load_at_indices(&x, &[i], &node_name(a));
        return Ok(vec![TensorValue::lazy(x.dtype, vec![], body)]);
    }
    let mut sizes = x.sizes.clone();
    sizes[dim] = index.sizes.first().cloned().unwrap_or(SymExpr::Int(1));
    let picked = index.load(&vars(sizes.len())[dim..dim + index.rank()]);
    let mut idx = var_values(sizes.len());
    idx[dim] = lw.checked_index(picked, x.sizes[dim].clone(), false, &format!("index_select along dimension {dim}"));
    let body = lw.load_at_indices(&x, &idx, &node_name(a));
    Ok(vec![TensorValue::lazy(x.dtype, sizes, body)])
}

fn gather(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int("dim")?, x.rank())?;
    let index = a.tensor(lw, "index")?;
    if index.rank() != x.rank() && !(index.rank() <= 1 && x.rank() <= 1) {
        return Err(format!("index has rank {}, self has rank {}: gather needs the same rank", index.rank(), x.rank()));
    }
    for d in (0..index.rank()).filter(|&d| d != dim) {
        lw.require(index.sizes[d].clone(), GuardOp::Le, x.sizes[d].clone(), &format!("gather: index dimension {d} must not exceed self's"))?;
    }
    let rank = index.rank();
    let picked = index.load(&vars(rank));
    let mut idx = var_values(rank);
    if x.rank() == 0 {
        idx.clear();
        // A 0-dim self accepts only index 0 (or -1).
        let check = lw.checked_index(picked, SymExpr::Int(1), false, "gather into a 0-dim tensor");
        let body = lw.load_at_indices(&x, &[check], &node_name(a));
        return Ok(vec![TensorValue::lazy(x.dtype, index.sizes.clone(), body)]);
    }
    idx[dim] = lw.checked_index(picked, x.sizes[dim].clone(), false, &format!("gather along dimension {dim}"));
    let body = lw.load_at_indices(&x, &idx, &node_name(a));
    Ok(vec![TensorValue::lazy(x.dtype, index.sizes.clone(), body)])
}

/// `weight[indices]`: one row of the table per index.
fn embedding(lw: &mut Lowerer, a: &Args) -> R {
    let weight = a.tensor(lw, "weight")?;
    let indices = a.tensor(lw, "indices")?;
    if weight.rank() != 2 {
        return Err(format!("embedding weight must be 2-D, got rank {}", weight.rank()));
    }
    let rank = indices.rank() + 1;
    let mut sizes = indices.sizes.clone();
    sizes.push(weight.sizes[1].clone());
    let at = vars(rank);
    let row = lw.checked_index(indices.load(&at[..rank - 1]), weight.sizes[0].clone(), false, "embedding row");
    let body = lw.load_at_indices(&weight, &[row, index_value(Affine::var(rank - 1))], &node_name(a));
    Ok(vec![TensorValue::lazy(weight.dtype, sizes, body)])
}

/// Concatenation along `dim`: each output element reads the input whose range holds it.
fn cat(lw: &mut Lowerer, a: &Args) -> R {
    let all = a.tensors(lw, "tensors")?;
    // torch skips legacy empty 1-D inputs (size [0]) whatever the others' rank.
    let parts: Vec<TensorValue> = all.iter().filter(|t| !(t.rank() == 1 && t.sizes[0] == SymExpr::Int(0))).cloned().collect();
    let Some(first) = parts.first().or(all.first()).cloned() else { return Err("cat of an empty list".into()) };
    let dim = norm_dim(a.int_or("dim", 0)?, first.rank())?;
    let dtype = parts.iter().map(|t| t.dtype).reduce(super::promote::promote_types).unwrap_or(first.dtype);
    let mut sizes = first.sizes.clone();
    for t in &parts {
        if t.rank() != first.rank() {
            return Err(format!("cat inputs differ in rank: {} vs {}", t.rank(), first.rank()));
        }
        for d in (0..t.rank()).filter(|&d| d != dim) {
            lw.require(t.sizes[d].clone(), GuardOp::Eq, first.sizes[d].clone(), &format!("cat inputs agree on dimension {d}"))?;
        }
    }
    if first.rank() == 0 {
        return Err("cat of 0-dim tensors".into());
    }
    sizes[dim] = SymExpr::add(parts.iter().map(|t| t.sizes[dim].clone()));
    let name = node_name(a);
    let out = var_values(sizes.len());
    // From the last part back: where(i < start_k + size_k, part_k[i - start_k], later).
    let mut starts = vec![];
    let mut start = SymExpr::Int(0);
    for t in &parts {
        starts.push(start.clone());
        start = SymExpr::add([start, t.sizes[dim].clone()]);
    }
    let mut body = expr::constant(crate::ir::Scalar::I(0), dtype);
    for (t, s) in parts.iter().zip(&starts).rev() {
        let mut idx = out.clone();
        idx[dim] = binary(Prim::Sub, out[dim].clone(), size_value(s));
        let value = expr::cast(lw.load_at_indices(t, &idx, &name), dtype);
        let end = size_value(&SymExpr::add([s.clone(), t.sizes[dim].clone()]));
        body = expr::select(binary(Prim::Lt, out[dim].clone(), end), value, body);
    }
    Ok(vec![TensorValue::lazy(dtype, sizes, body)])
}
