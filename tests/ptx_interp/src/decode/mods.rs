//! An opcode's dot-separated modifiers, consumed one category at a time so that any
//! modifier left over (outside the subset) becomes an error.

use crate::error::ParseError;
use crate::inst::{FloatTy, IntTy, MemTy, NumTy, Rounding};

pub(crate) struct Mods<'a> {
    pub name: &'a str,
    parts: Vec<&'a str>,
    line: u32,
    text: &'a str,
}

impl<'a> Mods<'a> {
    pub(crate) fn new(opcode: &'a str, line: u32, text: &'a str) -> Mods<'a> {
        let mut parts = opcode.split('.');
        let name = parts.next().unwrap_or("");
        Mods { name, parts: parts.collect(), line, text }
    }

    pub(crate) fn error(&self, why: impl std::fmt::Display) -> ParseError {
        ParseError { line: self.line, message: format!("unsupported instruction `{}`: {why}", self.text) }
    }

    /// Removes and returns the first modifier that is one of `options`.
    pub(crate) fn take(&mut self, options: &[&str]) -> Option<&'a str> {
        let at = self.parts.iter().position(|p| options.contains(p))?;
        Some(self.parts.remove(at))
    }

    pub(crate) fn flag(&mut self, modifier: &str) -> bool {
        self.take(&[modifier]).is_some()
    }

    /// The last modifier, which is the type in every instruction of the subset.
    pub(crate) fn take_last(&mut self) -> Result<&'a str, ParseError> {
        self.parts.pop().ok_or_else(|| self.error("missing type"))
    }

    /// Fails if any modifier was not consumed.
    pub(crate) fn finish(&self) -> Result<(), ParseError> {
        match self.parts.first() {
            Some(extra) => Err(self.error(format!("modifier `.{extra}` is not supported"))),
            None => Ok(()),
        }
    }

    pub(crate) fn rounding(&mut self) -> Option<Rounding> {
        self.take(&["rn", "rz", "rm", "rp"]).map(|r| match r {
            "rn" => Rounding::Nearest,
            "rz" => Rounding::Zero,
            "rm" => Rounding::Down,
            _ => Rounding::Up,
        })
    }

    pub(crate) fn int_ty(&self, ty: &str) -> Result<IntTy, ParseError> {
        int_ty(ty).ok_or_else(|| self.error(format!("type `.{ty}` is not an integer type here")))
    }

    pub(crate) fn float_ty(&self, ty: &str) -> Result<FloatTy, ParseError> {
        match ty {
            "f32" => Ok(FloatTy::F32),
            "f64" => Ok(FloatTy::F64),
            _ => Err(self.error(format!("type `.{ty}` is not f32 or f64"))),
        }
    }

    pub(crate) fn num_ty(&self, ty: &str) -> Result<NumTy, ParseError> {
        match ty {
            "f16" => Ok(NumTy::F16),
            "bf16" => Ok(NumTy::Bf16),
            "f32" => Ok(NumTy::F32),
            "f64" => Ok(NumTy::F64),
            _ if ty.starts_with('b') => Err(self.error(format!("cvt does not take `.{ty}`"))),
            _ => self.int_ty(ty).map(NumTy::Int),
        }
    }

    pub(crate) fn mem_ty(&self, ty: &str) -> Result<MemTy, ParseError> {
        let (bytes, signed) = match ty {
            "u8" | "b8" => (1, false),
            "s8" => (1, true),
            "u16" | "b16" | "f16" => (2, false),
            "s16" => (2, true),
            "u32" | "b32" | "f32" => (4, false),
            "s32" => (4, true),
            "u64" | "b64" | "f64" => (8, false),
            "s64" => (8, true),
            _ => return Err(self.error(format!("memory type `.{ty}` is not supported"))),
        };
        Ok(MemTy { bytes, signed })
    }
}

/// An integer type; `.bN` types read as unsigned.
pub(crate) fn int_ty(ty: &str) -> Option<IntTy> {
    Some(match ty {
        "u8" | "b8" => IntTy::U8,
        "s8" => IntTy::S8,
        "u16" | "b16" => IntTy::U16,
        "s16" => IntTy::S16,
        "u32" | "b32" => IntTy::U32,
        "s32" => IntTy::S32,
        "u64" | "b64" => IntTy::U64,
        "s64" => IntTy::S64,
        _ => return None,
    })
}

/// The width in bits of a register or instruction type, `pred` as 1.
pub(crate) fn type_bits(ty: &str) -> Option<u32> {
    Some(match ty {
        "pred" => 1,
        "b8" | "u8" | "s8" => 8,
        "b16" | "u16" | "s16" | "f16" | "bf16" => 16,
        "b32" | "u32" | "s32" | "f32" => 32,
        "b64" | "u64" | "s64" | "f64" => 64,
        _ => return None,
    })
}
