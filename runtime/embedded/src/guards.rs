//! Run-time guards: conditions on symbolic sizes the compiler could not decide, checked
//! on every call once the inputs have bound the symbols, before any memory is touched.

use crate::error::{err, Result};
use aotc_abi::manifest::{Guard, GuardKind, Manifest};
use aotc_abi::status;
use std::cell::Cell;

/// Fails on the first guard that does not hold for `syms` (or cannot be evaluated),
/// naming the node it protects: `AOTC_ERR_SHAPE` for a size rule, `AOTC_ERR_ASSERT` for
/// the program's own check.
pub fn check_guards<'g>(guards: impl IntoIterator<Item = &'g Guard>, syms: &[Option<i64>]) -> Result<()> {
    for g in guards {
        let op = g.op.symbol();
        let code = match g.kind {
            GuardKind::Shape => status::SHAPE,
            GuardKind::Assert => status::ASSERT,
        };
        let (l, r) = match (g.lhs.eval(syms), g.rhs.eval(syms)) {
            (Ok(l), Ok(r)) => (l, r),
            (Err(e), _) | (_, Err(e)) => {
                return err(code, format!("{}: cannot check {} {op} {}: {e}", g.what, g.lhs, g.rhs))
            }
        };
        if !g.op.holds(l, r) {
            return err(code, format!("{}: {} {op} {} does not hold ({l} vs {r})", g.what, g.lhs, g.rhs));
        }
    }
    Ok(())
}

/// [`check_guards`] for the guards of `m` that stage `stage` can evaluate (those whose
/// data symbols earlier stages bound).
pub fn check_stage_guards(m: &Manifest, stage: usize, syms: &[Option<i64>]) -> Result<()> {
    check_guards(m.guards.iter().filter(|g| m.stage_of(&g.lhs).max(m.stage_of(&g.rhs)) == stage), syms)
}

/// Reads the index error record the generated code fills (site + 1, index, dimension
/// size, as little-endian int64; site 0: no error) and fails with `AOTC_ERR_INDEX`.
pub fn check_index_errors(record: &[u8], sites: &[String]) -> Result<()> {
    let field =
        |i: usize| record.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(i64::from_le_bytes).unwrap_or(0);
    let site = field(0);
    if site == 0 {
        return Ok(());
    }
    let what = usize::try_from(site - 1).ok().and_then(|s| sites.get(s)).map_or("an index", |s| s.as_str());
    err(status::INDEX, format!("{what}: index {} is out of range for a dimension of size {}", field(1), field(2)))
}

