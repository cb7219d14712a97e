//! Symbolic integers: sizes, strides and offsets that depend on dynamic input dimensions.
//!
//! The compiler builds them (from torch.export's sympy expressions and from shape rules);
//! the support code in the `.so` evaluates them once per call from the bound symbols.
//! The smart constructors fold constants, so a static model only ever sees `Int`; while a
//! program is compiled they also fold what its symbols' ranges decide ([`bounds`]).

use serde::{Deserialize, Serialize};
use std::fmt;

mod bounds;
pub use bounds::{assume_equal, equal_in_scope, set_scope_ranges, take_assumptions, Interval, RangeScope, MAX_DEPTH};

/// Index of a symbol in the manifest's symbol table (`s77` in the export may become `Sym(0)`).
pub type SymId = u32;

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SymExpr {
    Int(i64),
    Sym(SymId),
    Add(Vec<SymExpr>),
    Mul(Vec<SymExpr>),
    /// Python floor division.
    FloorDiv(Box<SymExpr>, Box<SymExpr>),
    /// Python modulo (the sign of the divisor).
    Mod(Box<SymExpr>, Box<SymExpr>),
    Max(Vec<SymExpr>),
    Min(Vec<SymExpr>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvalError {
    DivisionByZero,
    Overflow,
    UnboundSymbol(SymId),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::DivisionByZero => f.write_str("division by zero in a symbolic size"),
            EvalError::Overflow => f.write_str("integer overflow in a symbolic size"),
            EvalError::UnboundSymbol(s) => write!(f, "symbol s{s} has no value"),
        }
    }
}

pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let q = a.checked_div(b)?;
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) { q - 1 } else { q })
}

pub fn py_mod(a: i64, b: i64) -> Option<i64> {
    let q = floor_div(a, b)?;
    a.checked_sub(q.checked_mul(b)?)
}

impl SymExpr {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            SymExpr::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn is_static(&self) -> bool {
        self.as_int().is_some()
    }

    /// Flattens nested `Add`s (or `Mul`s) into one list and folds the constants into
    /// `c`, starting from `identity`. A constant whose fold would overflow stays a term
    /// of its own: the expression is then no longer static, and evaluating it reports
    /// the overflow instead of a wrapped value.
    fn flatten(
        terms: impl IntoIterator<Item = SymExpr>,
        identity: i64,
        fold: fn(i64, i64) -> Option<i64>,
        nested: fn(SymExpr) -> Result<Vec<SymExpr>, SymExpr>,
    ) -> (i64, Vec<SymExpr>) {
        let mut c = identity;
        let mut rest = Vec::new();
        for t in terms {
            for x in nested(t).unwrap_or_else(|single| vec![single]) {
                match x {
                    SymExpr::Int(v) => match fold(c, v) {
                        Some(folded) => c = folded,
                        None => rest.push(SymExpr::Int(v)),
                    },
                    other => rest.push(other),
                }
            }
        }
        (c, rest)
    }

    /// Sum with constant folding and flattening.
    pub fn add(terms: impl IntoIterator<Item = SymExpr>) -> SymExpr {
        let (c, mut rest) = Self::flatten(terms, 0, i64::checked_add, |t| match t {
            SymExpr::Add(xs) => Ok(xs),
            other => Err(other),
        });
        if c != 0 || rest.is_empty() {
            rest.push(SymExpr::Int(c));
        }
        if rest.len() == 1 {
            rest.pop().unwrap()
        } else {
            SymExpr::Add(rest)
        }
    }

    /// Product with constant folding and flattening.
    pub fn mul(factors: impl IntoIterator<Item = SymExpr>) -> SymExpr {
        let (c, mut rest) = Self::flatten(factors, 1, i64::checked_mul, |t| match t {
            SymExpr::Mul(xs) => Ok(xs),
            other => Err(other),
        });
        if c == 0 {
            return SymExpr::Int(0);
        }
        if c != 1 || rest.is_empty() {
            rest.insert(0, SymExpr::Int(c));
        }
        if rest.len() == 1 {
            rest.pop().unwrap()
        } else {
            SymExpr::Mul(rest)
        }
    }

    /// `self / d` when it divides exactly term by term (`8*s0 / 2` is `4*s0`).
    fn exact_quotient(&self, d: i64) -> Option<SymExpr> {
        match self {
            SymExpr::Int(v) if v % d == 0 => Some(SymExpr::Int(v / d)),
            SymExpr::Mul(xs) => match xs.first() {
                Some(SymExpr::Int(c)) if c % d == 0 => {
                    Some(SymExpr::mul(std::iter::once(SymExpr::Int(c / d)).chain(xs[1..].iter().cloned())))
                }
                _ => None,
            },
            SymExpr::Add(xs) => xs.iter().map(|x| x.exact_quotient(d)).collect::<Option<Vec<_>>>().map(SymExpr::add),
            _ => None,
        }
    }

