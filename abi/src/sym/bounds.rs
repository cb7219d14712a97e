//! Reasoning with the symbols' ranges: torch.export proves sizes equal under the ranges of
//! `range_constraints` (`min(1, s0)` is 1 when `s0 >= 1`), and aotc must see that too.
//!
//! [`SymExpr::bounds`] computes an expression's interval from the symbols' ranges,
//! [`SymExpr::simplify`] drops the `min`/`max` arguments, `floordiv`s and `mod`s by a
//! constant that the bounds decide, and [`SymExpr::equal_under`] decides an equality for
//! every value of the ranges (or says it cannot). Sums are compared through their linear
//! form (like terms collected), so `(s0 + 1) - s0` is the constant 1.
//!
//! Expressions come from the untrusted archive: the recursion stops at [`MAX_DEPTH`]
//! (deeper parts are unbounded and stay as written) and the arithmetic is checked (an
//! overflowing bound is unbounded).

use super::SymExpr;
use crate::manifest::SymbolRange;
use std::cell::RefCell;

/// The nesting depth past which nothing is simplified or bounded.
pub const MAX_DEPTH: usize = 64;

/// A closed interval; `None` is unbounded on that side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub lo: Option<i64>,
    pub hi: Option<i64>,
}

impl Interval {
    const ALL: Interval = Interval { lo: None, hi: None };

    fn point(v: i64) -> Interval {
        Interval { lo: Some(v), hi: Some(v) }
    }

    /// The single value of the interval, if it has one.
    pub fn single(self) -> Option<i64> {
        self.lo.filter(|&l| Some(l) == self.hi)
    }

    fn add(self, o: Interval) -> Interval {
        let side = |a: Option<i64>, b: Option<i64>| a?.checked_add(b?);
        Interval { lo: side(self.lo, o.lo), hi: side(self.hi, o.hi) }
    }

    fn scale(self, c: i64) -> Interval {
        let side = |a: Option<i64>| a?.checked_mul(c);
        match c {
            0 => Interval::point(0),
            c if c > 0 => Interval { lo: side(self.lo), hi: side(self.hi) },
            _ => Interval { lo: side(self.hi), hi: side(self.lo) },
        }
    }

    fn mul(self, o: Interval) -> Interval {
        if let Some(c) = o.single() {
            return self.scale(c);
        }
        if let Some(c) = self.single() {
            return o.scale(c);
        }
        match (self.lo, self.hi, o.lo, o.hi) {
            // Both non-negative: the product grows with each factor.
            (Some(a), hi1, Some(c), hi2) if a >= 0 && c >= 0 => {
                Interval { lo: a.checked_mul(c), hi: hi1.zip(hi2).and_then(|(b, d)| b.checked_mul(d)) }
            }
            (Some(a), Some(b), Some(c), Some(d)) => {
                let corners = [a.checked_mul(c), a.checked_mul(d), b.checked_mul(c), b.checked_mul(d)];
                match corners.into_iter().collect::<Option<Vec<_>>>() {
                    Some(c) => Interval { lo: c.iter().min().copied(), hi: c.iter().max().copied() },
                    None => Interval::ALL,
                }
            }
            _ => Interval::ALL,
        }
    }
}

/// The interval of symbol `s` in `ranges` (unbounded when it has none).
fn symbol_interval(ranges: &[SymbolRange], s: u32) -> Interval {
    match ranges.get(s as usize) {
        Some(r) => Interval { lo: Some(r.min).filter(|&m| m != i64::MIN), hi: r.max },
        None => Interval::ALL,
    }
}

/// `e` as `constant + sum(coefficient * term)` with like terms collected; `None` when a
/// coefficient overflows or the expression is too deep.
fn linear(e: &SymExpr, depth: usize) -> Option<(i64, Vec<(i64, SymExpr)>)> {
    let mut out = (0i64, Vec::new());
    add_linear(&mut out, e, 1, depth)?;
    out.1.retain(|(c, _)| *c != 0);
    Some(out)
}

fn add_linear(acc: &mut (i64, Vec<(i64, SymExpr)>), e: &SymExpr, scale: i64, depth: usize) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    match e {
        SymExpr::Int(v) => acc.0 = acc.0.checked_add(v.checked_mul(scale)?)?,
        SymExpr::Add(xs) => xs.iter().try_for_each(|x| add_linear(acc, x, scale, depth + 1))?,
        SymExpr::Mul(xs) if xs.len() >= 2 && xs[0].is_static() => {
            let c = xs[0].as_int()?.checked_mul(scale)?;
            let rest = SymExpr::mul(xs[1..].iter().cloned());
            add_linear(acc, &rest, c, depth + 1)?;
        }
        term => match acc.1.iter_mut().find(|(_, t)| t == term) {
            Some((c, _)) => *c = c.checked_add(scale)?,
            None => acc.1.push((scale, term.clone())),
        },
    }
    Some(())
}

