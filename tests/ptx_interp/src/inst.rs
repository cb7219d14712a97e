//! The decoded instruction set: what `decode` produces and `exec` runs.
//!
//! Every operand is a register slot (`Slot`): immediates and special registers are given
//! slots of their own, filled when a thread starts, so the executor never looks at an
//! operand's kind or at any text.

/// An index into one thread's register file.
pub(crate) type Slot = u32;

/// An integer type of an instruction (`.bN` types are unsigned here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntTy {
    U8,
    S8,
    U16,
    S16,
    U32,
    S32,
    U64,
    S64,
}

impl IntTy {
    pub(crate) fn bits(self) -> u32 {
        match self {
            IntTy::U8 | IntTy::S8 => 8,
            IntTy::U16 | IntTy::S16 => 16,
            IntTy::U32 | IntTy::S32 => 32,
            IntTy::U64 | IntTy::S64 => 64,
        }
    }

    pub(crate) fn signed(self) -> bool {
        matches!(self, IntTy::S8 | IntTy::S16 | IntTy::S32 | IntTy::S64)
    }

    /// The value of `bits` read as this type, sign- or zero-extended to 64 bits.
    #[inline(always)]
    pub(crate) fn extend(self, bits: u64) -> i128 {
        match self {
            IntTy::U8 => bits as u8 as i128,
            IntTy::S8 => bits as i8 as i128,
            IntTy::U16 => bits as u16 as i128,
            IntTy::S16 => bits as i16 as i128,
            IntTy::U32 => bits as u32 as i128,
            IntTy::S32 => bits as i32 as i128,
            IntTy::U64 => bits as i128,
            IntTy::S64 => bits as i64 as i128,
        }
    }

    /// The smallest and largest value of this type.
    pub(crate) fn range(self) -> (i128, i128) {
        let bits = self.bits();
        if self.signed() {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        }
    }

    /// `value` truncated to this type's width, zero-extended into a register.
    #[inline(always)]
    pub(crate) fn wrap(self, value: i128) -> u64 {
        let bits = self.bits();
        if bits == 64 {
            value as u64
        } else {
            (value as u64) & ((1u64 << bits) - 1)
        }
    }
}

/// Any numeric type `cvt` converts between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumTy {
    Int(IntTy),
    F16,
    Bf16,
    F32,
    F64,
}

/// IEEE rounding of a float result (`.rn .rz .rm .rp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rounding {
    Nearest,
    Zero,
    Down,
    Up,
}

/// How `cvt` rounds: to a float result, or to an integral value (`.rni .rzi .rmi .rpi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CvtRounding {
    None,
    Float(Rounding),
    Integral(Rounding),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    Global,
    Shared,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntBinOp {
    Add,
    Sub,
    MulLo,
    MulHi,
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntUnOp {
    Neg,
    Abs,
    Not,
    /// `cnot`, and `not.pred` (predicates hold 0 or 1).
    Cnot,
    Popc,
    Clz,
    Brev,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatBinOp {
    Add,
    Sub,
    Mul,
    /// `div.rn`, and the approximate divisions computed exactly (see SUBSET.md).
    Div,
    Min,
    Max,
    MinNan,
    MaxNan,
    Copysign,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatUnOp {
    Neg,
    Abs,
    Sqrt,
    Rsqrt,
    Rcp,
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatTy {
    F32,
    F64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmpTy {
    Int(IntTy),
    F32 { ftz: bool },
    F64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

/// `setp`'s optional second half: `p = cmp BOP q` (q negated with `!`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Combine {
    pub op: BoolOp,
    pub pred: Slot,
    pub negate: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    Min,
    Max,
    Exch,
    Cas,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomTy {
    Int(IntTy),
    F32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TestClass {
    NotANumber,
    Number,
    Finite,
    Infinite,
    Normal,
    Subnormal,
}

/// The width and extension of a memory access's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemTy {
    pub bytes: u8,
    pub signed: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    /// Copies bits (mov, cvta, and moves between same-width types).
    Mov {
        d: Slot,
        a: Slot,
    },
    /// `mov.bN d, {lo, hi}`: `half_bits` is the width of each half.
    Pack {
        d: Slot,
        lo: Slot,
        hi: Slot,
        half_bits: u8,
    },
    /// `mov.bN {lo, hi}, a`.
    Unpack {
        lo: Slot,
        hi: Slot,
        a: Slot,
        half_bits: u8,
    },
    LdParam {
        d: Slot,
        offset: u32,
        ty: MemTy,
    },
    /// `count` elements (1, 2 or 4) at `[addr + offset]` into `d[..count]`.
    Ld {
        space: Space,
        ty: MemTy,
        d: [Slot; 4],
        count: u8,
        addr: Slot,
        offset: i64,
    },
    St {
        space: Space,
        bytes: u8,
        src: [Slot; 4],
        count: u8,
        addr: Slot,
        offset: i64,
    },
    IntBin {
        op: IntBinOp,
        ty: IntTy,
        d: Slot,
        a: Slot,
        b: Slot,
    },
    IntUn {
        op: IntUnOp,
        ty: IntTy,
        d: Slot,
        a: Slot,
    },
    /// `mad.lo`, `mad.hi` or `mad.wide` (`part`); `ty` is the type of `a` and `b`.
    Mad {
        ty: IntTy,
        part: MulPart,
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
    },
    /// `mul.wide`: the full product of two `ty` values, twice as wide.
    MulWide {
        ty: IntTy,
        d: Slot,
        a: Slot,
        b: Slot,
    },
    FloatBin {
        op: FloatBinOp,
        ty: FloatTy,
        rnd: Rounding,
        ftz: bool,
        d: Slot,
        a: Slot,
        b: Slot,
    },
    FloatUn {
        op: FloatUnOp,
        ty: FloatTy,
        ftz: bool,
        d: Slot,
        a: Slot,
    },
    Fma {
        ty: FloatTy,
        ftz: bool,
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
    },
    Setp {
        cmp: CmpOp,
        ty: CmpTy,
        d: Slot,
        a: Slot,
        b: Slot,
        combine: Option<Combine>,
    },
    Selp {
        d: Slot,
        a: Slot,
        b: Slot,
        p: Slot,
    },
    Cvt {
        to: NumTy,
        from: NumTy,
        rnd: CvtRounding,
        sat: bool,
        ftz: bool,
        d: Slot,
        a: Slot,
    },
    Testp {
        class: TestClass,
        ty: FloatTy,
        d: Slot,
        a: Slot,
    },
    Bra {
        target: u32,
    },
    Exit,
    BarSync,
    Shfl {
        mode: ShflMode,
        d: Slot,
        p: Option<Slot>,
        a: Slot,
        b: Slot,
        c: Slot,
        mask: Slot,
    },
    Atom {
        op: AtomOp,
        ty: AtomTy,
        d: Slot,
        addr: Slot,
        offset: i64,
        b: Slot,
        c: Slot,
    },
    /// `membar`, `fence`: nothing to do when threads run one at a time.
    Nop,
}

/// Which part of a product `mad` keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MulPart {
    Lo,
    Hi,
    Wide,
}

/// No guard predicate.
pub(crate) const UNGUARDED: Slot = Slot::MAX;

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Inst {
    pub op: Op,
    /// The predicate slot guarding the instruction, or `UNGUARDED`.
    pub guard: Slot,
    /// Run when the guard is false (`@!%p`).
    pub guard_negated: bool,
}
