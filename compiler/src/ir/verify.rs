//! The IR verifier: the invariants every pass must keep, checked on a whole [`Program`]
//! (as cranelift's verifier checks its functions). Debug builds, and so the tests, run it
//! after lowering and after every pass (`passes::optimize`); a violation is a compiler
//! bug, reported with the kernel and what is wrong.
//!
//! What it checks:
//! - every buffer a kernel, binding or loop names exists;
//! - no kernel writes a weight (read-only memory) or the index-error record (only
//!   checked indices write it);
//! - a loop variable in a body is one of the kernel's (its output dimensions, then its
//!   reduction dimensions);
//! - a load's dtype is its buffer's, a matmul's operands have its dtype (a packed right
//!   operand is float32), a data symbol's buffer is int64;
//! - a kernel writes no more elements than its output buffer holds (where both sizes are
//!   known at compile time);
//! - checked indices name a site of `index_sites` and the index-error record;
//! - kernels' graph nodes, data bindings and loop spans point inside their lists, loop
//!   spans in order;
//! - a placed buffer lies wholly inside a buffer of static size placed nowhere, both
//!   scratch.

use super::expr::{visit, Affine, ExprKind, E};
use super::program::{BufKind, ExternArg, Kernel, Program};
use super::BufId;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// Every violation of the module's invariants in `p`, one line each (kernel first).
pub fn verify(p: &Program) -> Result<(), String> {
    let mut errors = vec![];
    for (i, k) in p.kernels.iter().enumerate() {
        let mut err = |what: String| errors.push(format!("kernel {i} ({}): {what}", k.kind()));
        check_kernel(p, k, &mut err);
    }
    check_structure(p, &mut |what| errors.push(what));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

fn exists(p: &Program, buf: BufId) -> bool {
    p.buffers.is_valid(buf)
}

fn check_kernel(p: &Program, k: &Kernel, err: &mut impl FnMut(String)) {
    let out = k.out();
    if !exists(p, out) {
        return err(format!("writes {out}, which is not a buffer"));
    }
    match p.buffers[out].kind {
        BufKind::Weight(_) => err(format!("writes {out}, a weight (read-only)")),
        BufKind::IndexErrors => err(format!("writes {out}, the index-error record")),
        _ => {}
    }
    let out_elements = static_product(&p.buffers[out].sizes);
    match k {
        Kernel::Pointwise { ranges, body, .. } => {
            check_body(p, body, ranges.len(), err);
            check_writes(static_product(ranges), out_elements, out, err);
        }
        Kernel::Reduction { ranges, reduce, body, .. } => {
            check_body(p, body, ranges.len() + reduce.len(), err);
            check_writes(static_product(ranges), out_elements, out, err);
        }
        Kernel::Matmul(m) => {
            let operands = [("output", Some(m.out)), ("left operand", Some(m.a.buf)), ("bias", m.bias)];
            let packed = ("right operand", m.b.buf, if m.packed_b { DType::F32 } else { m.dtype });
            for (what, buf, dtype) in operands.into_iter().filter_map(|(w, b)| Some((w, b?, m.dtype))).chain([packed]) {
                if !exists(p, buf) {
                    err(format!("its {what} {buf} is not a buffer"));
                } else if p.buffers[buf].dtype != dtype {
                    err(format!("its {what} {buf} is {:?}, expected {dtype:?}", p.buffers[buf].dtype));
                }
            }
            check_writes(static_product([&m.batch, &m.m, &m.n]), out_elements, out, err);
        }
        Kernel::Extern(call) => {
            for arg in &call.args {
                let bufs = match arg {
                    ExternArg::Buf(b) | ExternArg::Workspace(b) => std::slice::from_ref(b),
                    ExternArg::Bufs(bs) => bs.as_slice(),
                    ExternArg::Size(_) | ExternArg::Sizes(_) => &[],
                };
                for b in bufs {
                    if !exists(p, *b) {
                        err(format!("passes {b}, which is not a buffer"));
                    }
                }
            }
        }
    }
}

/// The loads, indices and checked indices of a body with `vars` loop variables.
fn check_body(p: &Program, body: &E, vars: usize, err: &mut impl FnMut(String)) {
    let check_vars = |index: &Affine, err: &mut dyn FnMut(String)| {
        if let Some((v, _)) = index.terms.iter().find(|(v, _)| *v >= vars) {
            err(format!("uses loop variable i{v} of {vars}"));
        }
    };
    visit(body, &mut |e| match &e.kind {
        ExprKind::Load { buf, index } => {
            check_vars(index, err);
            check_load(p, *buf, e.dtype, err);
        }
        ExprKind::LoadAt { buf, .. } => check_load(p, *buf, e.dtype, err),
        ExprKind::Index(index) => check_vars(index, err),
        ExprKind::CheckIndex { site, record, .. } => {
            if *site >= p.index_sites.len() {
                err(format!("checks an index at site {site} of {}", p.index_sites.len()));
            }
            if p.index_errors != Some(*record) {
                err(format!("records index errors in {record}, not the index-error record"));
            }
        }
        _ => {}
    });
}

fn check_load(p: &Program, buf: BufId, dtype: DType, err: &mut impl FnMut(String)) {
    if !exists(p, buf) {
        err(format!("loads from {buf}, which is not a buffer"));
    } else if p.buffers[buf].dtype != dtype {
        err(format!("loads {dtype:?} from {buf}, which holds {:?}", p.buffers[buf].dtype));
    }
}

/// A kernel's `writes` elements fit in its output's `holds`, where both are known.
fn check_writes(writes: Option<i64>, holds: Option<i64>, out: BufId, err: &mut impl FnMut(String)) {
    if let (Some(w), Some(h)) = (writes, holds) {
        if w > h {
            err(format!("writes {w} elements into {out}, which holds {h}"));
        }
    }
}

fn static_product<'a>(sizes: impl IntoIterator<Item = &'a SymExpr>) -> Option<i64> {
    sizes.into_iter().try_fold(1i64, |acc, s| acc.checked_mul(s.as_int()?))
}

