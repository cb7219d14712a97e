//! The FFT extern (`aotc_abi::fft`, the support library's `__aotc_fft` in
//! runtime/embedded/src/fft.rs is the reference) as a direct DFT: one thread per output
//! value in a grid-stride loop over the contiguous `[outer, len_out, inner]` output, each
//! summing its line's n terms in f64 and rounding to float32 once. That is O(n^2) work
//! per line: correct first (an FFT proper can replace it). The twiddle angle of term j
//! for output k is `2 pi ((j k) mod n) / n`, its index reduced exactly in integers, so
//! no angle grows with the signal.

use super::kernel::{Kx, R};
use super::math::{self, M};
use super::ptx::{Kind, Op, Reg};
use super::Work;
use crate::ir::{BufId, ExternArg, ExternCall};
use aotc_abi::sym::SymExpr;
use aotc_abi::{fft, DType};
use std::f64::consts::PI;

/// What a call's `kind` reads and writes.
struct Shape {
    /// Real input values (r2c), else complex pairs.
    real_in: bool,
    /// Real output values (c2r), else complex pairs.
    real_out: bool,
    /// The sign of the twiddles' exponent: -1 forward, +1 inverse.
    sign: f64,
}

impl Shape {
    fn of(kind: i64) -> Option<Shape> {
        let (real_in, real_out, sign) = match kind {
            fft::FORWARD => (false, false, -1.0),
            fft::INVERSE => (false, false, 1.0),
            fft::REAL_TO_COMPLEX => (true, false, -1.0),
            fft::COMPLEX_TO_REAL => (false, true, 1.0),
            _ => return None,
        };
        Some(Shape { real_in, real_out, sign })
    }
}

/// `__aotc_fft(out, input, offset, kind, norm, outer, len_in, len_out, inner)`.
pub fn fft(kx: &mut Kx, call: &ExternCall) -> R<Work> {
    let [ExternArg::Buf(input), ExternArg::Size(offset), ExternArg::Size(kind), ExternArg::Size(norm), ExternArg::Size(outer), ExternArg::Size(len_in), ExternArg::Size(len_out), ExternArg::Size(inner)] =
        call.args.as_slice()
    else {
        return Err(format!("{} takes (input, offset, kind, norm, outer, len_in, len_out, inner)", call.name));
    };
    let shape = kind
        .as_int()
        .and_then(Shape::of)
        .ok_or_else(|| format!("{}: kind {kind} is not a static transform kind", call.name))?;
    let norm = norm
        .as_int()
        .filter(|v| matches!(*v, fft::NORM_NONE | fft::NORM_BY_ROOT_N | fft::NORM_BY_N))
        .ok_or_else(|| format!("{}: norm {norm} is not a static normalization", call.name))?;
    for buf in [call.out, *input] {
        let dtype = kx.program.buffers[buf].dtype;
        if dtype != DType::F32 {
            return Err(format!("{}: {buf} is {dtype}, the transform reads and writes float32", call.name));
        }
    }
    let lines = Lines { input: *input, offset, len_in, inner, shape: &shape };
    let ranges = [outer.clone(), len_out.clone(), inner.clone()];
    let len_in = reg(kx, len_in)?;
    // The signal length: the input's, or for c2r the output's.
    let n = if shape.real_out { reg(kx, len_out)? } else { len_in };
    let terms = match shape.real_out {
        // The Hermitian half spectrum's n / 2 + 1 entries (never past the input's end).
        true => {
            let half = kx.b.def("shr.s64", Kind::B64, &[n.into(), Op::Int(1)]);
            let half = kx.b.def("add.s64", Kind::B64, &[half.into(), Op::Int(1)]);
            kx.b.def("min.s64", Kind::B64, &[half.into(), len_in.into()])
        }
        false => n,
    };
    // An empty signal has no terms: any positive n keeps the scale finite there.
    let n_pos = kx.b.def("max.s64", Kind::B64, &[n.into(), Op::Int(1)]);
    let n_f = kx.b.def("cvt.rn.f64.s64", Kind::F64, &[n_pos.into()]);
    let m = &mut M { b: &mut kx.b };
    let scale = match norm {
        fft::NORM_BY_ROOT_N => {
            let root = m.sqrt(n_f);
            Some(m.div(Op::F64(1.0), root))
        }
        fft::NORM_BY_N => Some(m.div(Op::F64(1.0), n_f)),
        _ => None,
    };
    let angle_step = m.div(Op::F64(2.0 * PI), n_f);
    let total = kx.product(&ranges)?;
    let (first, step) = kx.global_thread();
    kx.strided_loop(first, total, step, &mut |kx, flat| {
        let [o, k, i] = <[Reg; 3]>::try_from(kx.unflatten(flat, &ranges)?)
            .map_err(|_| "an output index without its three coordinates".to_string())?;
        let (re, im) = lines.dft(kx, o, i, k, n, terms, angle_step)?;
        let out_width = if shape.real_out { 1 } else { 2 };
        let at = kx.b.def("mul.lo.s64", Kind::B64, &[flat.into(), Op::Int(out_width)]);
        let parts: &[(Reg, i64)] = if shape.real_out { &[(re, 0)] } else { &[(re, 0), (im, 1)] };
        for &(v, part) in parts {
            let m = &mut M { b: &mut kx.b };
            let v = match scale {
                Some(s) => m.mul(v, s),
                None => v,
            };
            let v = kx.b.def("cvt.rn.f32.f64", Kind::F32, &[v.into()]);
            let at = kx.b.def("add.s64", Kind::B64, &[at.into(), Op::Int(part)]);
            kx.store(call.out, at, v)?;
        }
        Ok(())
    })?;
    Ok(Work::Threads(SymExpr::product(ranges.iter())))
}

