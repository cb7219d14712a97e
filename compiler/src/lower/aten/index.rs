//! Indexing by data and by position: gather, index_select, advanced indexing (index,
//! index_put), embeddings, cat.
//!
//! Indices read from tensors are checked on every use (`CheckIndex`): one out of range
//! fails the call with AOTC_ERR_INDEX naming the node, never an out-of-bounds access.
//! Positions computed by the lowering itself read through `LoadAt`, which cannot leave
//! its buffer.

mod native_concat;

use super::registry::LowerFn;
use super::scatter::{all, converted, flat_position, reduce_where, var_value};
use crate::frontend::schema::{Argument, OptionalTensorArgument};
use crate::ir::expr::{self, binary, cast, index_value, Affine, E};
use crate::ir::expr::{int, size_value};
use crate::ir::{Prim, ReduceOp};
use crate::lower::args::Args;
use crate::lower::tensor::{broadcast_shapes, norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("index_select.default", index_select),
    ("gather.default", gather),
    ("embedding.default", embedding),
    ("cat.default", cat),
    ("index.Tensor", index),
    ("index_put.default", index_put),
    ("embedding_dense_backward.default", embedding_dense_backward),
    ("_embedding_bag.default", embedding_bag),
];

impl Lowerer<'_> {
    /// The element of `v` at per-dimension indices `idx` (int64 expressions), reading
    /// through `LoadAt`: `v` is realized first. One index per dimension: an index past
    /// `v`'s rank is dropped, with the check it carries.
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
        // A 0-dim self: its one element, if the (one) index is 0 (torch refuses -1 too).
        // It is read as a 1-element vector, so that the checked index is part of the load.
        let first = index.load(&vec![Affine::constant(SymExpr::Int(0)); index.rank()]);
        let i = lw.checked_index(first, SymExpr::Int(1), false, "index_select of a 0-dim tensor");
        let body = lw.load_at_indices(&x.unsqueeze(0), &[i], &a.node_name());
        return Ok(vec![TensorValue::lazy(x.dtype, vec![], body)]);
    }
    let mut sizes = x.sizes.clone();
    sizes[dim] = index.sizes.first().cloned().unwrap_or(SymExpr::Int(1));
    let picked = index.load(&vars(sizes.len())[dim..dim + index.rank()]);
    let mut idx = var_values(sizes.len());
    idx[dim] = lw.checked_index(picked, x.sizes[dim].clone(), false, &format!("index_select along dimension {dim}"));
    let body = lw.load_at_indices(&x, &idx, &a.node_name());
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
        lw.require(
            index.sizes[d].clone(),
            GuardOp::Le,
            x.sizes[d].clone(),
            &format!("gather: index dimension {d} must not exceed self's"),
        )?;
    }
    let rank = index.rank();
    let picked = index.load(&vars(rank));
    let mut idx = var_values(rank);
    if x.rank() == 0 {
        idx.clear();
        // A 0-dim self accepts only index 0 (or -1).
        let check = lw.checked_index(picked, SymExpr::Int(1), false, "gather into a 0-dim tensor");
        let body = lw.load_at_indices(&x, &[check], &a.node_name());
        return Ok(vec![TensorValue::lazy(x.dtype, index.sizes.clone(), body)]);
    }
    idx[dim] = lw.checked_index(picked, x.sizes[dim].clone(), false, &format!("gather along dimension {dim}"));
    let body = lw.load_at_indices(&x, &idx, &a.node_name());
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
    let body = lw.load_at_indices(&weight, &[row, index_value(Affine::var(rank - 1))], &a.node_name());
    Ok(vec![TensorValue::lazy(weight.dtype, sizes, body)])
}

/// Concatenation along `dim`: each output element reads the input whose range holds it
/// (or, from buffers, byte copies: `native_concat`).
fn cat(lw: &mut Lowerer, a: &Args) -> R {
    let all = a.tensors(lw, "tensors")?;
    Ok(vec![concat(lw, &all, a.int_or("dim", 0)?, &a.node_name())?])
}