fn check_structure(p: &Program, err: &mut impl FnMut(String)) {
    let kernels = p.kernels.len();
    if p.kernel_nodes.len() > kernels {
        err(format!("{} kernels' graph nodes for {kernels} kernels", p.kernel_nodes.len()));
    }
    for (i, nodes) in p.kernel_nodes.iter().enumerate() {
        if let Some(n) = nodes.iter().find(|&&n| n >= p.nodes.len()) {
            err(format!("kernel {i}: graph node {n} of {}", p.nodes.len()));
        }
    }
    for d in &p.data_symbols {
        if d.after > kernels {
            err(format!("symbol s{} bound after kernel {} of {kernels}", d.sym, d.after));
        }
        if !exists(p, d.buf) {
            err(format!("symbol s{} bound from {}, which is not a buffer", d.sym, d.buf));
        } else if p.buffers[d.buf].dtype != DType::I64 {
            err(format!("symbol s{} bound from {}, a {:?} buffer", d.sym, d.buf, p.buffers[d.buf].dtype));
        }
    }
    for (&b, at) in &p.placements {
        check_placement(p, b, at.within, at.offset, err);
    }
    for (n, l) in p.loops.iter().enumerate() {
        if !(l.cond <= l.body && l.body <= l.end && l.end <= kernels) {
            err(format!("loop{n}: spans {}..{}..{} of {kernels} kernels", l.cond, l.body, l.end));
        }
        if !exists(p, l.flag) {
            err(format!("loop{n}: its flag {} is not a buffer", l.flag));
        }
    }
}