    pub fn floor_div(a: SymExpr, b: SymExpr) -> SymExpr {
        if let Some(q) = b.as_int().filter(|&d| d > 0).and_then(|d| a.exact_quotient(d)) {
            return q;
        }
        match (&a, &b) {
            (SymExpr::Int(x), SymExpr::Int(y)) if floor_div(*x, *y).is_some() => {
                SymExpr::Int(floor_div(*x, *y).unwrap_or_default())
            }
            (_, SymExpr::Int(1)) => a,
            _ if a == b => SymExpr::Int(1),
            _ => bounds::in_scope(SymExpr::FloorDiv(Box::new(a), Box::new(b))),
        }
    }

    pub fn modulo(a: SymExpr, b: SymExpr) -> SymExpr {
        match (&a, &b) {
            (SymExpr::Int(x), SymExpr::Int(y)) if py_mod(*x, *y).is_some() => {
                SymExpr::Int(py_mod(*x, *y).unwrap_or_default())
            }
            (_, SymExpr::Int(1)) => SymExpr::Int(0),
            _ => bounds::in_scope(SymExpr::Mod(Box::new(a), Box::new(b))),
        }
    }

    pub fn max(a: SymExpr, b: SymExpr) -> SymExpr {
        match (&a, &b) {
            (SymExpr::Int(x), SymExpr::Int(y)) => SymExpr::Int(*x.max(y)),
            _ if a == b => a,
            _ => bounds::in_scope(SymExpr::Max(vec![a, b])),
        }
    }

    pub fn min(a: SymExpr, b: SymExpr) -> SymExpr {
        match (&a, &b) {
            (SymExpr::Int(x), SymExpr::Int(y)) => SymExpr::Int(*x.min(y)),
            _ if a == b => a,
            _ => bounds::in_scope(SymExpr::Min(vec![a, b])),
        }
    }

    pub fn product<'a>(dims: impl IntoIterator<Item = &'a SymExpr>) -> SymExpr {
        SymExpr::mul(dims.into_iter().cloned())
    }

    /// Evaluates with `syms[id]` as the value of each symbol; overflow is an error.
    pub fn eval(&self, syms: &[Option<i64>]) -> Result<i64, EvalError> {
        let fold = |xs: &[SymExpr], init: i64, f: fn(i64, i64) -> Option<i64>| -> Result<i64, EvalError> {
            xs.iter().try_fold(init, |acc, x| f(acc, x.eval(syms)?).ok_or(EvalError::Overflow))
        };
        let divide = |a: &SymExpr, b: &SymExpr, f: fn(i64, i64) -> Option<i64>| match (a.eval(syms)?, b.eval(syms)?) {
            (_, 0) => Err(EvalError::DivisionByZero),
            (a, b) => f(a, b).ok_or(EvalError::Overflow),
        };
        match self {
            SymExpr::Int(v) => Ok(*v),
            SymExpr::Sym(s) => syms.get(*s as usize).copied().flatten().ok_or(EvalError::UnboundSymbol(*s)),
            SymExpr::Add(xs) => fold(xs, 0, i64::checked_add),
            SymExpr::Mul(xs) => fold(xs, 1, i64::checked_mul),
            SymExpr::Max(xs) => fold(&xs[1..], xs[0].eval(syms)?, |a, b| Some(a.max(b))),
            SymExpr::Min(xs) => fold(&xs[1..], xs[0].eval(syms)?, |a, b| Some(a.min(b))),
            SymExpr::FloorDiv(a, b) => divide(a, b, floor_div),
            SymExpr::Mod(a, b) => divide(a, b, py_mod),
        }
    }

    /// The expression with each symbol `s` for which `f(s)` is `Some` replaced by it.
    pub fn substitute(&self, f: &impl Fn(SymId) -> Option<SymExpr>) -> SymExpr {
        let all = |xs: &[SymExpr]| xs.iter().map(|x| x.substitute(f)).collect::<Vec<_>>();
        let fold = |xs: &[SymExpr], g: fn(SymExpr, SymExpr) -> SymExpr| {
            let mut xs = all(xs).into_iter();
            match xs.next() {
                Some(first) => xs.fold(first, g),
                None => self.clone(),
            }
        };
        match self {
            SymExpr::Int(_) => self.clone(),
            SymExpr::Sym(s) => f(*s).unwrap_or_else(|| self.clone()),
            SymExpr::Add(xs) => SymExpr::add(all(xs)),
            SymExpr::Mul(xs) => SymExpr::mul(all(xs)),
            SymExpr::Max(xs) => fold(xs, SymExpr::max),
            SymExpr::Min(xs) => fold(xs, SymExpr::min),
            SymExpr::FloorDiv(a, b) => SymExpr::floor_div(a.substitute(f), b.substitute(f)),
            SymExpr::Mod(a, b) => SymExpr::modulo(a.substitute(f), b.substitute(f)),
        }
    }

    /// Calls `f` on every symbol the expression mentions.
    pub fn for_each_symbol(&self, f: &mut impl FnMut(SymId)) {
        match self {
            SymExpr::Int(_) => {}
            SymExpr::Sym(s) => f(*s),
            SymExpr::Add(xs) | SymExpr::Mul(xs) | SymExpr::Max(xs) | SymExpr::Min(xs) => {
                xs.iter().for_each(|x| x.for_each_symbol(f))
            }
            SymExpr::FloorDiv(a, b) | SymExpr::Mod(a, b) => {
                a.for_each_symbol(f);
                b.for_each_symbol(f);
            }
        }
    }
}

