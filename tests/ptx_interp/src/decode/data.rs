//! Decoding data movement: mov, ld, st, cvta, cvt, atom.

use super::mods::{int_ty, type_bits, Mods};
use super::{Base, Decoder, Imm};
use crate::error::ParseError;
use crate::inst::{AtomOp, AtomTy, CvtRounding, NumTy, Op, Rounding, Slot, Space};
use crate::lex::Token;

pub(super) fn decode(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    match mods.name {
        "mov" => mov(d, mods, operands),
        "ld" => load(d, mods, operands),
        "st" => store(d, mods, operands),
        "cvta" => cvta(d, mods, operands),
        "cvt" => cvt(d, mods, operands),
        _ => atom(d, mods, operands),
    }
}

fn two<'t>(mods: &Mods, operands: &'t [Vec<Token>]) -> Result<(&'t [Token], &'t [Token]), ParseError> {
    match operands {
        [a, b] => Ok((a, b)),
        _ => Err(mods.error("expected two operands")),
    }
}

fn is_vector(tokens: &[Token]) -> bool {
    tokens.first().is_some_and(|t| t.is('{'))
}

fn mov(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let ty = mods.take_last()?;
    let bits = type_bits(ty).filter(|&b| b >= 16 || ty == "pred").ok_or_else(|| mods.error("bad mov type"))?;
    let (dest, source) = two(mods, operands)?;
    if is_vector(dest) || is_vector(source) {
        if !ty.starts_with('b') || bits < 32 {
            return Err(mods.error("pack/unpack moves are .b32 or .b64"));
        }
        let half_bits = (bits / 2) as u8;
        return if is_vector(dest) {
            let [lo, hi] = d.vector(dest, mods)?[..] else {
                return Err(mods.error("unpack needs two halves"));
            };
            Ok(Op::Unpack { lo, hi, a: d.src(source, Imm::Bits(bits), mods)?, half_bits })
        } else {
            let [lo, hi] = d.vector(source, mods)?[..] else {
                return Err(mods.error("pack needs two halves"));
            };
            Ok(Op::Pack { d: d.dst(dest, mods)?, lo, hi, half_bits })
        };
    }
    let imm = match ty {
        "f32" => Imm::F32,
        "f64" => Imm::F64,
        _ => Imm::Bits(bits),
    };
    Ok(Op::Mov { d: d.dst(dest, mods)?, a: d.src(source, imm, mods)? })
}

fn space(mods: &mut Mods) -> Result<Space, ParseError> {
    match mods.take(&["global", "shared", "param"]) {
        Some("global") => Ok(Space::Global),
        Some("shared") => Ok(Space::Shared),
        _ => Err(mods.error("state space must be .global or .shared (or .param for ld)")),
    }
}

fn vector_count(mods: &mut Mods) -> u8 {
    match mods.take(&["v2", "v4"]) {
        Some("v2") => 2,
        Some(_) => 4,
        None => 1,
    }
}

fn slots4(slots: &[Slot]) -> [Slot; 4] {
    let mut out = [slots[0]; 4];
    out[..slots.len()].copy_from_slice(slots);
    out
}

fn load(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let ty_name = mods.take_last()?;
    let ty = mods.mem_ty(ty_name)?;
    let (dest, address) = two(mods, operands)?;
    if mods.flag("param") {
        let (Base::Param(offset), 0) = d.address(address, mods)? else {
            return Err(mods.error("ld.param reads a parameter by name"));
        };
        let param_end = d.params.values().map(|p| p.offset + p.bytes).max().unwrap_or(0);
        if offset.checked_add(ty.bytes as u32).is_none_or(|end| end > param_end) {
            return Err(mods.error("ld.param reads past the parameters"));
        }
        return Ok(Op::LdParam { d: d.dst(dest, mods)?, offset, ty });
    }
    let space = space(mods)?;
    if space == Space::Global {
        mods.flag("nc");
    }
    let count = vector_count(mods);
    let slots = d.vector(dest, mods)?;
    if slots.len() != count as usize {
        return Err(mods.error("vector width does not match the destination"));
    }
    let (Base::Slot(addr), offset) = d.address(address, mods)? else {
        return Err(mods.error("a parameter address outside ld.param"));
    };
    Ok(Op::Ld { space, ty, d: slots4(&slots), count, addr, offset })
}

fn store(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let ty_name = mods.take_last()?;
    let ty = mods.mem_ty(ty_name)?;
    let space = space(mods)?;
    let count = vector_count(mods);
    let (address, source) = two(mods, operands)?;
    let slots = if is_vector(source) {
        d.vector(source, mods)?
    } else {
        let imm = match ty_name {
            "f32" => Imm::F32,
            "f64" => Imm::F64,
            _ => Imm::Bits(ty.bytes as u32 * 8),
        };
        vec![d.src(source, imm, mods)?]
    };
    if slots.len() != count as usize {
        return Err(mods.error("vector width does not match the source"));
    }
    let (Base::Slot(addr), offset) = d.address(address, mods)? else {
        return Err(mods.error("st.param is not supported"));
    };
    Ok(Op::St { space, bytes: ty.bytes, src: slots4(&slots), count, addr, offset })
}

