//! How each dtype lives in PTX registers and memory. Integers narrower than 32 bits are
//! held in 32-bit registers, sign- or zero-extended from their width after every
//! operation that can leave it (so they wrap exactly as the CPU's 8- and 16-bit
//! arithmetic does); bool is an unsigned byte holding 0 or 1; float16 and bfloat16 are
//! computed in f32 (`cpu::half::compute_dtype`) and stored in 16 bits.

use super::ptx::{Body, Kind, Op, Reg};
use crate::codegen::cpu::half::compute_dtype;
use aotc_abi::DType;

/// The register class of a computed value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Num {
    S8,
    U8,
    S16,
    S32,
    S64,
    F32,
    F64,
}

impl Num {
    pub fn of(d: DType) -> Num {
        match compute_dtype(d) {
            DType::Bool | DType::U8 => Num::U8,
            DType::I8 => Num::S8,
            DType::I16 => Num::S16,
            DType::I32 => Num::S32,
            DType::I64 => Num::S64,
            DType::F64 => Num::F64,
            _ => Num::F32,
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Num::S8 | Num::U8 | Num::S16 | Num::S32 => Kind::B32,
            Num::S64 => Kind::B64,
            Num::F32 => Kind::F32,
            Num::F64 => Kind::F64,
        }
    }

    /// The type suffix of arithmetic on the register.
    pub fn ty(self) -> &'static str {
        match self {
            Num::S8 | Num::S16 | Num::S32 => "s32",
            Num::U8 => "u32",
            Num::S64 => "s64",
            Num::F32 => "f32",
            Num::F64 => "f64",
        }
    }

    /// The bit-type suffix of the register (`and`, `selp`, `shfl` halves).
    pub fn bits(self) -> &'static str {
        match self.kind() {
            Kind::B64 | Kind::F64 => "b64",
            _ => "b32",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Num::F32 | Num::F64)
    }

    pub fn is_unsigned(self) -> bool {
        self == Num::U8
    }

    /// The width in bits of the integer type held.
    pub fn width(self) -> u32 {
        match self {
            Num::S8 | Num::U8 => 8,
            Num::S16 => 16,
            Num::S32 | Num::F32 => 32,
            Num::S64 | Num::F64 => 64,
        }
    }

    /// `v` re-extended from the type's width: what 8- and 16-bit arithmetic wraps to.
    pub fn normalize(self, b: &mut Body, v: Reg) -> Reg {
        match self {
            Num::U8 => b.def("and.b32", Kind::B32, &[v.into(), Op::Int(0xff)]),
            Num::S8 | Num::S16 => {
                let shift = 32 - self.width() as i64;
                let up = b.def("shl.b32", Kind::B32, &[v.into(), Op::Int(shift)]);
                b.def("shr.s32", Kind::B32, &[up.into(), Op::Int(shift)])
            }
            _ => v,
        }
    }

    /// The constant `v` as an operand of this class (`mov`able).
    pub fn imm(self, v: f64, i: i64) -> Op {
        match self {
            Num::F32 => Op::F32(v as f32),
            Num::F64 => Op::F64(v),
            _ => Op::Int(i),
        }
    }

    /// A register holding the constant (`v` for floats, `i` for integers).
    pub fn constant(self, b: &mut Body, v: f64, i: i64) -> Reg {
        b.def(&format!("mov.{}", self.ty()), self.kind(), &[self.imm(v, i)])
    }
}

/// The `ld`/`st` type suffix of an element of dtype `d` in memory.
pub fn mem_type(d: DType) -> &'static str {
    match d {
        DType::Bool | DType::U8 => "u8",
        DType::I8 => "s8",
        DType::I16 => "s16",
        DType::I32 => "s32",
        DType::I64 => "s64",
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 | DType::BF16 => "b16",
    }
}

/// The `cvt` type name of a 16-bit float dtype.
pub fn half_type(d: DType) -> Option<&'static str> {
    match d {
        DType::F16 => Some("f16"),
        DType::BF16 => Some("bf16"),
        _ => None,
    }
}

/// `x` (an f32) rounded to the nearest value of the 16-bit float `d`, as an f32.
pub fn round_half(b: &mut Body, x: Reg, d: DType) -> Reg {
    match half_type(d) {
        Some(h) => {
            let bits = b.def(&format!("cvt.rn.{h}.f32"), Kind::B16, &[x.into()]);
            b.def(&format!("cvt.f32.{h}"), Kind::F32, &[bits.into()])
        }
        None => x,
    }
}