thread_local! {
    /// The first extern kernel of the running stage that refused its arguments: kernels
    /// are never split over threads, so each runs on the thread that runs the stage.
    static REFUSED: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Called by an extern kernel (`__aotc_conv2d_f32`...) whose arguments describe no call
/// it can make (a compiler bug), instead of writing anything: the stage fails.
pub fn refuse_extern_call(kernel: &'static str) {
    REFUSED.with(|r| {
        if r.get().is_none() {
            r.set(Some(kernel));
        }
    });
}

/// Fails with `AOTC_ERR_INTERNAL` when an extern kernel of the stage just run on this
/// thread refused its arguments (its output was not written), and clears the record.
pub fn check_extern_calls() -> Result<()> {
    match REFUSED.with(Cell::take) {
        None => Ok(()),
        Some(kernel) => err(
            status::INTERNAL,
            format!("internal error: extern kernel {kernel} was called with inconsistent arguments; it wrote nothing"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aotc_abi::manifest::GuardOp;
    use aotc_abi::sym::SymExpr;

    fn guard(lhs: SymExpr, op: GuardOp, rhs: SymExpr) -> Guard {
        Guard { lhs, op, rhs, what: "node 'view_3' (view)".into(), kind: GuardKind::Shape }
    }

    fn message(guards: &[Guard], syms: &[Option<i64>]) -> Option<(i32, String)> {
        check_guards(guards, syms).err().map(|e| (e.code, e.message))
    }

    #[test]
    fn an_extern_kernel_refusing_its_arguments_fails_the_stage() {
        let refused = |kernel: &str| {
            let e = check_extern_calls().expect_err("the kernel refused its arguments");
            assert_eq!(e.code, status::INTERNAL);
            assert!(
                e.message.contains(&format!("extern kernel {kernel} was called with inconsistent")),
                "{}",
                e.message
            );
            assert!(check_extern_calls().is_ok(), "the check clears the record");
        };
        assert!(check_extern_calls().is_ok());
        let (mut out, x) = ([7.0f32; 4], [1.0f32; 4]);
        let (o, p) = (out.as_mut_ptr(), x.as_ptr());
        // SAFETY: each call's arguments are refused before any pointer is read.
        unsafe {
            crate::conv::__aotc_conv2d_f32(o, p, p, p, o, p, p, p, [1i64, 2].as_ptr(), 2);
            refused("__aotc_conv2d_f32");
            crate::conv::__aotc_max_pool2d_f32(o, p, [3i64].as_ptr(), 1);
            refused("__aotc_max_pool2d_f32");
            crate::fft::__aotc_fft(o, p, -1, 0, 0, 1, 2, 2, 1);
            refused("__aotc_fft");
            crate::fft::__aotc_fft(o, p, 0, 99, 0, 1, 2, 2, 1);
            refused("__aotc_fft");
            crate::rows::__aotc_softmax_f32(o, p, i64::MAX, 4, 0);
            refused("__aotc_softmax_f32");
            crate::rows::__aotc_softmax_f32(o, p, 1, 4, 9);
            refused("__aotc_softmax_f32");
            crate::rows::__aotc_layer_norm_f32(o, p, p, p, -1, 4, 0, 0, 0);
            refused("__aotc_layer_norm_f32");
            crate::gelu::__aotc_gelu_f32(o, p, -4);
            refused("__aotc_gelu_f32");
            // A consistent empty call writes nothing and succeeds.
            crate::gelu::__aotc_gelu_f32(o, p, 0);
        }
        assert!(check_extern_calls().is_ok());
        assert_eq!(out, [7.0; 4], "a refused call writes nothing");
    }

    #[test]
    fn guards_that_hold_pass() {
        let s0 = SymExpr::Sym(0);
        let guards = [
            guard(SymExpr::mul([s0.clone(), 4.into()]), GuardOp::Eq, 12.into()),
            guard(s0.clone(), GuardOp::Le, SymExpr::Sym(1)),
        ];
        assert!(message(&guards, &[Some(3), Some(3)]).is_none());
        assert!(message(&[], &[]).is_none());
    }

    #[test]
    fn a_false_guard_fails_with_shape_and_names_the_node() {
        let guards = [guard(SymExpr::mul([SymExpr::Sym(0), 4.into()]), GuardOp::Eq, 12.into())];
        let (code, msg) = message(&guards, &[Some(5)]).expect("5*4 != 12");
        assert_eq!(code, status::SHAPE);
        assert_eq!(msg, "node 'view_3' (view): 4*s0 == 12 does not hold (20 vs 12)");
        let le = [guard(SymExpr::Sym(0), GuardOp::Le, 2.into())];
        assert_eq!(message(&le, &[Some(3)]).unwrap().1, "node 'view_3' (view): s0 <= 2 does not hold (3 vs 2)");
    }

    #[test]
    fn a_guard_that_cannot_be_evaluated_fails() {
        let unbound = [guard(SymExpr::Sym(1), GuardOp::Eq, 1.into())];
        let (code, msg) = message(&unbound, &[Some(2)]).expect("s1 is unbound");
        assert_eq!(code, status::SHAPE);
        assert!(msg.contains("symbol s1 has no value"), "{msg}");
        let overflow = [guard(SymExpr::mul([SymExpr::Sym(0), SymExpr::Sym(0)]), GuardOp::Le, 1.into())];
        assert!(message(&overflow, &[Some(i64::MAX)]).unwrap().1.contains("overflow"));
    }
}