/// `all` concatenated along `dim` (torch.cat's rules).
pub(crate) fn concat(lw: &mut Lowerer, all: &[TensorValue], dim: i64, name: &str) -> Result<TensorValue, String> {
    // torch skips legacy empty 1-D inputs (size [0]) whatever the others' rank.
    let parts: Vec<TensorValue> =
        all.iter().filter(|t| !(t.rank() == 1 && t.sizes[0] == SymExpr::Int(0))).cloned().collect();
    let Some(first) = parts.first().or(all.first()).cloned() else { return Err("cat of an empty list".into()) };
    let dim = norm_dim(dim, first.rank())?;
    let dtype = parts.iter().map(|t| t.dtype).reduce(super::promote::promote_types).unwrap_or(first.dtype);
    let mut sizes = first.sizes.clone();
    for t in &parts {
        if t.rank() != first.rank() {
            return Err(format!("cat inputs differ in rank: {} vs {}", t.rank(), first.rank()));
        }
        for d in (0..t.rank()).filter(|&d| d != dim) {
            lw.require(
                t.sizes[d].clone(),
                GuardOp::Eq,
                first.sizes[d].clone(),
                &format!("cat inputs agree on dimension {d}"),
            )?;
        }
    }
    if first.rank() == 0 {
        return Err("cat of 0-dim tensors".into());
    }
    sizes[dim] = SymExpr::add(parts.iter().map(|t| t.sizes[dim].clone()));
    if let Some(y) = native_concat::concat(lw, &parts, dim, dtype, &sizes, name) {
        return Ok(y);
    }
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
        let value = expr::cast(lw.load_at_indices(t, &idx, name), dtype);
        let end = size_value(&SymExpr::add([s.clone(), t.sizes[dim].clone()]));
        body = expr::select(binary(Prim::Lt, out[dim].clone(), end), value, body);
    }
    Ok(TensorValue::lazy(dtype, sizes, body))
}

/// The `indices` of index/index_put: an optional index tensor per leading dimension.
fn index_list(lw: &Lowerer, a: &Args) -> Result<Vec<Option<TensorValue>>, String> {
    match a.get("indices") {
        Some(Argument::Tensors(ts)) => ts.iter().map(|t| lw.value(&t.name).map(Some)).collect(),
        Some(Argument::OptionalTensors(ts)) => ts
            .iter()
            .map(|t| match t {
                OptionalTensorArgument::Tensor(t) => lw.value(&t.name).map(Some),
                OptionalTensorArgument::None(_) => Ok(None),
            })
            .collect(),
        other => Err(format!("argument 'indices' should be a list of optional tensors, got {other:?}")),
    }
}

fn is_mask(t: &TensorValue) -> bool {
    matches!(t.dtype, DType::Bool | DType::U8)
}

/// Advanced indexing (`x[i0, :, i2]`) laid out as torch does: the index tensors
/// broadcast together to the `batch` shape, whose dimensions replace the indexed ones
/// when those are adjacent and go first otherwise; self's other ("sliced") dimensions
/// keep their order.
struct Advanced {
    /// (dimension of self, its index tensor broadcast to `batch`).
    indexed: Vec<(usize, TensorValue)>,
    batch: Vec<SymExpr>,
    sliced: Vec<usize>,
    /// How many sliced dimensions come before the batch dimensions in the result.
    batch_at: usize,
}

impl Advanced {
    fn new(x: &TensorValue, indices: Vec<Option<TensorValue>>) -> Result<Advanced, String> {
        if indices.len() > x.rank() {
            return Err(format!("too many indices ({}) for a tensor of rank {}", indices.len(), x.rank()));
        }
        let given: Vec<(usize, TensorValue)> =
            indices.into_iter().enumerate().filter_map(|(d, t)| t.map(|t| (d, t))).collect();
        if let Some((d, t)) = given.iter().find(|(_, t)| t.dtype.is_float()) {
            return Err(format!("the index of dimension {d} is {}: indices must be integers", t.dtype));
        }
        let batch = broadcast_shapes(&given.iter().map(|(_, t)| &t.sizes[..]).collect::<Vec<_>>())?;
        let indexed = given.into_iter().map(|(d, t)| Ok((d, t.expand(&batch)?))).collect::<Result<Vec<_>, String>>()?;
        let sliced: Vec<usize> = (0..x.rank()).filter(|d| !indexed.iter().any(|(i, _)| i == d)).collect();
        let first = indexed.first().map_or(0, |(d, _)| *d);
        let adjacent = indexed.iter().enumerate().all(|(k, (d, _))| *d == first + k);
        let batch_at = if adjacent { sliced.iter().filter(|&&d| d < first).count() } else { 0 };
        Ok(Advanced { indexed, batch, sliced, batch_at })
    }