/// The interval of `a - b`, its like terms cancelled first.
fn difference(a: &SymExpr, b: &SymExpr, ranges: &[SymbolRange], depth: usize) -> Interval {
    let neg = SymExpr::mul([SymExpr::Int(-1), b.clone()]);
    let Some((c, terms)) = linear(&SymExpr::Add(vec![a.clone(), neg]), depth) else {
        return Interval::ALL;
    };
    terms.iter().fold(Interval::point(c), |acc, (k, t)| acc.add(bounds(t, ranges, depth + 1).scale(*k)))
}

fn bounds(e: &SymExpr, ranges: &[SymbolRange], depth: usize) -> Interval {
    if depth > MAX_DEPTH {
        return Interval::ALL;
    }
    let each = |xs: &[SymExpr]| xs.iter().map(|x| bounds(x, ranges, depth + 1)).collect::<Vec<_>>();
    match e {
        SymExpr::Int(v) => Interval::point(*v),
        SymExpr::Sym(s) => symbol_interval(ranges, *s),
        SymExpr::Add(xs) => each(xs).into_iter().fold(Interval::point(0), Interval::add),
        SymExpr::Mul(xs) => each(xs).into_iter().fold(Interval::point(1), Interval::mul),
        // max: the largest lower bound (any bounded one), the largest upper bound (all bounded).
        SymExpr::Max(xs) => {
            let b = each(xs);
            Interval {
                lo: b.iter().filter_map(|i| i.lo).max(),
                hi: b.iter().map(|i| i.hi).collect::<Option<Vec<_>>>().and_then(|h| h.into_iter().max()),
            }
        }
        SymExpr::Min(xs) => {
            let b = each(xs);
            Interval {
                lo: b.iter().map(|i| i.lo).collect::<Option<Vec<_>>>().and_then(|l| l.into_iter().min()),
                hi: b.iter().filter_map(|i| i.hi).min(),
            }
        }
        SymExpr::FloorDiv(a, d) => match d.as_int() {
            Some(d) if d != 0 => {
                let a = bounds(a, ranges, depth + 1);
                let side = |x: Option<i64>| x.and_then(|x| super::floor_div(x, d));
                if d > 0 {
                    Interval { lo: side(a.lo), hi: side(a.hi) }
                } else {
                    Interval { lo: side(a.hi), hi: side(a.lo) }
                }
            }
            _ => Interval::ALL,
        },
        SymExpr::Mod(_, d) => match d.as_int() {
            Some(d) if d > 0 => Interval { lo: Some(0), hi: Some(d - 1) },
            Some(d) if d < 0 => Interval { lo: d.checked_add(1), hi: Some(0) },
            _ => Interval::ALL,
        },
    }
}

/// Is `a <= b` for every value of the ranges? (`false`: not proven.)
fn always_le(a: &SymExpr, b: &SymExpr, ranges: &[SymbolRange], depth: usize) -> bool {
    a == b || difference(a, b, ranges, depth).hi.is_some_and(|h| h <= 0)
}

/// The arguments of a `min` (`min` true) or `max` that the others do not decide:
/// an argument goes when another one is always at most (at least) it.
fn prune(xs: Vec<SymExpr>, min: bool, ranges: &[SymbolRange], depth: usize) -> Vec<SymExpr> {
    let beats =
        |x: &SymExpr, y: &SymExpr| if min { always_le(x, y, ranges, depth) } else { always_le(y, x, ranges, depth) };
    let mut kept: Vec<SymExpr> = Vec::new();
    for x in xs {
        if kept.iter().any(|k| beats(k, &x)) {
            continue;
        }
        kept.retain(|k| !beats(&x, k));
        kept.push(x);
    }
    kept
}

/// `floordiv(a, d)` or `mod(a, d)` (`modulo`) for a constant `d > 0` when the bounds of
/// `a` lie within one multiple of `d`: the quotient is then a constant.
fn decided_division(a: &SymExpr, d: i64, modulo: bool, ranges: &[SymbolRange], depth: usize) -> Option<SymExpr> {
    let b = bounds(a, ranges, depth);
    let q = super::floor_div(b.lo?, d)?;
    if super::floor_div(b.hi?, d)? != q {
        return None;
    }
    Some(if modulo {
        SymExpr::add([a.clone(), SymExpr::Int(q.checked_mul(d)?.checked_neg()?)])
    } else {
        SymExpr::Int(q)
    })
}

