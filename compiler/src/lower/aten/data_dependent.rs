//! Operators whose results depend on the values of the data, not only on sizes:
//! `tensor.item()` (`_local_scalar_dense`) and `nonzero`.
//!
//! An integer `item()` and the row count of `nonzero` become data symbols (see
//! lower/symbols.rs): the program computes them into a one-element buffer, the library
//! binds the symbol (checked against export's range) and runs the code that depends on
//! it as a later stage. A float `item()` needs no symbol: it stays a 0-dim value that
//! its users broadcast.

use super::reduction::reduce;
use super::registry::LowerFn;
use crate::frontend::schema::{Argument, SymIntArgument};
use crate::ir::expr::{binary, cast, constant};
use crate::ir::{BufKind, ExternArg, ExternCall, Kernel, Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::checks::show;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] =
    &[("_local_scalar_dense.default", local_scalar_dense), ("nonzero.default", nonzero)];

/// `self.item()`: the one element of `self`.
fn local_scalar_dense(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let element = lw.only_element(&x, "item() needs a tensor of exactly one element")?;
    match a.node.outputs.as_slice() {
        [Argument::SymInt(SymIntArgument::Name(out))] => {
            if x.dtype.is_float() || x.dtype == DType::Bool {
                return Err(format!("export recorded an integer for item() of a {} tensor", x.dtype));
            }
            let recorded = lw.recorded_sym_output(out)?;
            let sym = lw.data_symbol(&recorded, &format!("SymInt '{out}'"))?;
            let buf = lw.prog.add_buffer(out.as_str(), DType::I64, vec![], BufKind::Scratch);
            lw.prog.kernels.push(Kernel::Pointwise { out: buf, ranges: vec![], body: cast(element, DType::I64) });
            lw.bind_data_symbol(sym, buf);
            Ok(vec![])
        }
        [Argument::SymFloat(v)] => {
            let out =
                v.get("as_name").and_then(|n| n.as_str()).ok_or_else(|| format!("unexpected SymFloat output {v}"))?;
            if !x.dtype.is_float() {
                return Err(format!("export recorded a float for item() of a {} tensor", x.dtype));
            }
            let value = TensorValue::lazy(x.dtype, vec![], element);
            lw.define_scalar(out, value);
            Ok(vec![])
        }
        other => Err(format!("item() as {other:?} is not supported (only int and float results)")),
    }
}

/// The coordinates of the nonzero elements of `self`, one row each, in row-major order:
/// a count (a reduction) binds the row count, then the support library's sequential scan
/// writes the rows.
fn nonzero(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let name = a.node_name();
    let Some(Argument::Tensor(out)) = a.node.outputs.first() else { return Err("nonzero has no tensor output".into()) };
    let (_, recorded, _) = lw.recorded(&out.name)?;
    let rows = match recorded.as_slice() {
        // An empty input: export knows there are no rows.
        [SymExpr::Int(0), cols]
            if *cols == SymExpr::Int(x.rank() as i64) && SymExpr::product(x.sizes.iter()) == SymExpr::Int(0) =>
        {
            let sizes = vec![SymExpr::Int(0), cols.clone()];
            return Ok(vec![TensorValue::lazy(DType::I64, sizes, constant(Scalar::I(0), DType::I64))]);
        }
        [rows, cols] if *cols == SymExpr::Int(x.rank() as i64) => lw.data_symbol(rows, "the row count of nonzero")?,
        _ => {
            return Err(format!(
                "export recorded shape [{}] for nonzero of a rank-{} tensor, expected [u, {}]",
                show(&recorded),
                x.rank(),
                x.rank()
            ))
        }
    };
    let at = vars(x.rank());
    let zero = constant(Scalar::I(0), x.dtype);
    let mask = TensorValue::lazy(DType::Bool, x.sizes.clone(), binary(Prim::Ne, x.load(&at), zero));
    let mask = lw.materialize(&mask, &format!("{name}_mask"));
    let all: Vec<usize> = (0..x.rank()).collect();
    let count = reduce(
        lw,
        &TensorValue::view_of(mask, DType::Bool, x.sizes.clone()),
        &all,
        false,
        ReduceOp::Sum,
        DType::I64,
        &format!("{name}_count"),
    );
    let (_, count) = lw.strided(&count, &format!("{name}_count"));
    lw.bind_data_symbol(rows, count.buf);
    let sizes = vec![SymExpr::Sym(rows), SymExpr::Int(x.rank() as i64)];
    let out_buf = lw.prog.add_buffer(name.as_str(), DType::I64, sizes.clone(), BufKind::Scratch);
    let args = vec![ExternArg::Buf(mask), ExternArg::Sizes(x.sizes.clone()), ExternArg::Size(SymExpr::Sym(rows))];
    lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall {
        name: aotc_abi::nonzero::SYMBOL,
        out: out_buf,
        args,
        flops: SymExpr::Int(0),
    })));
    Ok(vec![TensorValue::view_of(out_buf, DType::I64, sizes)])
}