/// Generic and state-space addresses are the same numbers in the interpreter: a move.
fn cvta(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let ty = mods.take_last()?;
    if ty != "u64" && ty != "u32" {
        return Err(mods.error("cvta is .u64 or .u32"));
    }
    mods.flag("to");
    mods.take(&["global", "shared"]).ok_or_else(|| mods.error("cvta needs .global or .shared"))?;
    let (dest, source) = two(mods, operands)?;
    Ok(Op::Mov { d: d.dst(dest, mods)?, a: d.src(source, Imm::Bits(64), mods)? })
}

fn is_float(ty: NumTy) -> bool {
    !matches!(ty, NumTy::Int(_))
}

fn float_rank(ty: NumTy) -> u32 {
    match ty {
        NumTy::F16 | NumTy::Bf16 => 16,
        NumTy::F32 => 32,
        _ => 64,
    }
}

fn cvt(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let from_name = mods.take_last()?;
    let from = mods.num_ty(from_name)?;
    let to_name = mods.take_last()?;
    let to = mods.num_ty(to_name)?;
    let integral = match mods.take(&["rni", "rzi", "rmi", "rpi"]) {
        Some("rni") => Some(Rounding::Nearest),
        Some("rzi") => Some(Rounding::Zero),
        Some("rmi") => Some(Rounding::Down),
        Some(_) => Some(Rounding::Up),
        None => None,
    };
    let rnd = match (integral, mods.rounding()) {
        (Some(_), Some(_)) => return Err(mods.error("two rounding modifiers")),
        (Some(r), None) => CvtRounding::Integral(r),
        (None, Some(r)) => CvtRounding::Float(r),
        (None, None) => CvtRounding::None,
    };
    let sat = mods.flag("sat");
    let ftz = mods.flag("ftz");
    // PTX requires exactly the rounding that can matter; anything else is rejected
    // rather than guessed.
    let needs = match (is_float(from), is_float(to)) {
        (true, false) => "integral",
        (false, true) => "float",
        (true, true) if from == to => "integral",
        (true, true) if float_rank(to) < float_rank(from) || to != from && float_rank(to) == 16 => "float",
        _ => "none",
    };
    let ok = match (needs, rnd) {
        ("integral", CvtRounding::Integral(_)) | ("float", CvtRounding::Float(_)) | ("none", CvtRounding::None) => true,
        // A same-type float cvt without rounding only applies .sat/.ftz.
        ("integral", CvtRounding::None) => from == to,
        _ => false,
    };
    if !ok {
        return Err(mods.error(format!("this conversion needs {needs} rounding")));
    }
    if ftz && from != NumTy::F32 && to != NumTy::F32 {
        return Err(mods.error(".ftz applies to f32 conversions only"));
    }
    let (dest, source) = two(mods, operands)?;
    let imm = match from {
        NumTy::F32 => Imm::F32,
        NumTy::F64 => Imm::F64,
        NumTy::F16 | NumTy::Bf16 => Imm::Bits(16),
        NumTy::Int(ty) => Imm::Bits(ty.bits()),
    };
    Ok(Op::Cvt { to, from, rnd, sat, ftz, d: d.dst(dest, mods)?, a: d.src(source, imm, mods)? })
}

fn atom(d: &mut Decoder, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
    let ty_name = mods.take_last()?;
    let ty = match ty_name {
        "f32" => AtomTy::F32,
        "u32" | "s32" | "u64" | "s64" | "b32" | "b64" => {
            AtomTy::Int(int_ty(ty_name).ok_or_else(|| mods.error("bad type"))?)
        }
        _ => return Err(mods.error("atom types are u32, s32, u64, s64, f32")),
    };
    if !mods.flag("global") {
        return Err(mods.error("only atom.global is supported"));
    }
    let op = match mods.take(&["add", "min", "max", "exch", "cas"]) {
        Some("add") => AtomOp::Add,
        Some("min") => AtomOp::Min,
        Some("max") => AtomOp::Max,
        Some("exch") => AtomOp::Exch,
        Some(_) => AtomOp::Cas,
        None => return Err(mods.error("atom operation must be add, min, max, exch or cas")),
    };
    if ty == AtomTy::F32 && op != AtomOp::Add && op != AtomOp::Exch {
        return Err(mods.error("f32 atomics are add and exch only"));
    }
    let imm = match ty {
        AtomTy::F32 => Imm::F32,
        AtomTy::Int(t) => Imm::Bits(t.bits()),
    };
    let (dest, address, b, c) = match (op, operands) {
        (AtomOp::Cas, [dest, address, b, c]) => (dest, address, b, Some(c)),
        (AtomOp::Cas, _) => return Err(mods.error("atom.cas takes 4 operands")),
        (_, [dest, address, b]) => (dest, address, b, None),
        _ => return Err(mods.error("atom takes 3 operands")),
    };
    let (Base::Slot(addr), offset) = d.address(address, mods)? else {
        return Err(mods.error("atom on a parameter"));
    };
    let b = d.src(b, imm, mods)?;
    let c = match c {
        Some(c) => d.src(c, imm, mods)?,
        None => b,
    };
    Ok(Op::Atom { op, ty, d: d.dst(dest, mods)?, addr, offset, b, c })
}
