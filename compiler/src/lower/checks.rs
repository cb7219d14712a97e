//! The conditions on sizes that the generated code relies on for in-bounds memory access.
//!
//! The generated code trusts every size it is given, and the archive that records sizes
//! is untrusted, so each shape rule states what it needs (a view keeps the element count,
//! split sizes add up, an index lies inside its dimension, sizes are not negative, a
//! value fits the memory limit) through [`Lowerer::require`]: decided now when the sizes
//! are static or the symbols' ranges decide it (`SymExpr::equal_under`), otherwise
//! recorded as a run-time guard that the library checks on every call before touching
//! memory (`Manifest::guards`).

use super::tensor::TensorValue;
use super::Lowerer;
use crate::ir::expr::{Affine, E};
use aotc_abi::manifest::{Guard, GuardKind, GuardOp, SymbolRange};
use aotc_abi::sym::{EvalError, SymExpr};
use aotc_abi::DType;

/// The largest tensor a program may hold, realized or not: 64 GiB. Far above what a CPU
/// model needs, far below where byte and index arithmetic could overflow.
pub const MAX_TENSOR_BYTES: i64 = 1 << 36;

/// True when `e` cannot be negative for any symbol values allowed by the ranges
/// `symbols` (input dimensions start at 0 or more; a data symbol may be negative).
pub fn provably_non_negative(e: &SymExpr, symbols: &[SymbolRange]) -> bool {
    let positive_int = |e: &SymExpr| e.as_int().is_some_and(|v| v > 0);
    let all = |xs: &[SymExpr]| xs.iter().all(|x| provably_non_negative(x, symbols));
    match e {
        SymExpr::Int(v) => *v >= 0,
        SymExpr::Sym(s) => symbols.get(*s as usize).is_some_and(|r| r.min >= 0),
        SymExpr::Add(xs) | SymExpr::Mul(xs) | SymExpr::Min(xs) => all(xs),
        SymExpr::Max(xs) => xs.iter().any(|x| provably_non_negative(x, symbols)),
        SymExpr::FloorDiv(a, b) => provably_non_negative(a, symbols) && positive_int(b),
        SymExpr::Mod(_, b) => positive_int(b),
    }
}

