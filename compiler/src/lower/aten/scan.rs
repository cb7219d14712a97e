//! Scans (cumulative sums): element `i` along `dim` reduces the elements `0..=i`, a
//! Reduction over the whole dimension masked by `j <= i`. O(n^2) along `dim`, exact: the
//! same elements are added, in order.

use super::registry::LowerFn;
use super::scatter::{reduce_where, var_value};
use crate::ir::expr::{binary, cast, Affine};
use crate::ir::{Prim, ReduceOp};
use crate::lower::args::Args;
use crate::lower::tensor::{norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[("cumsum.default", cumsum)];

fn cumsum(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int("dim")?, x.rank())?;
    // torch sums integers and bools as int64 unless told otherwise.
    let dtype = a.opt_dtype("dtype")?.unwrap_or(if x.dtype.is_float() { x.dtype } else { DType::I64 });
    if x.rank() == 0 {
        return Ok(vec![TensorValue::lazy(dtype, vec![], cast(x.load(&[]), dtype))]);
    }
    let rank = x.rank();
    let mut source = vars(rank);
    source[dim] = Affine::var(rank);
    let upto = binary(Prim::Le, var_value(rank), var_value(dim));
    let value = cast(x.load(&source), dtype);
    Ok(vec![reduce_where(lw, &a.node_name(), &x.sizes, &[x.sizes[dim].clone()], ReduceOp::Sum, upto, value)])
}