    fn result_sizes(&self, x: &TensorValue) -> Vec<SymExpr> {
        let sliced: Vec<SymExpr> = self.sliced.iter().map(|&d| x.sizes[d].clone()).collect();
        self.result_at(&self.batch, &sliced)
    }

    /// A result position from its batch coordinates and its sliced dimensions' ones.
    fn result_at<T: Clone>(&self, batch: &[T], sliced: &[T]) -> Vec<T> {
        [&sliced[..self.batch_at], batch, &sliced[self.batch_at..]].concat()
    }

    /// The (batch, sliced) coordinates of a result position.
    fn split<T: Clone>(&self, at: &[T]) -> (Vec<T>, Vec<T>) {
        let end = self.batch_at + self.batch.len();
        (at[self.batch_at..end].to_vec(), [&at[..self.batch_at], &at[end..]].concat())
    }

    /// The index of `self`'s dimension `d` read at batch position `batch`, checked
    /// (negative values count from the end, as in python).
    fn checked(&self, lw: &mut Lowerer, x: &TensorValue, k: usize, batch: &[Affine]) -> E {
        let (d, t) = &self.indexed[k];
        lw.checked_index(t.load(batch), x.sizes[*d].clone(), true, &format!("index into dimension {d}"))
    }
}

/// `self[indices]`: a gather at the checked indices.
fn index(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let indices = index_list(lw, a)?;
    if indices.iter().flatten().any(is_mask) {
        return Err("indexing with a boolean mask is not supported: the size of its result depends on the data".into());
    }
    let adv = Advanced::new(&x, indices)?;
    let sizes = adv.result_sizes(&x);
    let (batch, sliced) = adv.split(&vars(sizes.len()));
    let mut at: Vec<E> = (0..x.rank()).map(|_| int(0)).collect();
    for (&d, s) in adv.sliced.iter().zip(&sliced) {
        at[d] = index_value(s.clone());
    }
    for k in 0..adv.indexed.len() {
        at[adv.indexed[k].0] = adv.checked(lw, &x, k, &batch);
    }
    let body = lw.load_at_indices(&x, &at, &a.node_name());
    Ok(vec![TensorValue::lazy(x.dtype, sizes, body)])
}