impl Lowerer<'_> {
    /// [`provably_non_negative`] with this program's symbol ranges.
    pub fn non_negative(&self, e: &SymExpr) -> bool {
        provably_non_negative(e, &self.symbols)
    }

    /// Requires `lhs op rhs` of the node being lowered; `rule` says what it protects.
    /// Decided now when the symbols' ranges decide it (`min(1, s0) == 1` for `s0 >= 1`),
    /// refused when it fails for the export's example sizes, else a run-time guard.
    pub fn require(&mut self, lhs: SymExpr, op: GuardOp, rhs: SymExpr, rule: &str) -> Result<(), String> {
        self.check(lhs, op, rhs, rule, GuardKind::Shape)
    }

    /// [`Lowerer::require`] for a check the program states itself (an assert): its run-time
    /// failure is `AOTC_ERR_ASSERT` with `message`, the assert's own.
    pub fn require_assert(&mut self, lhs: SymExpr, op: GuardOp, rhs: SymExpr, message: &str) -> Result<(), String> {
        self.check(lhs, op, rhs, message, GuardKind::Assert)
    }

    fn check(&mut self, lhs: SymExpr, op: GuardOp, rhs: SymExpr, rule: &str, kind: GuardKind) -> Result<(), String> {
        if lhs == rhs {
            return Ok(());
        }
        let decided = match op {
            GuardOp::Eq => lhs.equal_under(&rhs, &self.symbols),
            GuardOp::Le => lhs.le_under(&rhs, &self.symbols),
        };
        if decided == Some(true) {
            return Ok(());
        }
        let (lhs, rhs) = (lhs.simplify(&self.symbols), rhs.simplify(&self.symbols));
        let fails = |l: i64, r: i64| format!("{rule}: {lhs} {} {rhs} does not hold ({l} vs {r})", op.symbol());
        // With the export's example sizes: refuse now what would fail on every call, and
        // catch arithmetic that overflows (static values included).
        match (lhs.eval(&self.hints), rhs.eval(&self.hints)) {
            (Ok(l), Ok(r)) if !op.holds(l, r) => return Err(fails(l, r)),
            (Ok(_), Ok(_)) if lhs.is_static() && rhs.is_static() => return Ok(()),
            (Err(e @ (EvalError::Overflow | EvalError::DivisionByZero)), _)
            | (_, Err(e @ (EvalError::Overflow | EvalError::DivisionByZero))) => {
                return Err(format!("{rule}: {e} in {lhs} {} {rhs}", op.symbol()));
            }
            _ => {}
        }
        if decided == Some(false) {
            return Err(format!("{rule}: {lhs} {} {rhs} holds for no size in the symbols' ranges", op.symbol()));
        }
        let guard = Guard { lhs, op, rhs, what: format!("{}: {rule}", self.node_desc), kind };
        if self.guard_set.insert((guard.lhs.clone(), guard.op, guard.rhs.clone())) {
            self.guards.push(guard);
        }
        Ok(())
    }

    /// Every dimension of `v` is >= 0 and, were it realized, it would fit
    /// [`MAX_TENSOR_BYTES`]: a bound on every allocation and every loop nest.
    pub fn check_sizes(&mut self, v: &TensorValue) -> Result<(), String> {
        for (d, s) in v.sizes.iter().enumerate() {
            if !self.non_negative(s) {
                self.require(SymExpr::Int(0), GuardOp::Le, s.clone(), &format!("dimension {d} must not be negative"))?;
            }
        }
        let bytes = SymExpr::mul(v.sizes.iter().cloned().chain([SymExpr::Int(v.dtype.size() as i64)]));
        self.require(bytes, GuardOp::Le, SymExpr::Int(MAX_TENSOR_BYTES), "the tensor must fit in 64 GiB")
    }

    /// The one element of `x`, which must hold exactly one (`rule` says why: item(), an
    /// assert's condition, a cond's predicate).
    pub fn only_element(&mut self, x: &TensorValue, rule: &str) -> Result<E, String> {
        self.require(SymExpr::product(x.sizes.iter()), GuardOp::Eq, SymExpr::Int(1), rule)?;
        Ok(x.load(&vec![Affine::constant(SymExpr::Int(0)); x.rank()]))
    }

    /// `v` has exactly `dtype` and `sizes`: a value written into memory laid out for them
    /// (a mutated buffer or input) must not be larger or of another element size.
    pub fn check_layout(&mut self, v: &TensorValue, dtype: DType, sizes: &[SymExpr], what: &str) -> Result<(), String> {
        if v.dtype != dtype || v.rank() != sizes.len() {
            return Err(format!(
                "{what} is {}[{}], but its target is {dtype}[{}]",
                v.dtype,
                show(&v.sizes),
                show(sizes)
            ));
        }
        for (d, (got, want)) in v.sizes.iter().zip(sizes).enumerate() {
            self.require(got.clone(), GuardOp::Eq, want.clone(), &format!("{what}: dimension {d} matches its target"))?;
        }
        Ok(())
    }
}

pub fn show(sizes: &[SymExpr]) -> String {
    sizes.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_negativity_is_proven_only_when_it_holds() {
        let s = || SymExpr::Sym(0);
        let size = [SymbolRange { name: "s0".into(), min: 2, max: None }];
        let nn = |e: &SymExpr| provably_non_negative(e, &size);
        assert!(nn(&SymExpr::add([SymExpr::mul([s(), 2.into()]), 1.into()])));
        assert!(nn(&SymExpr::floor_div(s(), 4.into())));
        assert!(nn(&SymExpr::max(SymExpr::add([s(), (-3).into()]), 0.into())));
        assert!(!nn(&SymExpr::add([s(), (-3).into()])));
        assert!(!nn(&SymExpr::floor_div(s(), (-1).into())));
        // A data symbol (an item()) may be negative.
        let data = [SymbolRange { name: "u0".into(), min: i64::MIN, max: Some(5) }];
        assert!(!provably_non_negative(&s(), &data));
        assert!(provably_non_negative(&SymExpr::max(s(), 0.into()), &data));
    }
}