/// A size in an s64 register.
fn reg(kx: &mut Kx, s: &SymExpr) -> R<Reg> {
    let v = kx.size(s)?;
    Ok(kx.b.def("mov.s64", Kind::B64, &[v]))
}

/// The input lines: contiguous `[outer, len_in, inner]` values from float `offset`.
struct Lines<'a> {
    input: BufId,
    offset: &'a SymExpr,
    len_in: &'a SymExpr,
    inner: &'a SymExpr,
    shape: &'a Shape,
}

impl Lines<'_> {
    /// Output `k` of line (o, i) before scaling: the sum over `terms` values `x_j` of
    /// `x_j e^(sign 2 pi i jk / n)`, as f64 (re, im; only re for c2r). For c2r, `x_j` stands for itself
    /// and its mirror `x_(n-j) = conj(x_j)` (twice its real part's contribution), except
    /// x_0 and, n even, x_(n/2), whose imaginary parts a real signal's spectrum cannot
    /// have: they are dropped, as the CPU's transform drops them.
    #[allow(clippy::too_many_arguments)]
    fn dft(&self, kx: &mut Kx, o: Reg, i: Reg, k: Reg, n: Reg, terms: Reg, angle_step: Reg) -> R<(Reg, Reg)> {
        let width = if self.shape.real_in { 1 } else { 2 };
        // The float index of x_0, and the floats between x_j and x_(j+1).
        let (len_in, inner, offset) = (kx.size(self.len_in)?, reg(kx, self.inner)?, reg(kx, self.offset)?);
        let line = kx.b.def("mul.lo.s64", Kind::B64, &[o.into(), len_in]);
        let line = kx.b.def("mad.lo.s64", Kind::B64, &[line.into(), inner.into(), i.into()]);
        let at = kx.b.def("mad.lo.s64", Kind::B64, &[line.into(), Op::Int(width), offset.into()]);
        let stride = kx.b.def("mul.lo.s64", Kind::B64, &[inner.into(), Op::Int(width)]);
        let zero = |kx: &mut Kx| kx.b.def("mov.f64", Kind::F64, &[Op::F64(0.0)]);
        let (re, im) = (zero(kx), zero(kx));
        // (j k) mod n, stepped by k (< n) per term: no product that could overflow.
        let jk = kx.b.def("mov.s64", Kind::B64, &[Op::Int(0)]);
        let (first, one) =
            (kx.b.def("mov.s64", Kind::B64, &[Op::Int(0)]), kx.b.def("mov.s64", Kind::B64, &[Op::Int(1)]));
        kx.strided_loop(first, terms, one, &mut |kx, j| {
            let mut a = self.load(kx, at, 0)?;
            let mut b = if self.shape.real_in { zero(kx) } else { self.load(kx, at, 1)? };
            if self.shape.real_out {
                let first_term = kx.b.def("setp.eq.s64", Kind::Pred, &[j.into(), Op::Int(0)]);
                let twice_j = kx.b.def("add.s64", Kind::B64, &[j.into(), j.into()]);
                let nyquist = kx.b.def("setp.eq.s64", Kind::Pred, &[twice_j.into(), n.into()]);
                let m = &mut M { b: &mut kx.b };
                let alone = m.or(first_term, nyquist);
                let (a2, b2) = (m.add(a, a), m.add(b, b));
                a = m.sel(alone, a, a2);
                b = m.sel(alone, Op::F64(0.0), b2);
            }
            let t = kx.b.def("cvt.rn.f64.s64", Kind::F64, &[jk.into()]);
            let angle = M { b: &mut kx.b }.mul(t, angle_step);
            let (sin, cos) = math::sin_cos(&mut kx.b, angle);
            let m = &mut M { b: &mut kx.b };
            let sin = if self.shape.sign < 0.0 { m.mul(sin, Op::F64(-1.0)) } else { sin };
            // (a + ib)(cos + i sin) with sin signed.
            let neg_b = m.mul(b, Op::F64(-1.0));
            kx.b.set("fma.rn.f64", re, &[a.into(), cos.into(), re.into()]);
            kx.b.set("fma.rn.f64", re, &[neg_b.into(), sin.into(), re.into()]);
            if !self.shape.real_out {
                kx.b.set("fma.rn.f64", im, &[a.into(), sin.into(), im.into()]);
                kx.b.set("fma.rn.f64", im, &[b.into(), cos.into(), im.into()]);
            }
            kx.b.set("add.s64", at, &[at.into(), stride.into()]);
            kx.b.set("add.s64", jk, &[jk.into(), k.into()]);
            let wrapped = kx.b.def("setp.ge.s64", Kind::Pred, &[jk.into(), n.into()]);
            kx.b.emit_if(wrapped, false, "sub.s64", &[jk.into(), jk.into(), n.into()]);
            Ok(())
        })?;
        Ok((re, im))
    }

    /// Float `at + part` of the input, widened to f64.
    fn load(&self, kx: &mut Kx, at: Reg, part: i64) -> R<Reg> {
        let index = kx.b.def("add.s64", Kind::B64, &[at.into(), Op::Int(part)]);
        let v = kx.load(self.input, index, None)?;
        Ok(kx.b.def("cvt.f64.f32", Kind::F64, &[v.into()]))
    }
}
