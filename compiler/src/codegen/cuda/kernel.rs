//! One kernel's entry: its parameters (buffer addresses, then symbolic sizes), the
//! context the expression code reads them through, and the pointwise kernel: one thread
//! per output element in a grid-stride loop over the flat output index.

use super::expr;
use super::num::{mem_type, Num};
use super::ptx::{Body, Kind, Label, Op, Reg};
use crate::codegen::cpu::half::is_half;
use crate::ir::expr::E;
use crate::ir::{BufId, Kernel, Program};
use aotc_abi::sym::SymExpr;
use std::collections::HashMap;

pub type R<T> = Result<T, String>;

/// Threads per CTA of every kernel.
pub const THREADS: u32 = 256;

/// State while emitting one kernel.
pub struct Kx<'p> {
    pub b: Body,
    pub program: &'p Program,
    bases: HashMap<BufId, Reg>,
    sizes: HashMap<SymExpr, Reg>,
}

/// A new context for kernel `k`: loads every buffer address and size parameter, and
/// returns the parameter list (PTX type, name) with it.
pub fn enter<'p>(program: &'p Program, k: &Kernel) -> (Kx<'p>, Vec<(&'static str, String)>) {
    let (bufs, syms) = k.inputs();
    let mut b = Body::default();
    let mut params = vec![];
    let mut bases = HashMap::new();
    for (i, buf) in bufs.iter().enumerate() {
        let name = format!("buf{i}");
        let raw = b.def("ld.param.u64", Kind::B64, &[Op::AtSym(name.clone(), 0)]);
        let global = b.def("cvta.to.global.u64", Kind::B64, &[raw.into()]);
        bases.insert(*buf, global);
        params.push((".u64", name));
    }
    let mut sizes = HashMap::new();
    for (i, s) in syms.iter().enumerate() {
        let name = format!("size{i}");
        let v = b.def("ld.param.s64", Kind::B64, &[Op::AtSym(name.clone(), 0)]);
        sizes.insert(s.clone(), v);
        params.push((".s64", name));
    }
    (Kx { b, program, bases, sizes }, params)
}