/// `self[indices] = values` (or `+=` with `accumulate`), out of place: each element of
/// self gathers the values whose indices point at it. Without `accumulate`, the last
/// such value (in index order) wins, as torch's CPU kernel writes them in order.
fn index_put(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let indices = index_list(lw, a)?;
    let values = converted(&a.tensor(lw, "values")?, x.dtype);
    let accumulate = a.bool_or("accumulate", false)?;
    if indices.iter().flatten().any(is_mask) {
        return mask_put(lw, &x, indices, &values, accumulate);
    }
    let adv = Advanced::new(&x, indices)?;
    let values = values
        .expand(&adv.result_sizes(&x))
        .map_err(|m| format!("values do not broadcast to the indexed shape: {m}"))?;
    let name = a.node_name();
    let rank = x.rank();
    // Reduction variables: self's position (0..rank), then the batch position.
    let batch: Vec<Affine> = (rank..rank + adv.batch.len()).map(Affine::var).collect();
    let sliced: Vec<Affine> = adv.sliced.iter().map(|&d| Affine::var(d)).collect();
    let hits: Vec<E> = (0..adv.indexed.len())
        .map(|k| binary(Prim::Eq, adv.checked(lw, &x, k, &batch), var_value(adv.indexed[k].0)))
        .collect();
    let matches = all(hits);
    let x_i = x.load(&vars(rank));
    if accumulate {
        let added = reduce_where(
            lw,
            &name,
            &x.sizes,
            &adv.batch,
            ReduceOp::Sum,
            matches,
            values.load(&adv.result_at(&batch, &sliced)),
        );
        return Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), binary(Prim::Add, x_i, added.load(&vars(rank))))]);
    }
    let last = reduce_where(
        lw,
        &format!("{name}.last"),
        &x.sizes,
        &adv.batch,
        ReduceOp::Max,
        matches,
        flat_position(&adv.batch, &batch),
    );
    let last = last.load(&vars(rank));
    // The values laid out as [batch (flattened), sliced...], read at the last position.
    let (start, end) = (adv.batch_at, adv.batch_at + adv.batch.len());
    let order: Vec<usize> = (start..end).chain(0..start).chain(end..values.rank()).collect();
    let batch_first = values.permute(&order)?;
    let flat_sizes: Vec<SymExpr> = std::iter::once(SymExpr::product(adv.batch.iter()))
        .chain(adv.sliced.iter().map(|&d| x.sizes[d].clone()))
        .collect();
    let table = lw.reshape(&batch_first, &flat_sizes, &format!("{name}.values"));
    let at: Vec<E> = std::iter::once(binary(Prim::Max, last.clone(), int(0)))
        .chain(adv.sliced.iter().map(|&d| var_value(d)))
        .collect();
    let value = lw.load_at_indices(&table, &at, &name);
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), expr::select(binary(Prim::Ge, last, int(0)), value, x_i))])
}

/// index_put with one boolean mask among the indices: `self[mask] = values`, where the
/// values may broadcast along every dimension but the masked positions' (whose count
/// depends on the data): `where(mask, values, self)`.
fn mask_put(
    lw: &mut Lowerer,
    x: &TensorValue,
    indices: Vec<Option<TensorValue>>,
    values: &TensorValue,
    accumulate: bool,
) -> R {
    let given: Vec<(usize, &TensorValue)> =
        indices.iter().enumerate().filter_map(|(d, t)| t.as_ref().map(|t| (d, t))).collect();
    let [(first, mask)] = given[..] else {
        return Err("index_put with a boolean mask and other index tensors is not supported".into());
    };
    let masked = first..first + mask.rank();
    if masked.end > x.rank() {
        return Err(format!(
            "a mask of rank {} at dimension {first} does not fit a tensor of rank {}",
            mask.rank(),
            x.rank()
        ));
    }
    for (k, d) in masked.clone().enumerate() {
        lw.require(
            mask.sizes[k].clone(),
            GuardOp::Eq,
            x.sizes[d].clone(),
            &format!("the mask matches self's dimension {d}"),
        )?;
    }
    // The indexed shape with one masked position: values must not vary along that one.
    let sizes = [&x.sizes[..first], &[SymExpr::Int(1)], &x.sizes[masked.end..]].concat();
    let values = values.expand(&sizes).map_err(|m| format!("index_put with a boolean mask: values must broadcast to [{}] (values that vary along the masked positions are not supported): {m}", super::super::checks::show(&sizes)))?;
    let at = vars(x.rank());
    let value_at = [&at[..first], &[Affine::constant(SymExpr::Int(0))], &at[masked.end..]].concat();
    let x_i = x.load(&at);
    let value = values.load(&value_at);
    let value = if accumulate { binary(Prim::Add, x_i.clone(), value) } else { value };
    let hit = cast(mask.load(&at[masked]), DType::Bool);
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), expr::select(hit, value, x_i))])
}

