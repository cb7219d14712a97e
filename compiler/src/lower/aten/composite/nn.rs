//! Layers: linear and matrix products, convolutions, normalizations, softmax, pooling,
//! dropout, hardswish and scaled dot-product attention.

use super::{arg_or, converted, delegate, delegate_first, none, same, R};
use crate::frontend::schema::Argument;
use crate::ir::expr::{binary, cast, constant, index_value, select};
use crate::ir::{Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::aten::pool::window::{per_dim, taps, Windows};
use crate::lower::aten::registry::LowerFn;
use crate::lower::aten::{linalg, norm, reduction};
use crate::lower::checks::show;
use crate::lower::tensor::{broadcast_shapes, norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

pub const OPS: &[(&str, LowerFn)] = &[
    ("linear.default", linear),
    ("matmul.default", matmul),
    ("baddbmm.default", baddbmm),
    ("einsum.default", einsum),
    ("conv1d.default", |lw, a| convolution(lw, a, 1, false)),
    ("conv2d.default", |lw, a| convolution(lw, a, 2, false)),
    ("conv3d.default", |lw, a| convolution(lw, a, 3, false)),
    ("conv1d.padding", |lw, a| convolution(lw, a, 1, false)),
    ("conv2d.padding", |lw, a| convolution(lw, a, 2, false)),
    ("conv3d.padding", |lw, a| convolution(lw, a, 3, false)),
    ("conv_transpose1d.default", |lw, a| convolution(lw, a, 1, true)),
    ("conv_transpose2d.input", |lw, a| convolution(lw, a, 2, true)),
    ("conv_transpose3d.input", |lw, a| convolution(lw, a, 3, true)),
    ("batch_norm.default", batch_norm),
    ("instance_norm.default", instance_norm),
    ("layer_norm.default", layer_norm),
    ("group_norm.default", norm::group_norm_of_input),
    ("softmax.int", |lw, a| softmax(lw, a, false)),
    ("log_softmax.int", |lw, a| softmax(lw, a, true)),
    ("max_pool2d.default", |lw, a| max_pool(lw, a, "max_pool2d_with_indices.default")),
    ("max_pool3d.default", |lw, a| max_pool(lw, a, "max_pool3d_with_indices.default")),
    ("adaptive_avg_pool2d.default", |lw, a| adaptive_avg_pool(lw, a, "_adaptive_avg_pool2d.default", 2)),
    ("adaptive_avg_pool3d.default", |lw, a| adaptive_avg_pool(lw, a, "_adaptive_avg_pool3d.default", 3)),
    ("dropout.default", dropout),
    ("hardswish.default", hardswish),
    ("im2col.default", im2col),
    ("scaled_dot_product_attention.default", attention),
];

/// `x` seen as a matrix of its last dimension's rows ([prod(leading), last]) and its
/// leading sizes.
fn as_rows(lw: &mut Lowerer, x: &TensorValue, name: &str) -> (TensorValue, Vec<SymExpr>) {
    let lead = x.sizes[..x.rank() - 1].to_vec();
    let rows = [SymExpr::product(lead.iter()), x.sizes[x.rank() - 1].clone()];
    (lw.reshape(x, &rows, &format!("{name}.rows")), lead)
}

/// `input @ weight^T + bias`: addmm's GEMM (the passes pack the weight and fuse the bias)
/// on the input's rows.
fn linear(lw: &mut Lowerer, a: &Args) -> R {
    let (x, w, bias) = (a.tensor(lw, "input")?, a.tensor(lw, "weight")?, a.opt_tensor(lw, "bias")?);
    if w.rank() != 2 || x.rank() == 0 {
        return Err(format!(
            "linear expects a 2-D weight and an input of rank >= 1, got ranks {} and {}",
            w.rank(),
            x.rank()
        ));
    }
    if let Some(b) = bias.as_ref().filter(|b| b.dtype != x.dtype || b.rank() > 1) {
        return Err(format!("bias must be a {} tensor of rank <= 1, got {}[{}]", x.dtype, b.dtype, show(&b.sizes)));
    }
    let name = a.node_name();
    let (rows, mut sizes) = as_rows(lw, &x, &name);
    let y = linalg::emit(lw, &name, &rows, &w.permute(&[1, 0])?, bias.as_ref().map(|b| (b, 1.0)), 1.0)?;
    sizes.push(w.sizes[0].clone());
    Ok(vec![lw.reshape(&y, &sizes, &name)])
}

/// torch.matmul: vector operands get a unit dimension (removed from the result), a
/// matrix right operand takes the left one's rows in one GEMM, and otherwise the batch
/// dimensions broadcast into one batched GEMM.
fn matmul(lw: &mut Lowerer, a: &Args) -> R {
    let (x, y) = (a.tensor(lw, "self")?, a.tensor(lw, "other")?);
    let name = a.node_name();
    let (rx, ry) = (x.rank(), y.rank());
    if rx == 0 || ry == 0 {
        return Err(format!("matmul needs operands of rank >= 1, got ranks {rx} and {ry}"));
    }
    let y2 = if ry == 1 { y.unsqueeze(1) } else { y.clone() };
    if y2.rank() == 2 {
        // [..., k] @ [k, m]: the left operand's rows times the matrix.
        let (rows, mut sizes) = as_rows(lw, &x, &name);
        let product = linalg::emit(lw, &name, &rows, &y2, None, 1.0)?;
        if ry == 2 {
            sizes.push(y.sizes[1].clone());
        }
        return Ok(vec![lw.reshape(&product, &sizes, &name)]);
    }
    let x2 = if rx == 1 { x.unsqueeze(0) } else { x.clone() };
    let batch = broadcast_shapes(&[&x2.sizes[..x2.rank() - 2], &y2.sizes[..y2.rank() - 2]])?;
    let flat = |lw: &mut Lowerer, t: &TensorValue, what: &str| -> Result<TensorValue, String> {
        let matrix = &t.sizes[t.rank() - 2..];
        let full: Vec<SymExpr> = batch.iter().chain(matrix).cloned().collect();
        let sizes = [SymExpr::product(batch.iter()), matrix[0].clone(), matrix[1].clone()];
        Ok(lw.reshape(&t.expand(&full)?, &sizes, &format!("{name}.{what}")))
    };
    let (xb, yb) = (flat(lw, &x2, "lhs")?, flat(lw, &y2, "rhs")?);
    let product = linalg::emit(lw, &name, &xb, &yb, None, 1.0)?;
    let mut sizes = batch.clone();
    if rx > 1 {
        sizes.push(x.sizes[rx - 2].clone());
    }
    sizes.push(y.sizes[ry - 1].clone());
    Ok(vec![lw.reshape(&product, &sizes, &name)])
}

/// `beta * self + alpha * (batch1 @ batch2)`.
fn baddbmm(lw: &mut Lowerer, a: &Args) -> R {
    let (c, x, y) = (a.tensor(lw, "self")?, a.tensor(lw, "batch1")?, a.tensor(lw, "batch2")?);
    if x.rank() != 3 || y.rank() != 3 {
        return Err(format!("baddbmm expects 3-D batches, got ranks {} and {}", x.rank(), y.rank()));
    }
    lw.require(x.sizes[0].clone(), GuardOp::Eq, y.sizes[0].clone(), "the batches have one size")?;
    let beta = a.opt_scalar("beta")?.map_or(1.0, Scalar::as_f64);
    let alpha = a.opt_scalar("alpha")?.map_or(1.0, Scalar::as_f64);
    Ok(vec![linalg::emit(lw, &a.node_name(), &x, &y, Some((&c, beta)), alpha)?])
}

/// torch.einsum without ellipsis: the product of the operands' elements at each
/// assignment of the equation's letters, summed over the letters the output leaves out
/// (implicit output: the letters used once, in alphabetical order).
fn einsum(lw: &mut Lowerer, a: &Args) -> R {
    let equation: String = a.string_or("equation", "")?.chars().filter(|c| !c.is_whitespace()).collect();
    let operands = a.tensors(lw, "tensors")?;
    if equation.contains('.') {
        return Err(format!("einsum with an ellipsis ('{equation}') is not supported"));
    }
    let (inputs, output) = match equation.split_once("->") {
        Some((i, o)) => (i, o.to_string()),
        None => {
            let mut once: Vec<char> =
                equation.chars().filter(|&c| c != ',' && equation.matches(c).count() == 1).collect();
            once.sort_unstable();
            (equation.as_str(), once.into_iter().collect())
        }
    };
    let terms: Vec<&str> = inputs.split(',').collect();
    let letters_ok = |t: &str| t.chars().all(|c| c.is_ascii_alphabetic());
    if terms.len() != operands.len() || !terms.iter().all(|t| letters_ok(t)) || !letters_ok(&output) {
        return Err(format!("einsum equation '{equation}' does not fit {} operand(s) of letters", operands.len()));
    }
    let Some(first) = operands.first() else { return Err("einsum needs at least one operand".into()) };
    if operands.iter().any(|t| t.dtype != first.dtype) {
        return Err("einsum needs operands of one dtype".into());
    }
    // Letters in variable order: the output's, then the summed ones; each one's size.
    let mut letters: Vec<char> = output.chars().collect();
    let mut sizes: Vec<Option<SymExpr>> = vec![None; letters.len()];
    for (term, t) in terms.iter().zip(&operands) {
        if term.len() != t.rank() {
            return Err(format!("einsum term '{term}' names {} dimensions of a rank-{} operand", term.len(), t.rank()));
        }
        for (c, size) in term.chars().zip(&t.sizes) {
            let at = letters.iter().position(|&l| l == c).unwrap_or_else(|| {
                letters.push(c);
                sizes.push(None);
                letters.len() - 1
            });
            match &sizes[at] {
                Some(known) => {
                    lw.require(size.clone(), GuardOp::Eq, known.clone(), "einsum's letters have one size")?
                }
                None => sizes[at] = Some(size.clone()),
            }
        }
    }
    let ranges: Vec<SymExpr> = sizes
        .into_iter()
        .zip(&letters)
        .map(|(s, c)| s.ok_or_else(|| format!("einsum's output letter '{c}' is in no operand")))
        .collect::<Result<_, _>>()?;
    let idx = vars(letters.len());
    let var_of = |c: char| idx[letters.iter().position(|&l| l == c).unwrap_or(0)].clone();
    let body = terms
        .iter()
        .zip(&operands)
        .map(|(term, t)| t.load(&term.chars().map(var_of).collect::<Vec<_>>()))
        .reduce(|p, q| binary(Prim::Mul, p, q))
        .ok_or("einsum needs at least one operand")?;
    let products = TensorValue::lazy(first.dtype, ranges, body);
    let summed: Vec<usize> = (output.len()..letters.len()).collect();
    if summed.is_empty() {
        return Ok(vec![products]);
    }
    Ok(vec![reduction::reduce(lw, &products, &summed, false, ReduceOp::Sum, first.dtype, &a.node_name())])
}

/// conv{1,2,3}d (padding as sizes, or as "valid" / "same") and conv_transpose{1,2,3}d:
/// `convolution` with their defaults, so the native convolution (and the batch norm,
/// activation and pool folding) applies.
fn convolution(lw: &mut Lowerer, a: &Args, nd: usize, transposed: bool) -> R {
    let x = a.tensor(lw, "input")?;
    if x.rank() != nd + 2 {
        return Err(format!(
            "a {nd}-D convolution needs a batched input of rank {}, got rank {} (an unbatched input is not supported: add the batch dimension)",
            nd + 2,
            x.rank()
        ));
    }
    let (ones, zeros) = (Argument::Ints(vec![1]), Argument::Ints(vec![0]));
    let mut args = same(a, &["input", "weight"]);
    args.extend([
        ("bias", arg_or(a, "bias", none())),
        ("stride", arg_or(a, "stride", ones.clone())),
        ("padding", padding(lw, a, nd)?),
        ("dilation", arg_or(a, "dilation", ones)),
        ("transposed", Argument::Bool(transposed)),
        ("output_padding", arg_or(a, "output_padding", zeros)),
        ("groups", arg_or(a, "groups", Argument::Int(1))),
    ]);
    delegate(lw, a, "convolution.default", args)
}

/// A convolution's padding: its sizes, or "valid" (none) or "same" (the output keeps
/// the input's size at stride 1: half of `dilation * (kernel - 1)` on each side).
fn padding(lw: &Lowerer, a: &Args, nd: usize) -> Result<Argument, String> {
    match a.get("padding") {
        None => Ok(Argument::Ints(vec![0])),
        Some(Argument::String(mode)) if mode == "valid" => Ok(Argument::Ints(vec![0])),
        Some(Argument::String(mode)) if mode == "same" => {
            let weight = a.tensor(lw, "weight")?;
            let dilation = per_dim(a.opt_ints("dilation")?.unwrap_or(vec![1]), nd, "dilation")?;
            let sides = weight.sizes.iter().skip(2).zip(dilation).map(|(k, d)| {
                let k = k.as_int().ok_or_else(|| format!("padding='same' needs a static kernel size, got {k}"))?;
                match d * (k - 1) {
                    total if total % 2 == 0 => Ok(total / 2),
                    _ => Err(format!("padding='same' with kernel size {k} and dilation {d} pads one side more than the other, which is not supported")),
                }
            });
            Ok(Argument::Ints(sides.collect::<Result<_, String>>()?))
        }
        Some(Argument::String(mode)) => Err(format!("padding must be 'valid' or 'same', got '{mode}'")),
        Some(sizes) => Ok(sizes.clone()),
    }
}

/// Whether the node passes running statistics (a batch or instance norm).
fn has_running_stats(a: &Args) -> bool {
    ["running_mean", "running_var"].iter().any(|n| a.get(n).is_some_and(|s| !matches!(s, Argument::None(_))))
}

/// Inference (running statistics): `_native_batch_norm_legit_no_training`, which folds
/// into the convolution before it. Training without running statistics (a BatchNorm
/// with `track_running_stats=False`) normalizes by the batch's own.
fn batch_norm(lw: &mut Lowerer, a: &Args) -> R {
    match (a.bool_or("training", false)?, has_running_stats(a)) {
        (false, _) => by_running_stats(lw, a),
        (true, false) => delegate_first(
            lw,
            a,
            "_native_batch_norm_legit.no_stats",
            same(a, &["input", "weight", "bias", "training", "momentum", "eps"]),
        ),
        (true, true) => Err(
            "batch_norm in training mode updates its running statistics; export the model in eval mode (model.eval())"
                .into(),
        ),
    }
}

/// Normalization per channel by the running statistics (batch norm's inference).
fn by_running_stats(lw: &mut Lowerer, a: &Args) -> R {
    delegate_first(
        lw,
        a,
        "_native_batch_norm_legit_no_training.default",
        same(a, &["input", "weight", "bias", "running_mean", "running_var", "momentum", "eps"]),
    )
}

/// With the running statistics (`use_input_stats` false), batch norm's inference; with
/// each sample's own statistics and none to update, a group norm of one channel per group.
fn instance_norm(lw: &mut Lowerer, a: &Args) -> R {
    match (a.bool_or("use_input_stats", true)?, has_running_stats(a)) {
        (false, _) => by_running_stats(lw, a),
        (true, false) => {
            let x = a.tensor(lw, "input")?;
            let channels = x.sizes.get(1).and_then(SymExpr::as_int);
            let channels =
                channels.ok_or_else(|| format!("instance_norm needs a static channel count, got [{}]", show(&x.sizes)))?;
            let mut args = same(a, &["input", "weight", "bias", "eps"]);
            args.push(("num_groups", Argument::Int(channels)));
            delegate(lw, a, "group_norm.default", args)
        }
        (true, true) => Err("instance_norm with input statistics updates its running statistics; export the model in eval mode (model.eval())".into()),
    }
}

/// `native_layer_norm`'s output (the row layer norm when the statistics are unread).
fn layer_norm(lw: &mut Lowerer, a: &Args) -> R {
    let mut args = same(a, &["input", "normalized_shape"]);
    args.extend([
        ("weight", arg_or(a, "weight", none())),
        ("bias", arg_or(a, "bias", none())),
        ("eps", arg_or(a, "eps", Argument::Float(1e-5))),
    ]);
    delegate_first(lw, a, "native_layer_norm.default", args)
}

/// softmax.int / log_softmax.int: `_softmax` of the input, converted to `dtype` first
/// when one is given.
fn softmax(lw: &mut Lowerer, a: &Args, log: bool) -> R {
    let x = a.tensor(lw, "self")?;
    let x = match a.opt_dtype("dtype")? {
        Some(d) => converted(&x, d),
        None => x,
    };
    let dim = norm_dim(a.int("dim")?, x.rank())?;
    let mode = if log { aotc_abi::softmax::LOG_SOFTMAX } else { aotc_abi::softmax::SOFTMAX };
    Ok(vec![reduction::softmax_of(lw, &x, dim, mode, &a.node_name())?])
}

/// max_pool{2,3}d: the pool with indices, whose indices nothing reads (the native pool).
fn max_pool(lw: &mut Lowerer, a: &Args, op: &str) -> R {
    delegate_first(lw, a, op, same(a, &["self", "kernel_size", "stride", "padding", "dilation", "ceil_mode"]))
}

/// adaptive_avg_pool{2,3}d: to a single position, the mean over the spatial dimensions
/// (as torch decomposes it: it fuses with what computes its input), else the Core pool.
fn adaptive_avg_pool(lw: &mut Lowerer, a: &Args, op: &str, nd: i64) -> R {
    let global = a.sym_ints(lw, "output_size")?.iter().all(|s| *s == SymExpr::Int(1));
    if !global {
        return delegate(lw, a, op, same(a, &["self", "output_size"]));
    }
    let mut args = same(a, &["self"]);
    args.extend([("dim", Argument::Ints((-nd..0).collect())), ("keepdim", Argument::Bool(true))]);
    delegate(lw, a, "mean.dim", args)
}

/// The identity in evaluation mode (or with p = 0); training mode draws random numbers.
fn dropout(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "input")?;
    let p = a.scalar("p")?.as_f64();
    if a.bool_or("train", true)? && p != 0.0 {
        return Err(format!(
            "dropout in training mode (p = {p}) draws random numbers; aotc compiles deterministic programs only (export the model in eval mode)"
        ));
    }
    Ok(vec![x])
}

/// `x * min(max(x + 3, 0), 6) / 6`, the form the convolution epilogue recognizes.
fn hardswish(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    if !x.dtype.is_float() {
        return Err(format!("hardswish is defined for floating dtypes only, not {}", x.dtype));
    }
    let v = x.load(&vars(x.rank()));
    let c = |k: f64| constant(Scalar::F(k), x.dtype);
    let gate = binary(Prim::Min, binary(Prim::Max, binary(Prim::Add, v.clone(), c(3.0)), c(0.0)), c(6.0));
    let body = binary(Prim::Div, binary(Prim::Mul, v, gate), c(6.0));
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), body)])
}