/// A placed buffer is scratch that lies wholly inside a scratch buffer placed nowhere,
/// both of static size.
fn check_placement(p: &Program, b: BufId, within: BufId, offset: u64, err: &mut impl FnMut(String)) {
    if !exists(p, b) || !exists(p, within) {
        return err(format!("{b} is placed in {within}, and one of them is not a buffer"));
    }
    if p.buffers[b].kind != BufKind::Scratch || p.buffers[within].kind != BufKind::Scratch {
        err(format!("{b} is placed in {within}: both must be scratch"));
    } else if p.placements.contains_key(&within) {
        err(format!("{b} is placed in {within}, which is placed itself"));
    } else if !matches!((p.buffers[b].static_bytes(), p.buffers[within].static_bytes()), (Some(n), Some(total)) if offset.checked_add(n).is_some_and(|end| end <= total))
    {
        err(format!("{b} is placed in {within} at byte {offset}: it must fit there, both sizes static"));
    }
}

#[cfg(test)]
mod tests {
    use super::verify;
    use crate::ir::expr::{load, Affine};
    use crate::ir::program::{BufKind, Kernel, Placement, Program};
    use crate::ir::BufId;
    use aotc_abi::sym::SymExpr;
    use aotc_abi::DType;

    fn program() -> Program {
        let mut p = Program::default();
        let x = p.add_buffer("x", DType::F32, vec![SymExpr::Int(4)], BufKind::Input(0));
        let y = p.add_buffer("y", DType::F32, vec![SymExpr::Int(4)], BufKind::Scratch);
        p.kernels.push(Kernel::Pointwise {
            out: y,
            ranges: vec![SymExpr::Int(4)],
            body: load(x, DType::F32, Affine::var(0)),
        });
        p
    }

    #[test]
    fn a_well_formed_program_passes() {
        assert_eq!(verify(&program()), Ok(()));
    }

    #[test]
    fn each_broken_invariant_is_named() {
        // What the message must say, and how to break the program.
        type Case = (&'static str, fn(&mut Program));
        let cases: [Case; 7] = [
            ("uses loop variable i1 of 1", |p| {
                let Kernel::Pointwise { body, .. } = &mut p.kernels[0] else { unreachable!() };
                *body = load(crate::ir::BufId::from_u32(0), DType::F32, Affine::var(1));
            }),
            ("loads F64 from buf0, which holds F32", |p| {
                let Kernel::Pointwise { body, .. } = &mut p.kernels[0] else { unreachable!() };
                *body = load(crate::ir::BufId::from_u32(0), DType::F64, Affine::var(0));
            }),
            ("writes 8 elements into buf1, which holds 4", |p| {
                let Kernel::Pointwise { ranges, .. } = &mut p.kernels[0] else { unreachable!() };
                ranges[0] = SymExpr::Int(8);
            }),
            ("a weight (read-only)", |p| {
                let w = p.add_buffer("w", DType::F32, vec![SymExpr::Int(4)], BufKind::Weight(0));
                let Kernel::Pointwise { out, .. } = &mut p.kernels[0] else { unreachable!() };
                *out = w;
            }),
            ("which is not a buffer", |p| {
                let Kernel::Pointwise { body, .. } = &mut p.kernels[0] else { unreachable!() };
                *body = load(crate::ir::BufId::from_u32(9), DType::F32, Affine::var(0));
            }),
            ("both must be scratch", |p| {
                let at = Placement { within: BufId::from_u32(0), offset: 0 };
                p.placements.insert(BufId::from_u32(1), at);
            }),
            ("it must fit there", |p| {
                let whole = p.add_buffer("whole", DType::F32, vec![SymExpr::Int(6)], BufKind::Scratch);
                p.placements.insert(BufId::from_u32(1), Placement { within: whole, offset: 12 });
            }),
        ];
        for (want, break_it) in cases {
            let mut p = program();
            break_it(&mut p);
            let got = verify(&p).expect_err(want);
            assert!(got.contains(want), "expected {want:?} in {got:?}");
        }
    }
}