/// The gradient of an embedding: row `w` sums the gradient rows whose index is `w`
/// (skipping `padding_idx`), divided by how often `w` occurs with `scale_grad_by_freq`.
/// Out-of-range indices add to no row, as in torch's CPU kernel.
fn embedding_dense_backward(lw: &mut Lowerer, a: &Args) -> R {
    let grad = a.tensor(lw, "grad_output")?;
    let indices = a.tensor(lw, "indices")?;
    let num_weights = a.sym_int(lw, "num_weights")?;
    let padding_idx = a.int("padding_idx")?;
    let scale = a.bool_or("scale_grad_by_freq", false)?;
    if grad.rank() != indices.rank() + 1 {
        return Err(format!(
            "grad_output has rank {}, expected the indices' rank {} plus one",
            grad.rank(),
            indices.rank()
        ));
    }
    for d in 0..indices.rank() {
        lw.require(
            grad.sizes[d].clone(),
            GuardOp::Eq,
            indices.sizes[d].clone(),
            &format!("grad_output matches the indices in dimension {d}"),
        )?;
    }
    let name = a.node_name();
    let n = SymExpr::product(indices.sizes.iter());
    let dim = grad.sizes[indices.rank()].clone();
    let flat_indices = lw.reshape(&indices, std::slice::from_ref(&n), &format!("{name}.indices"));
    let flat_grad = lw.reshape(&grad, &[n.clone(), dim.clone()], &format!("{name}.grad"));
    // Reduction variables: (row, column) of the result, then the index position.
    let index = cast(flat_indices.load(&[Affine::var(2)]), DType::I64);
    let mut matches = binary(Prim::Eq, index.clone(), var_value(0));
    if padding_idx >= 0 {
        matches = binary(Prim::And, matches, binary(Prim::Ne, index.clone(), int(padding_idx)));
    }
    let sizes = [num_weights.clone(), dim];
    let sum = reduce_where(
        lw,
        &name,
        &sizes,
        std::slice::from_ref(&n),
        ReduceOp::Sum,
        matches,
        flat_grad.load(&[Affine::var(2), Affine::var(1)]),
    );
    if !scale {
        return Ok(vec![sum]);
    }
    let index = cast(flat_indices.load(&[Affine::var(1)]), DType::I64);
    let counts = reduce_where(
        lw,
        &format!("{name}.counts"),
        &[num_weights],
        &[n],
        ReduceOp::Sum,
        binary(Prim::Eq, index, var_value(0)),
        int(1),
    );
    let count = counts.load(&[Affine::var(0)]);
    let s = sum.load(&vars(2));
    let scaled =
        expr::select(binary(Prim::Gt, count.clone(), int(0)), binary(Prim::Div, s.clone(), cast(count, grad.dtype)), s);
    Ok(vec![TensorValue::lazy(grad.dtype, sizes.to_vec(), scaled)])
}

