//! Primitives beyond the basic arithmetic of `expr.rs`: the rest of the math library
//! (inverse trigonometry, rounding divisions, classification...), per dtype.

use super::expr::Lanes;
use super::kernel::{Cx, R};
use crate::ir::Prim;
use aotc_abi::DType;
use cranelift_codegen::ir::Value;

pub fn unary(_cx: &mut Cx, op: Prim, _x: Value, d: DType, _lanes: Lanes) -> R<Value> {
    Err(format!("{} is not defined for {d}", op.name()))
}

pub fn binary(_cx: &mut Cx, op: Prim, _a: Value, _b: Value, d: DType, _lanes: Lanes) -> R<Value> {
    Err(format!("{} is not defined for {d}", op.name()))
}
