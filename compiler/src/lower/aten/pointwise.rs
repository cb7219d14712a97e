//! Elementwise operators: unary math, arithmetic with alpha, comparisons, logic,
//! where/clamp, activations and dtype conversion; divisions and remainders are in
//! [`division`].

mod division;

use super::conv::epilogue::{fuse_relu, fuse_residual};
use super::promote::{float_of, map, operand, result_type, Operand};
use super::registry::LowerFn;
use crate::ir::expr::{binary, cast, constant, select, unary, E};
use crate::ir::{BufKind, ExternArg, ExternCall, Kernel, Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::{contiguous_strides, Repr, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::internal_symbols::GELU;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("abs.default", |lw, a| same_type(lw, a, |x| unary(Prim::Abs, x.clone()))),
    ("neg.default", |lw, a| same_type(lw, a, |x| unary(Prim::Neg, x.clone()))),
    ("relu.default", relu),
    ("floor.default", |lw, a| same_type(lw, a, |x| round_like(Prim::Floor, x))),
    ("ceil.default", |lw, a| same_type(lw, a, |x| round_like(Prim::Ceil, x))),
    ("trunc.default", |lw, a| same_type(lw, a, |x| round_like(Prim::Trunc, x))),
    ("round.default", |lw, a| same_type(lw, a, |x| round_like(Prim::Round, x))),
    ("exp.default", |lw, a| float_unary(lw, a, Prim::Exp)),
    ("expm1.default", |lw, a| float_unary(lw, a, Prim::Expm1)),
    ("log.default", |lw, a| float_unary(lw, a, Prim::Log)),
    ("log1p.default", |lw, a| float_unary(lw, a, Prim::Log1p)),
    ("sqrt.default", |lw, a| float_unary(lw, a, Prim::Sqrt)),
    ("rsqrt.default", |lw, a| float_unary(lw, a, Prim::Rsqrt)),
    ("reciprocal.default", |lw, a| float_unary(lw, a, Prim::Recip)),
    ("sin.default", |lw, a| float_unary(lw, a, Prim::Sin)),
    ("cos.default", |lw, a| float_unary(lw, a, Prim::Cos)),
    ("tanh.default", |lw, a| float_unary(lw, a, Prim::Tanh)),
    ("erf.default", |lw, a| float_unary(lw, a, Prim::Erf)),
    ("tan.default", |lw, a| float_unary(lw, a, Prim::Tan)),
    ("asin.default", |lw, a| float_unary(lw, a, Prim::Asin)),
    ("acos.default", |lw, a| float_unary(lw, a, Prim::Acos)),
    ("atan.default", |lw, a| float_unary(lw, a, Prim::Atan)),
    ("sinh.default", |lw, a| float_unary(lw, a, Prim::Sinh)),
    ("cosh.default", |lw, a| float_unary(lw, a, Prim::Cosh)),
    ("asinh.default", |lw, a| float_unary(lw, a, Prim::Asinh)),
    ("acosh.default", |lw, a| float_unary(lw, a, Prim::Acosh)),
    ("atanh.default", |lw, a| float_unary(lw, a, Prim::Atanh)),
    ("log2.default", |lw, a| float_unary(lw, a, Prim::Log2)),
    ("log10.default", |lw, a| float_unary(lw, a, Prim::Log10)),
    ("atan2.default", |lw, a| float_binary(lw, a, Prim::Atan2)),
    ("sigmoid.default", |lw, a| float_unary(lw, a, Prim::Sigmoid)),
    ("sign.default", |lw, a| same_type(lw, a, sign)),
    ("isnan.default", |lw, a| float_class(lw, a, |x| binary(Prim::Ne, x.clone(), x.clone()))),
    ("isinf.default", |lw, a| {
        float_class(lw, a, |x| {
            binary(Prim::Eq, unary(Prim::Abs, x.clone()), constant(Scalar::F(f64::INFINITY), x.dtype))
        })
    }),
    ("silu.default", |lw, a| float_map(lw, a, |x| binary(Prim::Mul, x.clone(), unary(Prim::Sigmoid, x.clone())))),
    ("gelu.default", gelu),
    ("logical_not.default", |lw, a| bool_map(lw, a, &["self"], |x| unary(Prim::Not, x[0].clone()))),
    ("logical_and.default", |lw, a| {
        bool_map(lw, a, &["self", "other"], |x| binary(Prim::And, x[0].clone(), x[1].clone()))
    }),
    ("logical_or.default", |lw, a| {
        bool_map(lw, a, &["self", "other"], |x| binary(Prim::Or, x[0].clone(), x[1].clone()))
    }),
    ("logical_xor.default", |lw, a| {
        bool_map(lw, a, &["self", "other"], |x| binary(Prim::Ne, x[0].clone(), x[1].clone()))
    }),
    ("bitwise_not.default", |lw, a| {
        same_type(lw, a, |x| {
            if x.dtype == DType::Bool {
                unary(Prim::Not, x.clone())
            } else {
                unary(Prim::BitNot, x.clone())
            }
        })
    }),
    ("bitwise_and.Tensor", |lw, a| arith(lw, a, Prim::BitAnd)),
    ("bitwise_or.Tensor", |lw, a| arith(lw, a, Prim::BitOr)),
    ("bitwise_xor.Tensor", |lw, a| arith(lw, a, Prim::BitXor)),
    ("bitwise_and.Scalar", |lw, a| arith(lw, a, Prim::BitAnd)),
    ("bitwise_or.Scalar", |lw, a| arith(lw, a, Prim::BitOr)),
    ("bitwise_xor.Scalar", |lw, a| arith(lw, a, Prim::BitXor)),
    ("add.Tensor", |lw, a| add_sub(lw, a, Prim::Add)),
    ("add.Scalar", |lw, a| add_sub(lw, a, Prim::Add)),
    ("sub.Tensor", |lw, a| add_sub(lw, a, Prim::Sub)),
    ("sub.Scalar", |lw, a| add_sub(lw, a, Prim::Sub)),
    ("mul.Tensor", |lw, a| arith(lw, a, Prim::Mul)),
    ("mul.Scalar", |lw, a| arith(lw, a, Prim::Mul)),
    ("maximum.default", |lw, a| arith(lw, a, Prim::Max)),
    ("minimum.default", |lw, a| arith(lw, a, Prim::Min)),
    ("div.Tensor", division::div),
    ("div.Scalar", division::div),
    ("div.Tensor_mode", division::div),
    ("div.Scalar_mode", division::div),
    ("remainder.Tensor", division::remainder),
    ("remainder.Scalar", division::remainder),
    ("fmod.Tensor", division::fmod),
    ("fmod.Scalar", division::fmod),
    ("pow.Tensor_Scalar", pow),
    ("pow.Tensor_Tensor", pow),
    ("pow.Scalar", pow),
    ("eq.Tensor", |lw, a| compare(lw, a, Prim::Eq)),
    ("eq.Scalar", |lw, a| compare(lw, a, Prim::Eq)),
    ("ne.Tensor", |lw, a| compare(lw, a, Prim::Ne)),
    ("ne.Scalar", |lw, a| compare(lw, a, Prim::Ne)),
    ("lt.Tensor", |lw, a| compare(lw, a, Prim::Lt)),
    ("lt.Scalar", |lw, a| compare(lw, a, Prim::Lt)),
    ("le.Tensor", |lw, a| compare(lw, a, Prim::Le)),
    ("le.Scalar", |lw, a| compare(lw, a, Prim::Le)),
    ("gt.Tensor", |lw, a| compare(lw, a, Prim::Gt)),
    ("gt.Scalar", |lw, a| compare(lw, a, Prim::Gt)),
    ("ge.Tensor", |lw, a| compare(lw, a, Prim::Ge)),
    ("ge.Scalar", |lw, a| compare(lw, a, Prim::Ge)),
    ("where.self", where_self),
    ("clamp.default", clamp),
    ("clamp.Tensor", clamp),
    ("_to_copy.default", to_copy),
    ("copy.default", copy),
    ("native_dropout.default", native_dropout),
    ("clone.default", |lw, a| Ok(vec![a.tensor(lw, "self")?])),
    ("alias.default", |lw, a| Ok(vec![a.tensor(lw, "self")?])),
    ("lift_fresh_copy.default", |lw, a| Ok(vec![a.tensor(lw, "self")?])),
];

fn one(v: TensorValue) -> R {
    Ok(vec![v])
}

/// Ops that keep the input dtype (abs, neg, relu...).
fn same_type(lw: &mut Lowerer, a: &Args, f: impl Fn(&E) -> E) -> R {
    let x = Operand::T(a.tensor(lw, "self")?);
    let d = result_type(&[&x]);
    one(map(&[&x], d, d, |v| f(&v[0]))?)
}

/// Rounding is the identity on integers.
fn round_like(op: Prim, x: &E) -> E {
    if x.dtype.is_float() {
        unary(op, x.clone())
    } else {
        x.clone()
    }
}

/// Ops that compute in floating point (integers promote to float32).
fn float_map(lw: &mut Lowerer, a: &Args, f: impl Fn(&E) -> E) -> R {
    let x = Operand::T(a.tensor(lw, "self")?);
    let d = float_of(result_type(&[&x]));
    one(map(&[&x], d, d, |v| f(&v[0]))?)
}

fn float_unary(lw: &mut Lowerer, a: &Args, op: Prim) -> R {
    float_map(lw, a, |x| unary(op, x.clone()))
}

/// isnan/isinf: a float classification, false for every integer.
fn float_class(lw: &mut Lowerer, a: &Args, test: impl Fn(&E) -> E) -> R {
    let x = Operand::T(a.tensor(lw, "self")?);
    let d = result_type(&[&x]);
    one(map(
        &[&x],
        d,
        DType::Bool,
        |v| if d.is_float() { test(&v[0]) } else { constant(Scalar::B(false), DType::Bool) },
    )?)
}

/// 1, -1 or 0 (also for NaN, as torch's `(0 < x) - (x < 0)`); the identity on bools.
fn sign(x: &E) -> E {
    if x.dtype == DType::Bool {
        return x.clone();
    }
    let c = |v: i64| constant(Scalar::I(v), x.dtype);
    let negative = select(binary(Prim::Lt, x.clone(), c(0)), c(-1), c(0));
    select(binary(Prim::Gt, x.clone(), c(0)), c(1), negative)
}

fn bool_map(lw: &mut Lowerer, a: &Args, names: &[&str], f: impl Fn(&[E]) -> E) -> R {
    let ops = names.iter().map(|n| operand(lw, a, n)).collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&Operand> = ops.iter().collect();
    one(map(&refs, DType::Bool, DType::Bool, f)?)
}

fn arith(lw: &mut Lowerer, a: &Args, op: Prim) -> R {
    let (x, y) = (operand(lw, a, "self")?, operand(lw, a, "other")?);
    let d = result_type(&[&x, &y]);
    if matches!(op, Prim::BitAnd | Prim::BitOr | Prim::BitXor) && d.is_float() {
        return Err(format!("bitwise operations are defined on integers and bools only, not {d}"));
    }
    // Arithmetic on bools is logical in torch (True + True == True).
    let op = match (d, op) {
        (DType::Bool, Prim::Add | Prim::Max | Prim::BitOr) => Prim::Or,
        (DType::Bool, Prim::Mul | Prim::Min | Prim::BitAnd) => Prim::And,
        (DType::Bool, Prim::BitXor) => Prim::Ne,
        _ => op,
    };
    one(map(&[&x, &y], d, d, |v| binary(op, v[0].clone(), v[1].clone()))?)
}

/// `self + alpha * other` (and `-`).
/// `max(x, 0)`, in the output pass of the convolution that computes `x` when it can be.
fn relu(lw: &mut Lowerer, a: &Args) -> R {
    if a.get("self").is_some_and(|x| lw.used_once(x)) {
        if let Some(out) = fuse_relu(lw, &a.tensor(lw, "self")?) {
            return Ok(vec![out]);
        }
    }
    same_type(lw, a, |x| binary(Prim::Max, x.clone(), constant(Scalar::I(0), x.dtype)))
}

fn add_sub(lw: &mut Lowerer, a: &Args, op: Prim) -> R {
    let (x, y) = (operand(lw, a, "self")?, operand(lw, a, "other")?);
    let alpha = a.opt_scalar("alpha")?;
    // A residual add: in the output pass of the convolution computing one side.
    if op == Prim::Add && alpha.is_none_or(|al| al.as_f64() == 1.0) {
        for (conv, other, name) in [(&x, &y, "self"), (&y, &x, "other")] {
            if let (Operand::T(conv), Operand::T(other)) = (conv, other) {
                if a.get(name).is_some_and(|c| lw.used_once(c)) {
                    if let Some(out) = fuse_residual(lw, conv, other) {
                        return Ok(vec![out]);
                    }
                }
            }
        }
    }
    let d = result_type(&[&x, &y]);
    one(map(&[&x, &y], d, d, |v| {
        let rhs = match alpha {
            Some(al) if al.as_f64() != 1.0 => binary(Prim::Mul, v[1].clone(), constant(al, d)),
            _ => v[1].clone(),
        };
        binary(op, v[0].clone(), rhs)
    })?)
}

/// Binary ops that compute in floating point (true division, atan2).
fn float_binary(lw: &mut Lowerer, a: &Args, op: Prim) -> R {
    let (x, y) = (operand(lw, a, "self")?, operand(lw, a, "other")?);
    let d = float_of(result_type(&[&x, &y]));
    one(map(&[&x, &y], d, d, |v| binary(op, v[0].clone(), v[1].clone()))?)
}

/// pow.Tensor_Tensor, pow.Tensor_Scalar and pow.Scalar (a number to tensor powers).
fn pow(lw: &mut Lowerer, a: &Args) -> R {
    let (x, y) = (operand(lw, a, "self")?, operand(lw, a, "exponent")?);
    let d = result_type(&[&x, &y]);
    if d == DType::Bool {
        return Err("pow is not defined for bool tensors".into());
    }
    if let Operand::S(e) = y {
        if !d.is_float() && matches!(e, Scalar::I(n) if n < 0) {
            return Err("Integers to negative integer powers are not allowed.".into());
        }
        // Small integer powers are products: exact, and what PyTorch's kernels do.
        let e = e.as_f64();
        if e == 2.0 || e == 3.0 || e == 1.0 {
            return one(map(&[&x], d, d, |v| {
                (1..e as usize).fold(v[0].clone(), |acc, _| binary(Prim::Mul, acc, v[0].clone()))
            })?);
        }
        if e == 0.5 && d.is_float() {
            return one(map(&[&x], d, d, |v| unary(Prim::Sqrt, v[0].clone()))?);
        }
    }
    one(map(&[&x, &y], d, d, |v| binary(Prim::Pow, v[0].clone(), v[1].clone()))?)
}

fn compare(lw: &mut Lowerer, a: &Args, op: Prim) -> R {
    let (x, y) = (operand(lw, a, "self")?, operand(lw, a, "other")?);
    let d = result_type(&[&x, &y]);
    one(map(&[&x, &y], d, DType::Bool, |v| binary(op, v[0].clone(), v[1].clone()))?)
}

fn where_self(lw: &mut Lowerer, a: &Args) -> R {
    let c = Operand::T(a.tensor(lw, "condition")?);
    let (x, y) = (operand(lw, a, "self")?, operand(lw, a, "other")?);
    let d = result_type(&[&x, &y]);
    let sizes = super::promote::out_shape(&[&c, &x, &y])?;
    let idx = crate::lower::tensor::vars(sizes.len());
    let load = |o: &Operand, dt| super::promote::load_as(o, &sizes, &idx, dt);
    let body = select(load(&c, DType::Bool)?, load(&x, d)?, load(&y, d)?);
    one(TensorValue::lazy(d, sizes, body))
}

fn clamp(lw: &mut Lowerer, a: &Args) -> R {
    let x = Operand::T(a.tensor(lw, "self")?);
    // clamp.default takes numbers, clamp.Tensor tensors; either bound may be None.
    let bound = |name| match a.get(name) {
        None | Some(crate::frontend::schema::Argument::None(_)) => Ok(None),
        Some(_) => operand(lw, a, name).map(Some),
    };
    let (lo, hi) = (bound("min")?, bound("max")?);
    let mut all = vec![&x];
    all.extend(lo.iter());
    all.extend(hi.iter());
    let d = result_type(&all);
    let (has_lo, has_hi) = (lo.is_some(), hi.is_some());
    one(map(&all, d, d, |v| {
        let mut r = v[0].clone();
        let mut k = 1;
        if has_lo {
            r = binary(Prim::Max, r, v[k].clone());
            k += 1;
        }
        if has_hi {
            r = binary(Prim::Min, r, v[k].clone());
        }
        r
    })?)
}

fn gelu(lw: &mut Lowerer, a: &Args) -> R {
    let approximate = a.string_or("approximate", "none")?;
    if approximate != "none" && approximate != "tanh" {
        return Err(format!("approximate must be 'none' or 'tanh', got '{approximate}'"));
    }
    // A float32 input already in memory (a GEMM's or convolution's output): the support
    // library's 8-lane GELU over it, rather than a 4-lane pointwise kernel.
    let x = a.tensor(lw, "self")?;
    let in_memory =
        matches!(&x.repr, Repr::View(r) if r.offset == SymExpr::Int(0) && r.strides == contiguous_strides(&x.sizes));
    if lw.native_calls() && approximate == "none" && x.dtype == DType::F32 && !x.complex && in_memory {
        let name = a.node_name();
        let input = lw.contiguous(&x, &format!("{name}.input"));
        let out = lw.prog.add_buffer(&name, DType::F32, x.sizes.clone(), BufKind::Scratch);
        let args = vec![ExternArg::Buf(input), ExternArg::Size(SymExpr::product(x.sizes.iter()))];
        lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall { name: GELU, out, args, flops: SymExpr::Int(0) })));
        return Ok(vec![TensorValue::view_of(out, DType::F32, x.sizes.clone())]);
    }
    float_map(lw, a, |x| {
        let c = |v: f64| constant(Scalar::F(v), x.dtype);
        let inner = match approximate.as_str() {
            // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
            "tanh" => {
                let x3 = binary(Prim::Mul, binary(Prim::Mul, x.clone(), x.clone()), x.clone());
                let poly = binary(Prim::Add, x.clone(), binary(Prim::Mul, c(0.044715), x3));
                unary(Prim::Tanh, binary(Prim::Mul, c((2.0 / std::f64::consts::PI).sqrt()), poly))
            }
            // 0.5 * x * (1 + erf(x / sqrt(2)))
            _ => unary(Prim::Erf, binary(Prim::Mul, x.clone(), c(std::f64::consts::FRAC_1_SQRT_2))),
        };
        binary(Prim::Mul, binary(Prim::Mul, x.clone(), c(0.5)), binary(Prim::Add, c(1.0), inner))
    })
}