/// Bags of embeddings: bag `b` reduces (mode 0 sum, 1 mean, 2 max) the rows of `weight`
/// picked by the indices from `offsets[b]` to the next bag's start. torch's four
/// results: the bags, offset2bag (each index's bag), bag_size and max_indices.
fn embedding_bag(lw: &mut Lowerer, a: &Args) -> R {
    let weight = a.tensor(lw, "weight")?;
    let indices = a.tensor(lw, "indices")?;
    let offsets = a.tensor(lw, "offsets")?;
    // Both only change the backward pass.
    a.bool_or("scale_grad_by_freq", false)?;
    a.bool_or("sparse", false)?;
    let mode = a.int_or("mode", 0)?;
    let per_sample_weights = a.opt_tensor(lw, "per_sample_weights")?;
    let include_last_offset = a.bool_or("include_last_offset", false)?;
    let padding_idx = a.int_or("padding_idx", -1)?;
    if weight.rank() != 2 || indices.rank() != 1 || offsets.rank() != 1 {
        return Err(format!(
            "embedding_bag needs a 2-D weight and 1-D indices and offsets, got ranks {}, {}, {}",
            weight.rank(),
            indices.rank(),
            offsets.rank()
        ));
    }
    if !(0..=2).contains(&mode) || (per_sample_weights.is_some() && mode != 0) {
        return Err(format!("embedding_bag mode must be 0 (sum), 1 (mean) or 2 (max), and per_sample_weights needs sum; got mode {mode}"));
    }
    let name = a.node_name();
    let n = indices.sizes[0].clone();
    let bags = SymExpr::add([offsets.sizes[0].clone(), SymExpr::Int(-(include_last_offset as i64))]);
    lw.require(
        SymExpr::Int(0),
        GuardOp::Le,
        bags.clone(),
        "embedding_bag: include_last_offset needs at least one offset",
    )?;
    let int_dtype = super::promote::promote_types(indices.dtype, offsets.dtype);
    let offset_at = |p: Affine| cast(offsets.load(&[p]), DType::I64);
    // offset2bag[p] = #{ b < bags : offsets[b] <= p } - 1
    let starts = reduce_where(
        lw,
        &format!("{name}.offset2bag"),
        std::slice::from_ref(&n),
        std::slice::from_ref(&bags),
        ReduceOp::Sum,
        binary(Prim::Le, offset_at(Affine::var(1)), var_value(0)),
        int(1),
    );
    let offset2bag = lw.realize(
        &TensorValue::lazy(DType::I64, vec![n.clone()], binary(Prim::Sub, starts.load(&[Affine::var(0)]), int(1))),
        &format!("{name}.offset2bag"),
    );
    let bag = BagMembers { offset2bag: offset2bag.clone(), indices: indices.clone(), padding_idx };
    // bag_size[b] = (offsets[b + 1], n for the last bag) - offsets[b] - padding indices in b
    let b = var_value(0);
    let next_start = lw.load_at_indices(&offsets, &[binary(Prim::Add, b.clone(), int(1))], &name);
    let is_last = binary(Prim::Ge, binary(Prim::Add, b.clone(), int(1)), size_value(&bags));
    // torch's checks of the offsets, each failing the call with AOTC_ERR_INDEX as torch
    // raises: every offset within 0..=n, offsets[0] == 0, no offset below the one before.
    let boundaries = SymExpr::add([n.clone(), SymExpr::Int(1)]);
    let within = "embedding_bag offsets (positions 0..=n in the indices)";
    let start = lw.checked_index(offset_at(Affine::var(0)), boundaries.clone(), false, within);
    let has_next = binary(Prim::Lt, binary(Prim::Add, b.clone(), int(1)), size_value(&offsets.sizes[0]));
    let next = lw.checked_index(
        expr::select(has_next, cast(next_start, DType::I64), size_value(&n)),
        boundaries.clone(),
        false,
        within,
    );
    let first = expr::select(binary(Prim::Eq, b.clone(), int(0)), offset_at(Affine::var(0)), int(0));
    let first = lw.checked_index(first, SymExpr::Int(1), false, "embedding_bag offsets[0] (must be 0)");
    let length = binary(Prim::Sub, next, start.clone());
    let length = lw.checked_index(length, boundaries, false, "embedding_bag bag length (offsets must not decrease)");
    // The last bag ends at n (include_last_offset's last offset ends none); `first` is 0.
    let end_at_n = binary(Prim::Sub, size_value(&n), start);
    let mut bag_size = binary(Prim::Add, expr::select(is_last, end_at_n, length), first);
    if padding_idx >= 0 {
        let padded =
            binary(Prim::And, bag.holds(Affine::var(1)), binary(Prim::Eq, bag.index(Affine::var(1)), int(padding_idx)));
        let pads = reduce_where(
            lw,
            &format!("{name}.padding"),
            std::slice::from_ref(&bags),
            std::slice::from_ref(&n),
            ReduceOp::Sum,
            padded,
            int(1),
        );
        bag_size = binary(Prim::Sub, bag_size, pads.load(&[Affine::var(0)]));
    }
    let bag_size =
        lw.realize(&TensorValue::lazy(DType::I64, vec![bags.clone()], bag_size), &format!("{name}.bag_size"));
    let sizes = vec![bags.clone(), weight.sizes[1].clone()];
    // Reduction variables: (bag, column), then the index position.
    let row = lw.checked_index(bag.index(Affine::var(2)), weight.sizes[0].clone(), false, "embedding_bag index");
    let mut value = lw.load_at_indices(&weight, &[row, var_value(1)], &name);
    if let Some(w) = &per_sample_weights {
        if w.rank() != 1 {
            return Err(format!("per_sample_weights must be 1-D, got rank {}", w.rank()));
        }
        lw.require(w.sizes[0].clone(), GuardOp::Eq, n.clone(), "per_sample_weights has one weight per index")?;
        value = binary(Prim::Mul, value, cast(w.load(&[Affine::var(2)]), weight.dtype));
    }
    let in_bag = bag.member(Affine::var(2));
    let ints = |v: &TensorValue| TensorValue::lazy(int_dtype, v.sizes.clone(), v.load(&vars(v.rank())));
    if mode == 2 {
        let best = reduce_where(
            lw,
            &format!("{name}.argmax"),
            &sizes,
            std::slice::from_ref(&n),
            ReduceOp::ArgMax,
            in_bag,
            value,
        );
        let (out, max_indices) = bag_max(lw, &bag, &weight, &best, &name);
        return Ok(vec![out, ints(&offset2bag), ints(&bag_size), ints(&max_indices)]);
    }
    let sum = reduce_where(lw, &name, &sizes, std::slice::from_ref(&n), ReduceOp::Sum, in_bag, value);
    let (out, bag_size) = if mode == 1 {
        let count = cast(binary(Prim::Max, bag_size.load(&[Affine::var(0)]), int(1)), weight.dtype);
        (TensorValue::lazy(weight.dtype, sizes, binary(Prim::Div, sum.load(&vars(2)), count)), bag_size)
    } else {
        // torch zeroes bag_size in sum mode ("make bag_size output deterministic").
        (sum, TensorValue::lazy(DType::I64, vec![bags], int(0)))
    };
    // Its sum fast path (float weights, no padding) leaves offset2bag empty.
    let fast_sum = mode == 0 && padding_idx < 0 && matches!(weight.dtype, DType::F32 | DType::F16 | DType::BF16);
    let offset2bag =
        if fast_sum { TensorValue::lazy(int_dtype, vec![SymExpr::Int(0)], int(0)) } else { ints(&offset2bag) };
    Ok(vec![out, offset2bag, ints(&bag_size), ints(&bag_size)])
}

