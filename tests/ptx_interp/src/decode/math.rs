//! Decoding arithmetic, logic, comparison and selection.

use super::mods::{type_bits, Mods};
use super::{Decoder, Imm};
use crate::error::ParseError;
use crate::inst::{
    BoolOp, CmpOp, CmpTy, Combine, FloatBinOp, FloatTy, FloatUnOp, IntBinOp, IntTy, IntUnOp, MulPart, Op, Rounding,
    Slot, TestClass,
};
use crate::lex::Token;

pub(super) fn decode(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let ty = mods.take_last()?;
    match mods.name {
        "setp" => return setp(d, mods, ty, operands),
        "selp" => return selp(d, mods, ty, operands),
        "testp" => return testp(d, mods, ty, operands),
        _ => {}
    }
    if ty == "f32" || ty == "f64" {
        return float(d, mods, mods.float_ty(ty)?, operands);
    }
    if ty == "pred" {
        return predicate(d, mods, operands);
    }
    integer(d, mods, ty, operands)
}

fn imm_of(ty: FloatTy) -> Imm {
    match ty {
        FloatTy::F32 => Imm::F32,
        FloatTy::F64 => Imm::F64,
    }
}

/// Destination and sources of an instruction with `n` sources.
fn operands_n<const N: usize>(
    d: &mut Decoder,
    mods: &Mods,
    operands: &[Vec<Token>],
    imms: [Imm; N],
) -> Result<(Slot, [Slot; N]), ParseError> {
    if operands.len() != N + 1 {
        return Err(mods.error(format!("expected {} operands", N + 1)));
    }
    let dest = d.dst(&operands[0], mods)?;
    let mut sources = [0; N];
    for (i, imm) in imms.into_iter().enumerate() {
        sources[i] = d.src(&operands[i + 1], imm, mods)?;
    }
    Ok((dest, sources))
}

fn float(d: &mut Decoder, mods: &mut Mods, ty: FloatTy, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let imm = imm_of(ty);
    let rounding = mods.rounding();
    let approx = mods.flag("approx");
    let ftz = mods.flag("ftz");
    if ftz && ty == FloatTy::F64 {
        return Err(mods.error(".ftz is for f32"));
    }
    let f32_only = |mods: &Mods| {
        if ty == FloatTy::F32 {
            Ok(())
        } else {
            Err(mods.error("f32 only"))
        }
    };
    let binary = |op, rnd, d: &mut Decoder, mods: &Mods| {
        let (dest, [a, b]) = operands_n(d, mods, operands, [imm; 2])?;
        Ok(Op::FloatBin { op, ty, rnd, ftz, d: dest, a, b })
    };
    let unary = |op, d: &mut Decoder, mods: &Mods| {
        let (dest, [a]) = operands_n(d, mods, operands, [imm])?;
        Ok(Op::FloatUn { op, ty, ftz, d: dest, a })
    };
    // What each instruction allows of rounding (`rounding`) and `.approx`.
    let exact = |mods: &Mods| match (rounding, approx) {
        (Some(Rounding::Nearest), false) => Ok(()),
        _ => Err(mods.error("needs .rn")),
    };
    let approximate = |mods: &Mods| match (rounding, approx) {
        (None, true) => f32_only(mods),
        _ => Err(mods.error("needs .approx")),
    };
    let plain = |mods: &Mods| match (rounding, approx) {
        (None, false) => Ok(()),
        _ => Err(mods.error("takes no rounding")),
    };
    match mods.name {
        "add" | "sub" | "mul" => {
            if approx {
                return Err(mods.error("no .approx form"));
            }
            let op = match mods.name {
                "add" => FloatBinOp::Add,
                "sub" => FloatBinOp::Sub,
                _ => FloatBinOp::Mul,
            };
            binary(op, rounding.unwrap_or(Rounding::Nearest), d, mods)
        }
        "div" => {
            let full = mods.flag("full");
            match (rounding, approx, full) {
                (Some(Rounding::Nearest), false, false) => {}
                (None, true, false) | (None, false, true) => f32_only(mods)?,
                _ => return Err(mods.error("div needs .rn, .approx or .full")),
            }
            binary(FloatBinOp::Div, Rounding::Nearest, d, mods)
        }
        "min" | "max" => {
            plain(mods)?;
            let nan = mods.flag("NaN");
            let op = match (mods.name, nan) {
                ("min", false) => FloatBinOp::Min,
                ("min", true) => FloatBinOp::MinNan,
                (_, false) => FloatBinOp::Max,
                _ => FloatBinOp::MaxNan,
            };
            binary(op, Rounding::Nearest, d, mods)
        }
        "copysign" => {
            plain(mods)?;
            binary(FloatBinOp::Copysign, Rounding::Nearest, d, mods)
        }
        "fma" | "mad" => {
            exact(mods)?;
            let (dest, [a, b, c]) = operands_n(d, mods, operands, [imm; 3])?;
            Ok(Op::Fma { ty, ftz, d: dest, a, b, c })
        }
        "neg" | "abs" => {
            plain(mods)?;
            unary(if mods.name == "neg" { FloatUnOp::Neg } else { FloatUnOp::Abs }, d, mods)
        }
        "sqrt" | "rcp" => {
            if !approx {
                exact(mods)?;
            } else {
                approximate(mods)?;
            }
            unary(if mods.name == "sqrt" { FloatUnOp::Sqrt } else { FloatUnOp::Rcp }, d, mods)
        }
        "rsqrt" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => {
            approximate(mods)?;
            let op = match mods.name {
                "rsqrt" => FloatUnOp::Rsqrt,
                "ex2" => FloatUnOp::Ex2,
                "lg2" => FloatUnOp::Lg2,
                "sin" => FloatUnOp::Sin,
                "cos" => FloatUnOp::Cos,
                _ => FloatUnOp::Tanh,
            };
            unary(op, d, mods)
        }
        _ => Err(mods.error("not in the supported subset")),
    }
}