impl Kx<'_> {
    /// A size as an operand: an immediate when static, else its parameter.
    pub fn size(&self, s: &SymExpr) -> R<Op> {
        match s.as_int() {
            Some(v) => Ok(Op::Int(v)),
            None => self
                .sizes
                .get(s)
                .map(|r| Op::Reg(*r))
                .ok_or_else(|| format!("size {s} is not a parameter of the kernel")),
        }
    }

    /// The product of `sizes` (an s64 register), computed from their operands.
    pub fn product(&mut self, sizes: &[SymExpr]) -> R<Reg> {
        let mut acc = self.b.def(
            "mov.s64",
            Kind::B64,
            &[Op::Int(SymExpr::product(sizes.iter().filter(|s| s.is_static())).as_int().unwrap_or(1))],
        );
        for s in sizes.iter().filter(|s| !s.is_static()) {
            let v = self.size(s)?;
            acc = self.b.def("mul.lo.s64", Kind::B64, &[acc.into(), v]);
        }
        Ok(acc)
    }

    /// The address of element `index` (s64) of `buf`.
    pub fn elem_addr(&mut self, buf: BufId, index: Reg) -> R<Reg> {
        let base = *self.bases.get(&buf).ok_or_else(|| format!("{buf} is not a parameter of the kernel"))?;
        let size = self.program.buffers[buf].dtype.size() as i64;
        Ok(self.b.def("mad.lo.s64", Kind::B64, &[index.into(), Op::Int(size), base.into()]))
    }

    /// Element `index` of `buf` in its compute register (16-bit floats widened to f32),
    /// loaded only where `guard` holds (else the register keeps `fallback`).
    pub fn load(&mut self, buf: BufId, index: Reg, guard: Option<(Reg, Reg)>) -> R<Reg> {
        let dtype = self.program.buffers[buf].dtype;
        let addr = self.elem_addr(buf, index)?;
        let num = Num::of(dtype);
        let dest = match guard {
            Some((_, fallback)) => fallback,
            None => self.b.reg(if is_half(dtype) { Kind::B16 } else { num.kind() }),
        };
        let ld = format!("ld.global.{}", mem_type(dtype));
        let raw = if is_half(dtype) { self.b.reg(Kind::B16) } else { dest };
        if is_half(dtype) && guard.is_some() {
            self.b.set("mov.b16", raw, &[Op::Int(0)]);
        }
        match guard {
            Some((p, _)) => self.b.emit_if(p, false, &ld, &[raw.into(), Op::At(addr, 0)]),
            None => self.b.set(&ld, raw, &[Op::At(addr, 0)]),
        }
        if is_half(dtype) {
            let h = super::num::half_type(dtype).unwrap_or("f16");
            return Ok(match guard {
                Some(_) => {
                    self.b.set(&format!("cvt.f32.{h}"), dest, &[raw.into()]);
                    dest
                }
                None => self.b.def(&format!("cvt.f32.{h}"), Kind::F32, &[raw.into()]),
            });
        }
        Ok(dest)
    }

    /// Stores `v` (a compute register of `buf`'s dtype) as element `index` of `buf`;
    /// 16-bit floats are rounded to nearest, ties to even.
    pub fn store(&mut self, buf: BufId, index: Reg, v: Reg) -> R<()> {
        let dtype = self.program.buffers[buf].dtype;
        let addr = self.elem_addr(buf, index)?;
        let v = match super::num::half_type(dtype) {
            Some(h) => self.b.def(&format!("cvt.rn.{h}.f32"), Kind::B16, &[v.into()]),
            None => v,
        };
        self.b.emit(&format!("st.global.{}", mem_type(dtype)), &[Op::At(addr, 0), v.into()]);
        Ok(())
    }

    /// Splits the flat index `flat` (s64) of the row-major space `ranges` into one s64
    /// register per dimension.
    pub fn unflatten(&mut self, flat: Reg, ranges: &[SymExpr]) -> R<Vec<Reg>> {
        let mut vars = vec![flat; ranges.len()];
        let mut rest = flat;
        for d in (0..ranges.len()).rev() {
            if d == 0 {
                vars[0] = rest;
                break;
            }
            let n = self.size(&ranges[d])?;
            if n == Op::Int(1) {
                vars[d] = self.b.def("mov.s64", Kind::B64, &[Op::Int(0)]);
                continue;
            }
            vars[d] = self.b.def("rem.s64", Kind::B64, &[rest.into(), n.clone()]);
            rest = self.b.def("div.s64", Kind::B64, &[rest.into(), n]);
        }
        Ok(vars)
    }

    /// `for i = first; i < count; i += step { body(i) }` over s64 values.
    pub fn strided_loop(
        &mut self,
        first: Reg,
        count: Reg,
        step: Reg,
        body: &mut dyn FnMut(&mut Self, Reg) -> R<()>,
    ) -> R<()> {
        let i = self.b.reg(Kind::B64);
        self.b.set("mov.s64", i, &[first.into()]);
        let (top, done): (Label, Label) = (self.b.label(), self.b.label());
        self.b.place(top);
        let finished = self.b.def("setp.ge.s64", Kind::Pred, &[i.into(), count.into()]);
        self.b.bra_if(finished, false, done);
        body(self, i)?;
        self.b.set("add.s64", i, &[i.into(), step.into()]);
        self.b.bra(top);
        self.b.place(done);
        Ok(())
    }

    /// `%ctaid.x * %ntid.x + %tid.x` and `%nctaid.x * %ntid.x` as s64: a grid-stride
    /// loop's first index and step over threads.
    pub fn global_thread(&mut self) -> (Reg, Reg) {
        let cta = self.b.def("mov.u32", Kind::B32, &[Op::Special("%ctaid.x")]);
        let ntid = self.b.def("mov.u32", Kind::B32, &[Op::Special("%ntid.x")]);
        let tid = self.b.def("mov.u32", Kind::B32, &[Op::Special("%tid.x")]);
        let nctas = self.b.def("mov.u32", Kind::B32, &[Op::Special("%nctaid.x")]);
        let base = self.b.def("mul.wide.u32", Kind::B64, &[cta.into(), ntid.into()]);
        let tid64 = self.b.def("cvt.u64.u32", Kind::B64, &[tid.into()]);
        let first = self.b.def("add.s64", Kind::B64, &[base.into(), tid64.into()]);
        let step = self.b.def("mul.wide.u32", Kind::B64, &[nctas.into(), ntid.into()]);
        (first, step)
    }

    /// `%ctaid.x`, `%nctaid.x` (s64) and `%tid.x` (u32): a grid-stride loop over CTAs.
    pub fn cta(&mut self) -> (Reg, Reg, Reg) {
        let cta = self.b.def("mov.u32", Kind::B32, &[Op::Special("%ctaid.x")]);
        let nctas = self.b.def("mov.u32", Kind::B32, &[Op::Special("%nctaid.x")]);
        let tid = self.b.def("mov.u32", Kind::B32, &[Op::Special("%tid.x")]);
        let first = self.b.def("cvt.u64.u32", Kind::B64, &[cta.into()]);
        let step = self.b.def("cvt.u64.u32", Kind::B64, &[nctas.into()]);
        (first, step, tid)
    }
}

/// `out[i...] = body(i...)`, one thread per element of the flat output index.
pub fn pointwise(kx: &mut Kx, out: BufId, ranges: &[SymExpr], body: &E) -> R<()> {
    let total = kx.product(ranges)?;
    let (first, step) = kx.global_thread();
    kx.strided_loop(first, total, step, &mut |kx, flat| {
        let vars = kx.unflatten(flat, ranges)?;
        let v = expr::emit(kx, body, &vars)?;
        kx.store(out, flat, v)
    })
}