/// `e` with its outermost `min`/`max`/`floordiv`/`mod` decided by the ranges where they
/// decide it (its arguments as they are), and a constant when its bounds are one value.
fn decide_top(e: SymExpr, ranges: &[SymbolRange], depth: usize) -> SymExpr {
    let min = matches!(e, SymExpr::Min(_));
    let out = match e {
        SymExpr::Min(xs) | SymExpr::Max(xs) if depth <= MAX_DEPTH => {
            let mut kept = prune(xs, min, ranges, depth);
            if kept.len() == 1 {
                kept.remove(0)
            } else if min {
                SymExpr::Min(kept)
            } else {
                SymExpr::Max(kept)
            }
        }
        SymExpr::FloorDiv(ref a, ref d) | SymExpr::Mod(ref a, ref d) if depth <= MAX_DEPTH => {
            let modulo = matches!(e, SymExpr::Mod(..));
            match d.as_int().filter(|&d| d > 0).and_then(|d| decided_division(a, d, modulo, ranges, depth)) {
                Some(x) => x,
                None => e,
            }
        }
        other => other,
    };
    bounds(&out, ranges, depth).single().map_or(out, SymExpr::Int)
}

fn simplify(e: &SymExpr, ranges: &[SymbolRange], depth: usize) -> SymExpr {
    if depth > MAX_DEPTH {
        return e.clone();
    }
    let each = |xs: &[SymExpr]| xs.iter().map(|x| simplify(x, ranges, depth + 1)).collect::<Vec<_>>();
    let rebuilt = match e {
        SymExpr::Int(_) | SymExpr::Sym(_) => return e.clone(),
        SymExpr::Add(xs) => SymExpr::add(each(xs)),
        SymExpr::Mul(xs) => SymExpr::mul(each(xs)),
        SymExpr::Min(xs) => SymExpr::Min(each(xs)),
        SymExpr::Max(xs) => SymExpr::Max(each(xs)),
        SymExpr::FloorDiv(a, d) => SymExpr::floor_div(simplify(a, ranges, depth + 1), simplify(d, ranges, depth + 1)),
        SymExpr::Mod(a, d) => SymExpr::modulo(simplify(a, ranges, depth + 1), simplify(d, ranges, depth + 1)),
    };
    decide_top(rebuilt, ranges, depth)
}

impl SymExpr {
    /// The interval of the expression's values when each symbol `s` lies in `ranges[s]`.
    pub fn bounds(&self, ranges: &[SymbolRange]) -> Interval {
        bounds(self, ranges, 0)
    }

    /// The expression with what `ranges` decide folded: `min`/`max` arguments that never
    /// win, `floordiv`/`mod` by a constant with a constant quotient, constant values.
    pub fn simplify(&self, ranges: &[SymbolRange]) -> SymExpr {
        simplify(self, ranges, 0)
    }

    /// Is `self == other` for every value of `ranges`? `Some(false)`: never equal;
    /// `None`: the ranges do not decide it (equal for some values, or not proven).
    pub fn equal_under(&self, other: &SymExpr, ranges: &[SymbolRange]) -> Option<bool> {
        if self == other {
            return Some(true);
        }
        let (a, b) = (self.simplify(ranges), other.simplify(ranges));
        let d = difference(&a, &b, ranges, 0);
        if a == b || d.single() == Some(0) {
            Some(true)
        } else if d.lo.is_some_and(|l| l > 0) || d.hi.is_some_and(|h| h < 0) {
            Some(false)
        } else {
            None
        }
    }

    /// Is `self <= other` for every value of `ranges`? `None`: not decided.
    pub fn le_under(&self, other: &SymExpr, ranges: &[SymbolRange]) -> Option<bool> {
        let (a, b) = (self.simplify(ranges), other.simplify(ranges));
        let d = difference(&a, &b, ranges, 0);
        if a == b || d.hi.is_some_and(|h| h <= 0) {
            Some(true)
        } else if d.lo.is_some_and(|l| l > 0) {
            Some(false)
        } else {
            None
        }
    }
}

thread_local! {
    /// The ranges the smart constructors `min`, `max`, `floor_div` and `modulo` decide
    /// with on this thread: those of the program being compiled ([`set_scope_ranges`]).
    static SCOPE: RefCell<Vec<SymbolRange>> = const { RefCell::new(Vec::new()) };
    /// Equalities of sizes the lowering on this thread assumed where the ranges leave
    /// them open (a broadcast of `s0` with `s1`), each of which it must turn into a
    /// run-time guard ([`take_assumptions`]); and how many it has taken so far.
    static ASSUMED: RefCell<(Vec<(SymExpr, SymExpr)>, usize)> = const { RefCell::new((Vec::new(), 0)) };
}