fn predicate(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let bits = [Imm::Bits(1); 2];
    let op = match mods.name {
        "and" => IntBinOp::And,
        "or" => IntBinOp::Or,
        "xor" => IntBinOp::Xor,
        "not" => {
            let (dest, [a]) = operands_n(d, mods, operands, [Imm::Bits(1)])?;
            return Ok(Op::IntUn { op: IntUnOp::Cnot, ty: IntTy::U64, d: dest, a });
        }
        _ => return Err(mods.error("not a predicate instruction")),
    };
    let (dest, [a, b]) = operands_n(d, mods, operands, bits)?;
    Ok(Op::IntBin { op, ty: IntTy::U64, d: dest, a, b })
}

fn integer(d: &mut Decoder, mods: &mut Mods, ty_name: &str, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let ty = mods.int_ty(ty_name)?;
    if ty.bits() < 16 {
        return Err(mods.error("8-bit arithmetic is not supported"));
    }
    let imm = Imm::Bits(ty.bits());
    let is_bits = ty_name.starts_with('b');
    let part = match mods.take(&["lo", "hi", "wide"]) {
        Some("lo") => Some(MulPart::Lo),
        Some("hi") => Some(MulPart::Hi),
        Some("wide") => Some(MulPart::Wide),
        _ => None,
    };
    let arithmetic = |mods: &Mods| {
        if is_bits {
            Err(mods.error("needs a .s or .u type"))
        } else {
            Ok(())
        }
    };
    let logic = |mods: &Mods| {
        if is_bits {
            Ok(())
        } else {
            Err(mods.error("needs a .b type"))
        }
    };
    if part.is_some() && mods.name != "mul" && mods.name != "mad" {
        return Err(mods.error(".lo/.hi/.wide are for mul and mad"));
    }
    let bin = match mods.name {
        "add" => Some((IntBinOp::Add, arithmetic(mods))),
        "sub" => Some((IntBinOp::Sub, arithmetic(mods))),
        "div" => Some((IntBinOp::Div, arithmetic(mods))),
        "rem" => Some((IntBinOp::Rem, arithmetic(mods))),
        "min" => Some((IntBinOp::Min, arithmetic(mods))),
        "max" => Some((IntBinOp::Max, arithmetic(mods))),
        "and" => Some((IntBinOp::And, logic(mods))),
        "or" => Some((IntBinOp::Or, logic(mods))),
        "xor" => Some((IntBinOp::Xor, logic(mods))),
        "shl" => Some((IntBinOp::Shl, logic(mods))),
        "shr" => Some((IntBinOp::Shr, Ok(()))),
        _ => None,
    };
    if let Some((op, allowed)) = bin {
        allowed?;
        let b_imm = if matches!(op, IntBinOp::Shl | IntBinOp::Shr) { Imm::Bits(32) } else { imm };
        let (dest, [a, b]) = operands_n(d, mods, operands, [imm, b_imm])?;
        return Ok(Op::IntBin { op, ty, d: dest, a, b });
    }
    let un = match mods.name {
        "neg" | "abs" => Some((if mods.name == "neg" { IntUnOp::Neg } else { IntUnOp::Abs }, arithmetic(mods))),
        "not" => Some((IntUnOp::Not, logic(mods))),
        "cnot" => Some((IntUnOp::Cnot, logic(mods))),
        "popc" | "clz" | "brev" if ty.bits() >= 32 => {
            let op = match mods.name {
                "popc" => IntUnOp::Popc,
                "clz" => IntUnOp::Clz,
                _ => IntUnOp::Brev,
            };
            Some((op, logic(mods)))
        }
        _ => None,
    };
    if let Some((op, allowed)) = un {
        allowed?;
        let (dest, [a]) = operands_n(d, mods, operands, [imm])?;
        return Ok(Op::IntUn { op, ty, d: dest, a });
    }
    arithmetic(mods)?;
    let wide_imm = Imm::Bits(ty.bits() * 2);
    match (mods.name, part) {
        ("mul", Some(MulPart::Wide)) if ty.bits() <= 32 => {
            let (dest, [a, b]) = operands_n(d, mods, operands, [imm; 2])?;
            Ok(Op::MulWide { ty, d: dest, a, b })
        }
        ("mul", Some(MulPart::Lo)) => {
            let (dest, [a, b]) = operands_n(d, mods, operands, [imm; 2])?;
            Ok(Op::IntBin { op: IntBinOp::MulLo, ty, d: dest, a, b })
        }
        ("mul", Some(MulPart::Hi)) => {
            let (dest, [a, b]) = operands_n(d, mods, operands, [imm; 2])?;
            Ok(Op::IntBin { op: IntBinOp::MulHi, ty, d: dest, a, b })
        }
        ("mad", Some(part)) if part != MulPart::Wide || ty.bits() <= 32 => {
            let c_imm = if part == MulPart::Wide { wide_imm } else { imm };
            let (dest, [a, b, c]) = operands_n(d, mods, operands, [imm, imm, c_imm])?;
            Ok(Op::Mad { ty, part, d: dest, a, b, c })
        }
        _ => Err(mods.error("not in the supported subset")),
    }
}