/// nn.Unfold: the 2-D windows of `self` [N, C, H, W] (or [C, H, W]) as columns,
/// [N, C * kh * kw, windows], zeros where a window reads the padding.
fn im2col(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let unbatched = x.rank() == 3;
    let batched = match x.rank() {
        4 => x,
        3 => x.unsqueeze(0),
        r => return Err(format!("im2col needs an input of rank 3 or 4, got rank {r}")),
    };
    let list = |name: &str| a.ints(name).and_then(|v| per_dim(v, 2, name));
    let kernel = list("kernel_size")?.into_iter().map(SymExpr::Int).collect();
    let name = a.node_name();
    let w = Windows::new(lw, &batched.sizes[2..], kernel, list("stride")?, list("padding")?, list("dilation")?, false)?;
    // taps [N, C, oh, ow, kh, kw] seen as [N, C, kh, kw, oh, ow].
    let columns = taps(lw, &batched, &w, constant(Scalar::I(0), batched.dtype), &name).permute(&[0, 1, 4, 5, 2, 3])?;
    let depth = SymExpr::mul([batched.sizes[1].clone()].into_iter().chain(w.kernel.iter().cloned()));
    let sizes = [batched.sizes[0].clone(), depth, SymExpr::product(w.output.iter())];
    let out = lw.reshape(&columns, &sizes, &name);
    Ok(vec![if unbatched { out.squeeze(&[0]) } else { out }])
}

