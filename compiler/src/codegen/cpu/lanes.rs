//! Operations on one 32-bit value or on four lanes of them (an f32x4 or i32x4), so that
//! bit-level float code (half.rs's conversions, vmath.rs's functions) is written once.
//! Integer constants are unsigned bit patterns.

use super::expr::Lanes;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

pub struct Ops<'a, 'b> {
    pub b: &'a mut FunctionBuilder<'b>,
    pub vector: bool,
}

impl<'a, 'b> Ops<'a, 'b> {
    pub fn new(b: &'a mut FunctionBuilder<'b>, lanes: Lanes) -> Self {
        Ops { b, vector: matches!(lanes, Lanes::X4(_)) }
    }

    /// `v` in every lane.
    pub fn splat(&mut self, v: u32) -> Value {
        let s = self.b.ins().iconst(types::I32, v as i64);
        if self.vector {
            self.b.ins().splat(types::I32X4, s)
        } else {
            s
        }
    }

    pub fn splat_float(&mut self, v: f32) -> Value {
        let s = self.b.ins().f32const(v);
        if self.vector {
            self.b.ins().splat(types::F32X4, s)
        } else {
            s
        }
    }

    pub fn and(&mut self, x: Value, v: u32) -> Value {
        let k = self.splat(v);
        self.b.ins().band(x, k)
    }

    /// `x + v`, wrapping.
    pub fn add(&mut self, x: Value, v: u32) -> Value {
        let k = self.splat(v);
        self.b.ins().iadd(x, k)
    }

    pub fn shl(&mut self, x: Value, n: u32) -> Value {
        let amount = self.b.ins().iconst(types::I32, n as i64);
        self.b.ins().ishl(x, amount)
    }

    /// `x >> n`, shifting in zeros.
    pub fn shr(&mut self, x: Value, n: u32) -> Value {
        let amount = self.b.ins().iconst(types::I32, n as i64);
        self.b.ins().ushr(x, amount)
    }

    /// `x >> n`, shifting in copies of the sign bit.
    pub fn sshr(&mut self, x: Value, n: u32) -> Value {
        let amount = self.b.ins().iconst(types::I32, n as i64);
        self.b.ins().sshr(x, amount)
    }

    /// A mask of the lanes where `x cc v` holds (integer lanes).
    pub fn compare(&mut self, cc: IntCC, x: Value, v: u32) -> Value {
        let k = self.splat(v);
        self.b.ins().icmp(cc, x, k)
    }

    /// A mask of the lanes where `x cc v` holds (float lanes; false where `x` is NaN
    /// unless `cc` says unordered).
    pub fn fcompare(&mut self, cc: FloatCC, x: Value, v: f32) -> Value {
        let k = self.splat_float(v);
        self.b.ins().fcmp(cc, x, k)
    }

    /// `a` in the lanes where `mask` is set, else `c`.
    pub fn choose(&mut self, mask: Value, a: Value, c: Value) -> Value {
        if !self.vector {
            return self.b.ins().select(mask, a, c);
        }
        // A vector mask is as wide as the lanes it selects, but may be typed as integers.
        let ty = self.b.func.dfg.value_type(a);
        let mask = if self.b.func.dfg.value_type(mask) == ty {
            mask
        } else {
            self.b.ins().bitcast(ty, MemFlagsData::new().with_endianness(Endianness::Little), mask)
        };
        self.b.ins().bitselect(mask, a, c)
    }

    /// The constant `v` in the lanes where `mask` is set, else `x`.
    pub fn replace(&mut self, mask: Value, v: f32, x: Value) -> Value {
        let k = self.splat_float(v);
        self.choose(mask, k, x)
    }

    fn bitcast(&mut self, scalar: Type, vector: Type, x: Value) -> Value {
        let to = if self.vector { vector } else { scalar };
        self.b.ins().bitcast(to, MemFlagsData::new().with_endianness(Endianness::Little), x)
    }

    /// The bits of `x` read as f32 lanes.
    pub fn as_float(&mut self, x: Value) -> Value {
        self.bitcast(types::F32, types::F32X4, x)
    }

    /// The bits of `x` read as i32 lanes.
    pub fn as_int(&mut self, x: Value) -> Value {
        self.bitcast(types::I32, types::I32X4, x)
    }

    /// The signed integer lanes `x` converted to f32 (exactly, for |x| <= 2^24).
    pub fn int_to_float(&mut self, x: Value) -> Value {
        let ty = if self.vector { types::F32X4 } else { types::F32 };
        self.b.ins().fcvt_from_sint(ty, x)
    }

    /// `a * b + c`, rounded twice: `fma` would round once, but it is a libm call on hosts
    /// without FMA (see ../shared/notes/cranelift.md), and results would then depend on
    /// the host.
    pub fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        let p = self.b.ins().fmul(a, b);
        self.b.ins().fadd(p, c)
    }

    /// `a * v + c` for a constant `v`.
    pub fn mul_const_add(&mut self, a: Value, v: f32, c: Value) -> Value {
        let k = self.splat_float(v);
        self.mul_add(a, k, c)
    }

    /// The polynomial with coefficients `c` (highest degree first) at `x`, by Estrin's
    /// scheme: neighbouring coefficients paired as `a + b x`, the pairs paired with x^2,
    /// and so on. Its dependency chain is logarithmic in the degree where Horner's rule
    /// is linear, and vmath.rs's loops are bound by that latency (log: 2.7 -> 2.2 ns per
    /// element).
    pub fn poly(&mut self, x: Value, c: &[f32]) -> Value {
        let mut terms: Vec<Value> = c.iter().rev().map(|&k| self.splat_float(k)).collect();
        let mut power = x;
        while terms.len() > 1 {
            terms = terms
                .chunks(2)
                .map(|pair| if let [a, b] = pair { self.mul_add(*b, power, *a) } else { pair[0] })
                .collect();
            if terms.len() > 1 {
                power = self.b.ins().fmul(power, power);
            }
        }
        terms[0]
    }

    /// `magnitude` (non-negative, or NaN) with the sign of `x`.
    pub fn with_sign_of(&mut self, magnitude: Value, x: Value) -> Value {
        let xi = self.as_int(x);
        let sign = self.and(xi, 0x8000_0000);
        let m = self.as_int(magnitude);
        let signed = self.b.ins().bor(m, sign);
        self.as_float(signed)
    }
}