/// Which bag each index belongs to, for the reductions of embedding_bag.
struct BagMembers {
    offset2bag: TensorValue,
    indices: TensorValue,
    padding_idx: i64,
}

impl BagMembers {
    fn index(&self, p: Affine) -> E {
        cast(self.indices.load(&[p]), DType::I64)
    }

    /// Index `p` lies in bag `b` (variable 0).
    fn holds(&self, p: Affine) -> E {
        binary(Prim::Eq, self.offset2bag.load(&[p]), var_value(0))
    }

    /// Index `p` counts in bag `b` (variable 0): it lies in it and is not padding.
    fn member(&self, p: Affine) -> E {
        let holds = self.holds(p.clone());
        if self.padding_idx < 0 {
            return holds;
        }
        binary(Prim::And, holds, binary(Prim::Ne, self.index(p), int(self.padding_idx)))
    }
}

/// Mode max, from the position `best` of each bag's and column's first largest value:
/// that value and the row it came from; an empty bag gives 0 and 0.
fn bag_max(
    lw: &mut Lowerer,
    bag: &BagMembers,
    weight: &TensorValue,
    best: &TensorValue,
    name: &str,
) -> (TensorValue, TensorValue) {
    let sizes = best.sizes.clone();
    let p = best.load(&vars(2));
    let found_bag = lw.load_at_indices(&bag.offset2bag, std::slice::from_ref(&p), name);
    let row = cast(lw.load_at_indices(&bag.indices, &[p], name), DType::I64);
    let mut found = binary(Prim::Eq, found_bag, var_value(0));
    if bag.padding_idx >= 0 {
        found = binary(Prim::And, found, binary(Prim::Ne, row.clone(), int(bag.padding_idx)));
    }
    let value = lw.load_at_indices(weight, &[row.clone(), var_value(1)], name);
    let zero = expr::constant(crate::ir::Scalar::I(0), weight.dtype);
    let out = TensorValue::lazy(weight.dtype, sizes.clone(), expr::select(found.clone(), value, zero));
    let max_indices = TensorValue::lazy(DType::I64, sizes, expr::select(found, row, int(0)));
    (out, max_indices)
}