/// `softmax(query @ key^T * scale + mask) @ value` over the trailing [L, E] x [S, E]
/// matrices, the leading dimensions broadcast as batches: one batched GEMM for the
/// scores, the row softmax over the masked scores, one batched GEMM for the output. The
/// mask is boolean (false masks out) or added; `is_causal` masks key positions after
/// the query's. With `enable_gqa`, each key/value head serves `Hq / Hkv` query heads.
fn attention(lw: &mut Lowerer, a: &Args) -> R {
    let (q, k, v) = (a.tensor(lw, "query")?, a.tensor(lw, "key")?, a.tensor(lw, "value")?);
    let mask = a.opt_tensor(lw, "attn_mask")?;
    let dropout = a.opt_scalar("dropout_p")?.map_or(0.0, Scalar::as_f64);
    if dropout != 0.0 {
        return Err(format!("dropout_p = {dropout} draws random numbers; aotc compiles deterministic programs only (pass dropout_p=0 in eval mode)"));
    }
    let rank = q.rank();
    if rank < 2 || k.rank() != rank || v.rank() != rank {
        return Err(format!("query, key and value need one rank >= 2, got {}, {} and {}", rank, k.rank(), v.rank()));
    }
    if !q.dtype.is_float() || k.dtype != q.dtype || v.dtype != q.dtype {
        return Err(format!(
            "query, key and value need one floating dtype, got {}, {} and {}",
            q.dtype, k.dtype, v.dtype
        ));
    }
    let name = a.node_name();
    let (l, e) = (q.sizes[rank - 2].clone(), q.sizes[rank - 1].clone());
    lw.require(k.sizes[rank - 1].clone(), GuardOp::Eq, e.clone(), "key has the query's embedding size")?;
    lw.require(v.sizes[rank - 2].clone(), GuardOp::Eq, k.sizes[rank - 2].clone(), "value has one row per key")?;
    let (k, v) = if a.bool_or("enable_gqa", false)? && rank >= 3 {
        (shared_heads(lw, &k, &q, &format!("{name}.key"))?, shared_heads(lw, &v, &q, &format!("{name}.value"))?)
    } else {
        (k, v)
    };
    let scale = match a.opt_scalar("scale")? {
        Some(s) => s.as_f64(),
        None => {
            1.0 / (e.as_int().ok_or_else(|| format!("the default scale needs a static embedding size, got {e}"))?
                as f64)
                .sqrt()
        }
    };
    let batch = broadcast_shapes(&[&q.sizes[..rank - 2], &k.sizes[..rank - 2], &v.sizes[..rank - 2]])?;
    let flat = |lw: &mut Lowerer, t: &TensorValue, what: &str| -> Result<TensorValue, String> {
        let matrix = &t.sizes[rank - 2..];
        let full: Vec<SymExpr> = batch.iter().chain(matrix).cloned().collect();
        let sizes = [SymExpr::product(batch.iter()), matrix[0].clone(), matrix[1].clone()];
        Ok(lw.reshape(&t.expand(&full)?, &sizes, &format!("{name}.{what}")))
    };
    let (q3, k3, v3) = (flat(lw, &q, "query")?, flat(lw, &k, "key")?, flat(lw, &v, "value")?);
    let scores = linalg::emit(lw, &format!("{name}.scores"), &q3, &k3.permute(&[0, 2, 1])?, None, scale)?;
    let score_sizes: Vec<SymExpr> = batch.iter().cloned().chain([l.clone(), k3.sizes[1].clone()]).collect();
    let scores = lw.reshape(&scores, &score_sizes, &format!("{name}.scores"));
    let masked = masked_scores(&scores, mask.as_ref(), a.bool_or("is_causal", false)?)?;
    let weights =
        reduction::softmax_of(lw, &masked, rank - 1, aotc_abi::softmax::SAFE_SOFTMAX, &format!("{name}.weights"))?;
    let weights =
        lw.reshape(&weights, &q3.sizes[..2].iter().cloned().chain([k3.sizes[1].clone()]).collect::<Vec<_>>(), &name);
    let out = linalg::emit(lw, &name, &weights, &v3, None, 1.0)?;
    let sizes: Vec<SymExpr> = batch.into_iter().chain([l, v3.sizes[2].clone()]).collect();
    Ok(vec![lw.reshape(&out, &sizes, &name)])
}

