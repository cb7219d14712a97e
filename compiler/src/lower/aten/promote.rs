//! Type promotion (torch.result_type) and broadcasting of pointwise operands: the part
//! of every pointwise lowering that is not the op itself.

use super::super::args::Args;
use super::super::tensor::{broadcast_shapes, vars, TensorValue};
use super::super::Lowerer;
use crate::ir::expr::{self, Affine, E};
use crate::ir::Scalar;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// A pointwise operand: a tensor or a python number.
#[derive(Clone)]
pub enum Operand {
    T(TensorValue),
    S(Scalar),
}

/// Reads argument `name` as a tensor or a number.
pub fn operand(lw: &Lowerer, args: &Args, name: &str) -> Result<Operand, String> {
    // A SymInt (a size used as a number) is an int64 value known at run time.
    if let Some(crate::frontend::schema::Argument::SymInt(s)) = args.get(name) {
        let size = lw.sym_arg(s)?;
        return Ok(Operand::T(TensorValue::lazy(DType::I64, vec![], expr::index_value(Affine::constant(size)))));
    }
    // A SymFloat (a float `item()`) is the 0-dim value its node defined.
    if let Some(crate::frontend::schema::Argument::SymFloat(v)) = args.get(name) {
        let n = v
            .get("as_name")
            .and_then(|n| n.as_str())
            .ok_or_else(|| format!("argument '{name}': unexpected SymFloat {v}"))?;
        return lw.value(n).map(Operand::T);
    }
    match args.opt_scalar(name) {
        Ok(Some(s)) => Ok(Operand::S(s)),
        _ => args.tensor(lw, name).map(Operand::T),
    }
}

fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        d if d.is_float() => 2,
        _ => 1,
    }
}

/// The wider of two dtypes of one category (torch.promote_types, for the dtypes aotc has).
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (category(a), category(b)) {
        (x, y) if x != y => {
            if x > y {
                a
            } else {
                b
            }
        }
        (2, 2) => match (a, b) {
            (F64, _) | (_, F64) => F64,
            // float16 with bfloat16 (neither holds the other) is float32, as in torch.
            _ => F32,
        },
        _ => match (a, b) {
            (U8, I8) | (I8, U8) => I16,
            _ => {
                if a.size() >= b.size() {
                    a
                } else {
                    b
                }
            }
        },
    }
}

/// torch.result_type: dimensioned tensors outrank 0-dim tensors, which outrank numbers,
/// unless a lower rank brings a higher category (bool < int < float).
pub fn result_type(ops: &[&Operand]) -> DType {
    let info: Vec<(u8, u8, Option<DType>, u8)> = ops
        .iter()
        .map(|o| match o {
            Operand::T(t) => (category(t.dtype), if t.rank() > 0 { 2 } else { 1 }, Some(t.dtype), 0),
            Operand::S(s) => {
                let c = match s {
                    Scalar::B(_) => 0,
                    Scalar::I(_) => 1,
                    Scalar::F(_) => 2,
                };
                (c, 0, None, c)
            }
        })
        .collect();
    let top = info.iter().map(|i| i.0).max().unwrap_or(2);
    for priority in [2u8, 1] {
        let ds: Vec<DType> = info.iter().filter(|i| i.1 == priority && i.0 == top).filter_map(|i| i.2).collect();
        if let Some(d) = ds.into_iter().reduce(promote_types) {
            return d;
        }
    }
    match top {
        0 => DType::Bool,
        1 => DType::I64,
        _ => DType::F32,
    }
}

/// Broadcast shape of the tensor operands.
pub fn out_shape(ops: &[&Operand]) -> Result<Vec<SymExpr>, String> {
    let shapes: Vec<&[SymExpr]> = ops
        .iter()
        .filter_map(|o| match o {
            Operand::T(t) => Some(&t.sizes[..]),
            _ => None,
        })
        .collect();
    broadcast_shapes(&shapes)
}

/// The operand's element at output index `index` (over `out` sizes), cast to `dtype`.
pub fn load_as(o: &Operand, out: &[SymExpr], index: &[Affine], dtype: DType) -> Result<E, String> {
    Ok(match o {
        Operand::S(s) => expr::constant(*s, dtype),
        Operand::T(t) => expr::cast(t.expand(out)?.load(index), dtype),
    })
}

/// Builds a lazy pointwise value: operands are broadcast and cast to `compute`, `body`
/// combines them, and the result has dtype `out`.
pub fn map(ops: &[&Operand], compute: DType, out: DType, body: impl Fn(&[E]) -> E) -> Result<TensorValue, String> {
    let sizes = out_shape(ops)?;
    let idx = vars(sizes.len());
    let loaded = ops.iter().map(|o| load_as(o, &sizes, &idx, compute)).collect::<Result<Vec<_>, _>>()?;
    Ok(TensorValue::lazy(out, sizes, body(&loaded)))
}

/// The float dtype an op like exp or true division computes in for this input dtype.
pub fn float_of(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
}

#[cfg(test)]
mod tests {
    use super::{float_of, promote_types, result_type, Operand};
    use crate::ir::{BufId, Scalar};
    use crate::lower::tensor::TensorValue;
    use aotc_abi::sym::SymExpr;
    use aotc_abi::DType::{self, *};
    use cranelift_codegen::entity::EntityRef;

    fn tensor(dtype: DType, rank: usize) -> Operand {
        Operand::T(TensorValue::view_of(BufId::new(0), dtype, vec![SymExpr::Int(2); rank]))
    }

    #[test]
    fn sixteen_bit_floats_promote_as_in_torch() {
        assert_eq!(promote_types(F16, F16), F16);
        assert_eq!(promote_types(BF16, BF16), BF16);
        assert_eq!(promote_types(F16, BF16), F32);
        assert_eq!(promote_types(BF16, F16), F32);
        assert_eq!(promote_types(F16, F32), F32);
        assert_eq!(promote_types(BF16, F64), F64);
        assert_eq!(promote_types(I64, F16), F16);
        assert_eq!(promote_types(Bool, BF16), BF16);
        assert_eq!(float_of(F16), F16);
        assert_eq!(float_of(BF16), BF16);
        assert_eq!(float_of(I32), F32);
    }

    #[test]
    fn sixteen_bit_tensors_outrank_numbers_and_zero_dim_tensors_of_their_category() {
        let (h, b) = (tensor(F16, 2), tensor(BF16, 1));
        assert_eq!(result_type(&[&h, &Operand::S(Scalar::F(0.5))]), F16);
        assert_eq!(result_type(&[&b, &tensor(F32, 0)]), BF16);
        assert_eq!(result_type(&[&h, &b]), F32);
        assert_eq!(result_type(&[&tensor(I64, 2), &tensor(F16, 0)]), F16);
        assert_eq!(result_type(&[&tensor(I64, 2), &Operand::S(Scalar::F(0.5))]), F32);
    }
}
