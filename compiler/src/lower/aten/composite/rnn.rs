//! Recurrent layers, unrolled over a static sequence length: the input gates of every
//! step in one GEMM per layer and direction, then per step a GEMM for the hidden gates
//! and one pointwise kernel for the new hidden state.

use super::R;
use crate::ir::expr::{binary, constant, unary, Affine, E};
use crate::ir::{Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::aten::index::concat;
use crate::lower::aten::linalg;
use crate::lower::aten::registry::LowerFn;
use crate::lower::checks::show;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;

pub const OPS: &[(&str, LowerFn)] = &[("gru.input", gru)];

/// (output, h_n) of a multi-layer, optionally bidirectional GRU with the weights `params`
/// (w_ih, w_hh[, b_ih, b_hh] per layer and direction, PyTorch's order).
fn gru(lw: &mut Lowerer, a: &Args) -> R {
    let (x, hx, params) = (a.tensor(lw, "input")?, a.tensor(lw, "hx")?, a.tensors(lw, "params")?);
    let layers = usize::try_from(a.int("num_layers")?).ok().filter(|&l| l > 0).ok_or("num_layers must be positive")?;
    let dropout = a.scalar("dropout")?.as_f64();
    if a.bool_or("train", false)? && dropout != 0.0 && layers > 1 {
        return Err(format!("a GRU in training mode with dropout {dropout} draws random numbers; aotc compiles deterministic programs only (export the model in eval mode)"));
    }
    let (bidirectional, batch_first) = (a.bool_or("bidirectional", false)?, a.bool_or("batch_first", false)?);
    if x.rank() != 3 || hx.rank() != 3 {
        return Err(format!(
            "a GRU needs a batched 3-D input and hidden state, got ranks {} and {} (an unbatched input is not supported)",
            x.rank(),
            hx.rank()
        ));
    }
    if !x.dtype.is_float() || params.iter().chain([&hx]).any(|p| p.dtype != x.dtype) {
        return Err(format!(
            "a GRU needs floating input, hidden state and weights of one dtype, got input {}",
            x.dtype
        ));
    }
    let dirs = if bidirectional { 2 } else { 1 };
    let per = if a.bool_or("has_biases", true)? { 4 } else { 2 };
    if params.len() != layers * dirs * per {
        return Err(format!(
            "{} GRU weights for {layers} layer(s) of {dirs} direction(s) with {per} each",
            params.len()
        ));
    }
    lw.require(
        hx.sizes[0].clone(),
        GuardOp::Eq,
        SymExpr::Int((layers * dirs) as i64),
        "hx has one state per layer and direction",
    )?;
    let name = a.node_name();
    let mut input = if batch_first { x.permute(&[1, 0, 2])? } else { x };
    let mut finals = vec![];
    for layer in 0..layers {
        let mut outputs = vec![];
        for dir in 0..dirs {
            let k = layer * dirs + dir;
            let h0 = hx.select(0, SymExpr::Int(k as i64));
            let (seq, last) = direction(
                lw,
                &input,
                &params[k * per..(k + 1) * per],
                h0,
                dir == 1,
                &format!("{name}.l{layer}d{dir}"),
            )?;
            outputs.push(seq);
            finals.push(last.unsqueeze(0));
        }
        input = if outputs.len() == 1 { outputs.swap_remove(0) } else { concat(lw, &outputs, 2, &name)? };
    }
    let output = if batch_first { input.permute(&[1, 0, 2])? } else { input };
    Ok(vec![output, concat(lw, &finals, 0, &format!("{name}.h_n"))?])
}

/// One direction of one layer over `x` [T, B, I] from `h0` [B, H]: (the hidden states
/// [T, B, H] in time order, the last one computed).
fn direction(
    lw: &mut Lowerer,
    x: &TensorValue,
    p: &[TensorValue],
    h0: TensorValue,
    reverse: bool,
    name: &str,
) -> Result<(TensorValue, TensorValue), String> {
    let (w_ih, w_hh, b_ih, b_hh) = (&p[0], &p[1], p.get(2), p.get(3));
    let steps =
        x.sizes[0].as_int().ok_or_else(|| format!("a GRU needs a static sequence length, got {}", x.sizes[0]))?;
    let hidden = h0.sizes[1].clone();
    let gates = SymExpr::mul([SymExpr::Int(3), hidden.clone()]);
    if w_ih.rank() != 2 || w_hh.rank() != 2 || w_hh.sizes[0] != gates || w_hh.sizes[1] != hidden {
        return Err(format!(
            "GRU weights of sizes [{}] and [{}] for hidden size {hidden}",
            show(&w_ih.sizes),
            show(&w_hh.sizes)
        ));
    }
    let rows = lw.reshape(x, &[SymExpr::mul([x.sizes[0].clone(), x.sizes[1].clone()]), x.sizes[2].clone()], name);
    let input_gates =
        linalg::emit(lw, &format!("{name}.gi"), &rows, &w_ih.permute(&[1, 0])?, b_ih.map(|b| (b, 1.0)), 1.0)?;
    let input_gates = lw.reshape(&input_gates, &[x.sizes[0].clone(), x.sizes[1].clone(), gates], name);
    let w_hh_t = w_hh.permute(&[1, 0])?;
    let mut h = h0;
    let mut states = vec![None; steps as usize];
    for s in 0..steps {
        let t = if reverse { steps - 1 - s } else { s };
        let step = format!("{name}.t{t}");
        let hidden_gates = linalg::emit(lw, &format!("{step}.gh"), &h, &w_hh_t, b_hh.map(|b| (b, 1.0)), 1.0)?;
        let gi = input_gates.select(0, SymExpr::Int(t));
        let body = cell(&gi, &hidden_gates, &h, &hidden);
        let next = lw.realize(&TensorValue::lazy(x.dtype, h.sizes.clone(), body), &step);
        states[t as usize] = Some(next.unsqueeze(0));
        h = next;
    }
    let states: Vec<TensorValue> = states.into_iter().flatten().collect();
    Ok((concat(lw, &states, 0, &format!("{name}.states"))?, h))
}

/// PyTorch's GRU cell at (batch, unit): r = σ(gi_r + gh_r), z = σ(gi_z + gh_z),
/// n = tanh(gi_n + r * gh_n), h' = (1 - z) * n + z * h, with the gates [r, z, n] side by
/// side in `gi` and `gh` [B, 3H].
fn cell(gi: &TensorValue, gh: &TensorValue, h: &TensorValue, hidden: &SymExpr) -> E {
    let idx = vars(2);
    let gate = |v: &TensorValue, k: i64| {
        let unit = idx[1].plus(&Affine::constant(SymExpr::mul([SymExpr::Int(k), hidden.clone()])));
        v.load(&[idx[0].clone(), unit])
    };
    let sum = |k: i64| binary(Prim::Add, gate(gi, k), gate(gh, k));
    let (r, z) = (unary(Prim::Sigmoid, sum(0)), unary(Prim::Sigmoid, sum(1)));
    let n = unary(Prim::Tanh, binary(Prim::Add, gate(gi, 2), binary(Prim::Mul, r, gate(gh, 2))));
    let one = constant(Scalar::F(1.0), h.dtype);
    binary(Prim::Add, binary(Prim::Mul, binary(Prim::Sub, one, z.clone()), n), binary(Prim::Mul, z, h.load(&idx)))
}