/// Grouped-query attention: key or value `t` [..., Hkv, S, D] with each head repeated
/// for the `Hq / Hkv` query heads it serves, [..., Hq, S, D].
fn shared_heads(lw: &mut Lowerer, t: &TensorValue, q: &TensorValue, name: &str) -> Result<TensorValue, String> {
    let h = t.rank() - 3;
    let (hq, hkv) = (&q.sizes[h], &t.sizes[h]);
    if hq == hkv {
        return Ok(t.clone());
    }
    let (Some(nq), Some(nkv)) = (hq.as_int(), hkv.as_int()) else {
        return Err(format!("grouped-query attention needs static head counts, got {hq} and {hkv}"));
    };
    if nkv <= 0 || nq % nkv != 0 {
        return Err(format!(
            "grouped-query attention needs the key/value heads ({nkv}) to divide the query heads ({nq})"
        ));
    }
    let mut repeated = t.sizes.clone();
    repeated.insert(h + 1, SymExpr::Int(nq / nkv));
    let expanded = t.unsqueeze(h + 1).expand(&repeated)?;
    let mut sizes = t.sizes.clone();
    sizes[h] = hq.clone();
    Ok(lw.reshape(&expanded, &sizes, name))
}

/// The attention scores with the mask applied: -inf where a boolean mask is false or a
/// key position follows the query's (`causal`), plus a floating mask.
fn masked_scores(scores: &TensorValue, mask: Option<&TensorValue>, causal: bool) -> Result<TensorValue, String> {
    let (d, rank) = (scores.dtype, scores.rank());
    let idx = vars(rank);
    let minus_inf = constant(Scalar::F(f64::NEG_INFINITY), d);
    let mut body = scores.load(&idx);
    if let Some(m) = mask {
        let at = m.expand(&scores.sizes)?.load(&idx);
        body = match m.dtype {
            DType::Bool => select(at, body, minus_inf.clone()),
            md if md.is_float() => binary(Prim::Add, body, cast(at, d)),
            md => return Err(format!("attn_mask must be bool or floating, got {md}")),
        };
    }
    if causal {
        let (i, j) = (index_value(idx[rank - 2].clone()), index_value(idx[rank - 1].clone()));
        body = select(binary(Prim::Le, j, i), body, minus_inf);
    }
    Ok(TensorValue::lazy(d, scores.sizes.clone(), body))
}