fn to_copy(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let d = a.opt_dtype("dtype")?.unwrap_or(x.dtype);
    let sizes = x.sizes.clone();
    let body = cast(x.load(&crate::lower::tensor::vars(x.rank())), d);
    one(TensorValue::lazy(d, sizes, body))
}

/// copy(self, src): `src` broadcast to the shape of `self` and cast to its dtype.
fn copy(lw: &mut Lowerer, a: &Args) -> R {
    let (dst, src) = (a.tensor(lw, "self")?, a.tensor(lw, "src")?);
    a.bool_or("non_blocking", false)?;
    let body = cast(src.expand(&dst.sizes)?.load(&crate::lower::tensor::vars(dst.rank())), dst.dtype);
    one(TensorValue::lazy(dst.dtype, dst.sizes.clone(), body))
}

/// (output, keep mask). Training mode (`train` true or None) keeps each element with
/// probability 1 - p, drawn at random; only p = 0 (keep all) and p = 1 (drop all, output
/// `x * 0`) are deterministic there.
fn native_dropout(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "input")?;
    let p = a.scalar("p")?.as_f64();
    let train = a.bool_or("train", true)?;
    let keep = match (train, p) {
        (false, _) | (true, 0.0) => true,
        (true, 1.0) => false,
        _ => return Err(format!("native_dropout in training mode with p = {p} draws random numbers; aotc compiles deterministic programs only (export the model in eval mode)")),
    };
    let idx = crate::lower::tensor::vars(x.rank());
    let output = if keep {
        x.clone()
    } else {
        TensorValue::lazy(x.dtype, x.sizes.clone(), binary(Prim::Mul, x.load(&idx), constant(Scalar::I(0), x.dtype)))
    };
    // torch returns an uninitialised mask of the input's dtype for an empty input.
    let mask_dtype = if SymExpr::product(x.sizes.iter()) == SymExpr::Int(0) { x.dtype } else { DType::Bool };
    let mask = TensorValue::lazy(mask_dtype, x.sizes.clone(), constant(Scalar::B(keep), mask_dtype));
    Ok(vec![output, mask])
}