impl From<i64> for SymExpr {
    fn from(v: i64) -> Self {
        SymExpr::Int(v)
    }
}

impl fmt::Display for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, xs: &[SymExpr], sep: &str| -> fmt::Result {
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    f.write_str(sep)?;
                }
                match x {
                    SymExpr::Add(_) | SymExpr::Mul(_) => write!(f, "({x})")?,
                    _ => write!(f, "{x}")?,
                }
            }
            Ok(())
        };
        match self {
            SymExpr::Int(v) => write!(f, "{v}"),
            SymExpr::Sym(s) => write!(f, "s{s}"),
            SymExpr::Add(xs) => list(f, xs, " + "),
            SymExpr::Mul(xs) => list(f, xs, "*"),
            SymExpr::FloorDiv(a, b) => write!(f, "floordiv({a}, {b})"),
            SymExpr::Mod(a, b) => write!(f, "mod({a}, {b})"),
            SymExpr::Max(xs) => {
                f.write_str("max(")?;
                list(f, xs, ", ")?;
                f.write_str(")")
            }
            SymExpr::Min(xs) => {
                f.write_str("min(")?;
                list(f, xs, ", ")?;
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_constants_and_evaluates_python_semantics() {
        let s = SymExpr::Sym(0);
        let e = SymExpr::add([SymExpr::mul([s.clone(), 8.into()]), 0.into()]);
        assert_eq!(e.to_string(), "8*s0");
        assert_eq!(e.eval(&[Some(3)]), Ok(24));
        assert_eq!(SymExpr::floor_div((-7).into(), 2.into()), SymExpr::Int(-4));
        assert_eq!(SymExpr::modulo((-7).into(), 2.into()), SymExpr::Int(1));
        assert_eq!(
            SymExpr::FloorDiv(Box::new(s.clone()), Box::new(0.into())).eval(&[Some(1)]),
            Err(EvalError::DivisionByZero)
        );
        assert_eq!(s.eval(&[None]), Err(EvalError::UnboundSymbol(0)));
        assert_eq!(SymExpr::mul([s, i64::MAX.into()]).eval(&[Some(2)]), Err(EvalError::Overflow));
    }

    #[test]
    fn constant_folding_never_wraps() {
        let big = SymExpr::mul([SymExpr::Int(1 << 31), SymExpr::Int(1 << 31), SymExpr::Int(1 << 31)]);
        assert!(!big.is_static(), "{big}");
        assert_eq!(big.eval(&[]), Err(EvalError::Overflow));
        assert_eq!(SymExpr::add([SymExpr::Int(i64::MAX), SymExpr::Int(1)]).eval(&[]), Err(EvalError::Overflow));
        assert_eq!(SymExpr::mul([SymExpr::Int(i64::MAX), SymExpr::Int(2), SymExpr::Int(0)]), SymExpr::Int(0));
        assert_eq!(SymExpr::floor_div(SymExpr::Int(i64::MIN), SymExpr::Int(-1)).eval(&[]), Err(EvalError::Overflow));
        assert_eq!(SymExpr::mul([SymExpr::Int(1 << 20), SymExpr::Int(1 << 20)]), SymExpr::Int(1 << 40));
        let s = SymExpr::Sym(0);
        assert_eq!(SymExpr::floor_div(SymExpr::mul([8.into(), s.clone()]), 2.into()).to_string(), "4*s0");
        assert_eq!(
            SymExpr::floor_div(SymExpr::add([SymExpr::mul([6.into(), s.clone()]), 3.into()]), 3.into()).to_string(),
            "(2*s0) + 1"
        );
        assert_eq!(
            SymExpr::floor_div(SymExpr::add([SymExpr::mul([6.into(), s.clone()]), 1.into()]), 3.into()).to_string(),
            "floordiv((6*s0) + 1, 3)"
        );
    }
}