fn cmp_op(mods: &mut Mods) -> Result<CmpOp, ParseError> {
    let names = [
        "eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu", "geu", "num",
        "nan",
    ];
    let name = mods.take(&names).ok_or_else(|| mods.error("missing comparison"))?;
    Ok(match name {
        "eq" => CmpOp::Eq,
        "ne" => CmpOp::Ne,
        "lt" | "lo" => CmpOp::Lt,
        "le" | "ls" => CmpOp::Le,
        "gt" | "hi" => CmpOp::Gt,
        "ge" | "hs" => CmpOp::Ge,
        "equ" => CmpOp::Equ,
        "neu" => CmpOp::Neu,
        "ltu" => CmpOp::Ltu,
        "leu" => CmpOp::Leu,
        "gtu" => CmpOp::Gtu,
        "geu" => CmpOp::Geu,
        "num" => CmpOp::Num,
        _ => CmpOp::Nan,
    })
}

fn setp(d: &mut Decoder, mods: &mut Mods, ty_name: &str, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let unsigned_only = mods.take(&["lo", "ls", "hi", "hs"]).map(|name| {
        let op = match name {
            "lo" => CmpOp::Lt,
            "ls" => CmpOp::Le,
            "hi" => CmpOp::Gt,
            _ => CmpOp::Ge,
        };
        (op, name)
    });
    let cmp = match unsigned_only {
        Some((op, _)) => op,
        None => cmp_op(mods)?,
    };
    let bool_op = match mods.take(&["and", "or", "xor"]) {
        Some("and") => Some(BoolOp::And),
        Some("or") => Some(BoolOp::Or),
        Some(_) => Some(BoolOp::Xor),
        None => None,
    };
    let ftz = mods.flag("ftz");
    let ty = match ty_name {
        "f32" => CmpTy::F32 { ftz },
        "f64" if !ftz => CmpTy::F64,
        _ if ftz => return Err(mods.error(".ftz is for f32")),
        _ => CmpTy::Int(mods.int_ty(ty_name)?),
    };
    let float_only = matches!(
        cmp,
        CmpOp::Equ | CmpOp::Neu | CmpOp::Ltu | CmpOp::Leu | CmpOp::Gtu | CmpOp::Geu | CmpOp::Num | CmpOp::Nan
    );
    match ty {
        CmpTy::Int(int) if float_only || (unsigned_only.is_some() && int.signed()) => {
            return Err(mods.error("comparison does not fit the type"))
        }
        CmpTy::F32 { .. } | CmpTy::F64 if unsigned_only.is_some() => {
            return Err(mods.error("comparison does not fit the type"))
        }
        CmpTy::Int(int) if int.bits() < 16 => return Err(mods.error("8-bit setp is not supported")),
        _ => {}
    }
    let imm = match ty {
        CmpTy::F32 { .. } => Imm::F32,
        CmpTy::F64 => Imm::F64,
        CmpTy::Int(int) => Imm::Bits(int.bits()),
    };
    let expected = if bool_op.is_some() { 4 } else { 3 };
    if operands.len() != expected {
        return Err(mods.error(format!("expected {expected} operands")));
    }
    if operands[0].iter().any(|t| t.is('|')) {
        return Err(mods.error("the two-destination form is not supported"));
    }
    let dest = d.dst(&operands[0], mods)?;
    let a = d.src(&operands[1], imm, mods)?;
    let b = d.src(&operands[2], imm, mods)?;
    let combine = match bool_op {
        Some(op) => {
            let (negate, pred) = match &operands[3][..] {
                [bang, rest @ ..] if bang.is('!') => (true, rest),
                all => (false, all),
            };
            Some(Combine { op, pred: d.src(pred, Imm::Bits(1), mods)?, negate })
        }
        None => None,
    };
    Ok(Op::Setp { cmp, ty, d: dest, a, b, combine })
}

fn selp(d: &mut Decoder, mods: &mut Mods, ty: &str, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let imm = match ty {
        "f32" => Imm::F32,
        "f64" => Imm::F64,
        _ => Imm::Bits(type_bits(ty).filter(|&b| b >= 16).ok_or_else(|| mods.error("bad selp type"))?),
    };
    let (dest, [a, b, p]) = operands_n(d, mods, operands, [imm, imm, Imm::Bits(1)])?;
    Ok(Op::Selp { d: dest, a, b, p })
}

fn testp(d: &mut Decoder, mods: &mut Mods, ty: &str, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let ty = mods.float_ty(ty)?;
    let class = match mods.take(&["nan", "notanumber", "number", "finite", "infinite", "normal", "subnormal"]) {
        Some("nan") | Some("notanumber") => TestClass::NotANumber,
        Some("number") => TestClass::Number,
        Some("finite") => TestClass::Finite,
        Some("infinite") => TestClass::Infinite,
        Some("normal") => TestClass::Normal,
        Some(_) => TestClass::Subnormal,
        None => return Err(mods.error("missing testp class")),
    };
    let (dest, [a]) = operands_n(d, mods, operands, [imm_of(ty)])?;
    Ok(Op::Testp { class, ty, d: dest, a })
}