/// Makes `ranges` (the symbol table of the program this thread compiles, whose ranges the
/// library checks on every call) the ranges the smart constructors simplify with, so that
/// every size built by a shape rule is already in its simplest form (`min(s0, s0 + 1)` is
/// built as `s0`). An empty table turns it off.
pub fn set_scope_ranges(ranges: &[SymbolRange]) {
    SCOPE.with(|s| *s.borrow_mut() = ranges.to_vec());
}

/// The span of one program's lowering on this thread: no ranges are in scope when it
/// starts, and none are left when it ends (even by an error or a panic), so that the
/// ranges of one program never simplify the sizes of the next one this thread compiles.
pub struct RangeScope(());

impl RangeScope {
    pub fn enter() -> RangeScope {
        set_scope_ranges(&[]);
        ASSUMED.with(|a| *a.borrow_mut() = (Vec::new(), 0));
        RangeScope(())
    }
}

impl Drop for RangeScope {
    fn drop(&mut self) {
        set_scope_ranges(&[]);
        ASSUMED.with(|a| *a.borrow_mut() = (Vec::new(), 0));
    }
}

/// [`SymExpr::equal_under`] with the ranges in scope (without any, only the same
/// expression is decided equal), where an equality assumed before ([`assume_equal`])
/// counts as decided.
pub fn equal_in_scope(a: &SymExpr, b: &SymExpr) -> Option<bool> {
    let decided = SCOPE.with(|s| match s.try_borrow() {
        Ok(r) => a.equal_under(b, &r),
        Err(_) => (a == b).then_some(true),
    });
    decided.or_else(|| {
        let assumed = ASSUMED.with(|x| x.borrow().0.iter().any(|(p, q)| (p == a && q == b) || (p == b && q == a)));
        assumed.then_some(true)
    })
}

/// Treats `a == b` as true from now on in this scope: the caller's lowering must check
/// it at run time (see [`take_assumptions`]), as torch.export assumed it when tracing.
pub fn assume_equal(a: &SymExpr, b: &SymExpr) {
    ASSUMED.with(|x| x.borrow_mut().0.push((a.clone(), b.clone())));
}

/// The equalities assumed since the last call, for the lowering to guard.
pub fn take_assumptions() -> Vec<(SymExpr, SymExpr)> {
    ASSUMED.with(|x| {
        let (all, taken) = &mut *x.borrow_mut();
        let new = all[*taken..].to_vec();
        *taken = all.len();
        new
    })
}

/// `e`, just built by a smart constructor from simplified arguments, with its outermost
/// operation decided by the ranges in scope (unchanged when there are none).
pub(super) fn in_scope(e: SymExpr) -> SymExpr {
    SCOPE.with(|s| match s.try_borrow() {
        Ok(r) if !r.is_empty() => decide_top(e, &r, 0),
        _ => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s0() -> SymExpr {
        SymExpr::Sym(0)
    }

    fn range(min: i64, max: Option<i64>) -> Vec<SymbolRange> {
        vec![SymbolRange { name: "s0".into(), min, max }]
    }

    fn plus(a: SymExpr, b: impl Into<SymExpr>) -> SymExpr {
        SymExpr::add([a, b.into()])
    }

    fn minus(a: SymExpr, b: SymExpr) -> SymExpr {
        SymExpr::add([a, SymExpr::mul([SymExpr::Int(-1), b])])
    }

    fn min(a: impl Into<SymExpr>, b: impl Into<SymExpr>) -> SymExpr {
        SymExpr::Min(vec![a.into(), b.into()])
    }

    fn max(a: impl Into<SymExpr>, b: impl Into<SymExpr>) -> SymExpr {
        SymExpr::Max(vec![a.into(), b.into()])
    }

    #[test]
    fn min_and_max_fold_when_the_ranges_decide_them() {
        let r = range(2, Some(128));
        assert_eq!(min(1, s0()).simplify(&r), SymExpr::Int(1));
        assert_eq!(min(0, s0()).simplify(&r), SymExpr::Int(0));
        assert_eq!(max(s0(), 0).simplify(&r), s0());
        assert_eq!(min(s0(), plus(s0(), 1)).simplify(&r), s0());
        assert_eq!(max(plus(s0(), -1), s0()).simplify(&r), s0());
        // Undecided: s0 may be below or above 5.
        assert_eq!(min(s0(), 5).simplify(&r), min(s0(), 5));
        // Open above: max(s0, 200) is not decided, min(s0, -1) is.
        let open = range(0, None);
        assert_eq!(max(s0(), 200).simplify(&open), max(s0(), 200));
        assert_eq!(min(s0(), -1).simplify(&open), SymExpr::Int(-1));
        assert_eq!(min(s0(), 5).bounds(&open), Interval { lo: Some(0), hi: Some(5) });
    }

    #[test]
    fn floor_div_and_mod_by_a_constant_fold_when_the_ranges_decide_them() {
        let r = range(2, Some(128));
        let fd = |a: SymExpr, d: i64| SymExpr::FloorDiv(Box::new(a), Box::new(d.into()));
        let md = |a: SymExpr, d: i64| SymExpr::Mod(Box::new(a), Box::new(d.into()));
        assert_eq!(fd(s0(), 256).simplify(&r), SymExpr::Int(0));
        assert_eq!(fd(plus(s0(), 256), 256).simplify(&r), SymExpr::Int(1));
        assert_eq!(md(s0(), 256).simplify(&r), s0());
        assert_eq!(md(plus(s0(), 512), 256).simplify(&r), s0());
        // s0 / 64 is 0, 1 or 2: stays.
        assert_eq!(fd(s0(), 64).simplify(&r), fd(s0(), 64));
        assert_eq!(fd(s0(), 64).bounds(&r), Interval { lo: Some(0), hi: Some(2) });
        assert_eq!(md(s0(), 64).simplify(&r), md(s0(), 64));
    }

    /// The sizes of a GPT-2/Llama `slice` of the causal mask (sub_4), seq in [2, 128]:
    /// both are s0, which only the ranges show.
    #[test]
    fn slice_sizes_of_a_causal_mask_are_equal_under_the_ranges() {
        let r = range(2, Some(128));
        let len = plus(max(minus(min(1, s0()), min(0, s0())), 0), s0());
        let a = max(minus(min(plus(s0(), 1), len.clone()), min(1, len.clone())), 0);
        let b = max(minus(min(s0(), len.clone()), min(0, len)), 0);
        assert_ne!(a, b);
        assert_eq!(a.simplify(&r), s0());
        assert_eq!(b.simplify(&r), s0());
        assert_eq!(a.equal_under(&b, &r), Some(true));
        // Without the ranges (s0 may be negative) nothing is decided.
        let open = range(i64::MIN, None);
        assert_eq!(a.equal_under(&b, &open), None);
        // The smart constructors fold with the ranges in scope.
        set_scope_ranges(&r);
        assert_eq!(SymExpr::max(SymExpr::min(1.into(), s0()), SymExpr::min(s0(), plus(s0(), 1))), s0());
        set_scope_ranges(&[]);
        assert_eq!(SymExpr::min(1.into(), s0()), min(1, s0()));
    }

    #[test]
    fn equalities_the_ranges_cannot_decide_stay_undecided() {
        let r = range(2, Some(128));
        // Equal for s0 = 2 only.
        assert_eq!(s0().equal_under(&2.into(), &r), None);
        assert_eq!(SymExpr::mul([2.into(), s0()]).equal_under(&plus(s0(), 2), &r), None);
        assert_eq!(s0().equal_under(&plus(s0(), 1), &r), Some(false));
        assert_eq!(s0().equal_under(&1.into(), &r), Some(false));
        assert_eq!(plus(s0(), 1).le_under(&s0(), &r), Some(false));
        assert_eq!(s0().le_under(&128.into(), &r), Some(true));
        assert_eq!(s0().le_under(&100.into(), &r), None);
        // A second symbol without a range.
        assert_eq!(SymExpr::Sym(1).equal_under(&s0(), &r), None);
    }

    #[test]
    fn deep_or_overflowing_expressions_are_left_alone() {
        let r = range(0, Some(i64::MAX));
        let mut e = s0();
        for _ in 0..(2 * MAX_DEPTH) {
            e = SymExpr::Min(vec![SymExpr::add([e, 1.into()]), SymExpr::Int(i64::MAX)]);
        }
        let simplified = e.simplify(&r);
        assert_eq!(simplified.bounds(&r).hi, Some(i64::MAX));
        let huge = SymExpr::mul([s0(), s0(), s0()]);
        assert_eq!(huge.bounds(&r), Interval { lo: Some(0), hi: None });
        // Like terms cancel: huge + s0 - s0 is huge.
        assert_eq!(huge.equal_under(&minus(plus(huge.clone(), s0()), s0()), &r), Some(true));
        assert_eq!(huge.equal_under(&SymExpr::mul([s0(), s0()]), &r), None);
    }
}
