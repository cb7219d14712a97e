//! Scalar expression trees over loop variables: the bodies of kernels.

use super::prims::Prim;
use super::program::BufId;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

/// `offset + sum(coef * var)`: an element index, affine in the loop variables, with
/// symbolic coefficients (strides of dynamic shapes).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Affine {
    pub offset: SymExpr,
    /// (loop variable, coefficient), at most one term per variable.
    pub terms: Vec<(usize, SymExpr)>,
}

impl Affine {
    pub fn constant(c: SymExpr) -> Affine {
        Affine { offset: c, terms: vec![] }
    }

    pub fn var(v: usize) -> Affine {
        Affine { offset: SymExpr::Int(0), terms: vec![(v, SymExpr::Int(1))] }
    }

    pub fn scale(&self, k: &SymExpr) -> Affine {
        Affine {
            offset: SymExpr::mul([self.offset.clone(), k.clone()]),
            terms: self
                .terms
                .iter()
                .map(|(v, c)| (*v, SymExpr::mul([c.clone(), k.clone()])))
                .filter(|(_, c)| c != &SymExpr::Int(0))
                .collect(),
        }
    }

    pub fn plus(&self, other: &Affine) -> Affine {
        let mut terms = self.terms.clone();
        for (v, c) in &other.terms {
            match terms.iter_mut().find(|(w, _)| w == v) {
                Some((_, d)) => *d = SymExpr::add([d.clone(), c.clone()]),
                None => terms.push((*v, c.clone())),
            }
        }
        terms.retain(|(_, c)| c != &SymExpr::Int(0));
        Affine { offset: SymExpr::add([self.offset.clone(), other.offset.clone()]), terms }
    }

    /// Replaces each variable `v` with `vars[v]`.
    pub fn substitute(&self, vars: &[Affine]) -> Affine {
        self.terms.iter().fold(Affine::constant(self.offset.clone()), |acc, (v, c)| acc.plus(&vars[*v].scale(c)))
    }

    /// The coefficient of variable `v` (0 when absent).
    pub fn coef(&self, v: usize) -> SymExpr {
        self.terms.iter().find(|(w, _)| *w == v).map(|(_, c)| c.clone()).unwrap_or(SymExpr::Int(0))
    }

    /// Every symbolic size the index mentions.
    pub fn sym_parts(&self) -> impl Iterator<Item = &SymExpr> {
        std::iter::once(&self.offset).chain(self.terms.iter().map(|(_, c)| c))
    }
}

impl fmt::Display for Affine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self
            .terms
            .iter()
            .map(|(v, c)| match c {
                SymExpr::Int(1) => format!("i{v}"),
                SymExpr::Int(_) | SymExpr::Sym(_) => format!("{c}*i{v}"),
                _ => format!("({c})*i{v}"),
            })
            .collect();
        if self.offset != SymExpr::Int(0) || parts.is_empty() {
            parts.push(self.offset.to_string());
        }
        f.write_str(&parts.join(" + "))
    }
}

/// A constant's value; its dtype lives on the [`Expr`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F(f64),
    I(i64),
    B(bool),
}

impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F(v) => v,
            Scalar::I(v) => v as f64,
            Scalar::B(v) => v as i64 as f64,
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::F(v) => v as i64,
            Scalar::I(v) => v,
            Scalar::B(v) => v as i64,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Load {
        buf: BufId,
        index: Affine,
    },
    /// The element of `buf` (which holds `numel` elements) at a computed offset (an i64
    /// expression: gathers, windows, padding). An offset outside `0..numel` reads as zero,
    /// so no computed index can touch memory the buffer does not own.
    LoadAt {
        buf: BufId,
        numel: SymExpr,
        offset: E,
    },
    /// An index (i64) into a dimension of size `bound`; with `wrap`, negative values count
    /// from the end (python indexing), else they are out of range (gather, embedding). An
    /// index out of range yields 0 and records run-time error `site` (an index into
    /// `Program::index_sites`) in buffer `record`.
    CheckIndex {
        value: E,
        bound: SymExpr,
        wrap: bool,
        site: usize,
        record: BufId,
    },
    Const(Scalar),
    /// The value of an index expression, as an integer (iota, masks, counts).
    Index(Affine),
    Unary(Prim, E),
    Binary(Prim, E, E),
    Where(E, E, E),
    /// Conversion to the node's dtype.
    Cast(E),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub dtype: DType,
    pub kind: ExprKind,
}

/// Shared subtrees are shared `Rc`s: code generation evaluates each node once.
pub type E = Rc<Expr>;

pub fn load(buf: BufId, dtype: DType, index: Affine) -> E {
    Rc::new(Expr { dtype, kind: ExprKind::Load { buf, index } })
}

pub fn constant(value: Scalar, dtype: DType) -> E {
    let value = match (dtype, value) {
        (DType::Bool, v) => Scalar::B(v.as_f64() != 0.0),
        (d, v) if d.is_float() => Scalar::F(v.as_f64()),
        (_, v) => Scalar::I(v.as_i64()),
    };
    Rc::new(Expr { dtype, kind: ExprKind::Const(value) })
}

pub fn load_at(buf: BufId, dtype: DType, numel: SymExpr, offset: E) -> E {
    debug_assert_eq!(offset.dtype, DType::I64, "offsets are int64");
    Rc::new(Expr { dtype, kind: ExprKind::LoadAt { buf, numel, offset } })
}

pub fn check_index(value: E, bound: SymExpr, wrap: bool, site: usize, record: BufId) -> E {
    Rc::new(Expr {
        dtype: DType::I64,
        kind: ExprKind::CheckIndex { value: cast(value, DType::I64), bound, wrap, site, record },
    })
}

/// An int64 constant.
pub fn int(v: i64) -> E {
    constant(Scalar::I(v), DType::I64)
}

/// A (possibly symbolic) size as an int64 value.
pub fn size_value(s: &SymExpr) -> E {
    index_value(Affine::constant(s.clone()))
}

pub fn index_value(index: Affine) -> E {
    Rc::new(Expr { dtype: DType::I64, kind: ExprKind::Index(index) })
}

pub fn cast(x: E, dtype: DType) -> E {
    if x.dtype == dtype {
        return x;
    }
    if let ExprKind::Const(v) = x.kind {
        return constant(v, dtype);
    }
    Rc::new(Expr { dtype, kind: ExprKind::Cast(x) })
}

/// `op(x)`, computed in x's dtype.
pub fn unary(op: Prim, x: E) -> E {
    debug_assert_eq!(op.arity(), 1, "{} is not unary", op.name());
    let dtype = if op.returns_bool() { DType::Bool } else { x.dtype };
    Rc::new(Expr { dtype, kind: ExprKind::Unary(op, x) })
}

/// `op(a, b)`; both operands must already have one dtype (lowerings promote first).
pub fn binary(op: Prim, a: E, b: E) -> E {
    debug_assert_eq!(op.arity(), 2, "{} is not binary", op.name());
    debug_assert_eq!(a.dtype, b.dtype, "{} operands differ in dtype", op.name());
    let dtype = if op.returns_bool() { DType::Bool } else { a.dtype };
    Rc::new(Expr { dtype, kind: ExprKind::Binary(op, a, b) })
}

pub fn select(cond: E, a: E, b: E) -> E {
    debug_assert_eq!(a.dtype, b.dtype);
    let dtype = a.dtype;
    Rc::new(Expr { dtype, kind: ExprKind::Where(cast(cond, DType::Bool), a, b) })
}

/// Rebuilds `e` with every loop variable `v` replaced by `vars[v]`, keeping shared
/// subtrees shared.
pub fn substitute(e: &E, vars: &[Affine]) -> E {
    fn go(e: &E, vars: &[Affine], memo: &mut HashMap<*const Expr, E>) -> E {
        if let Some(done) = memo.get(&Rc::as_ptr(e)) {
            return done.clone();
        }
        let kind = match &e.kind {
            ExprKind::Load { buf, index } => ExprKind::Load { buf: *buf, index: index.substitute(vars) },
            ExprKind::Const(_) => return e.clone(),
            ExprKind::Index(a) => ExprKind::Index(a.substitute(vars)),
            _ => map_operands(e, |x| go(x, vars, memo)),
        };
        let out = Rc::new(Expr { dtype: e.dtype, kind });
        memo.insert(Rc::as_ptr(e), out.clone());
        out
    }
    go(e, vars, &mut HashMap::new())
}

/// `e`'s node with each operand `x` (a child expression) replaced by `f(x)`; a leaf (a
/// load at an affine index, a constant, an index value) as it is.
pub fn map_operands(e: &E, mut f: impl FnMut(&E) -> E) -> ExprKind {
    match &e.kind {
        ExprKind::Load { .. } | ExprKind::Const(_) | ExprKind::Index(_) => e.kind.clone(),
        ExprKind::LoadAt { buf, numel, offset } => {
            ExprKind::LoadAt { buf: *buf, numel: numel.clone(), offset: f(offset) }
        }
        ExprKind::CheckIndex { value, bound, wrap, site, record } => {
            ExprKind::CheckIndex { value: f(value), bound: bound.clone(), wrap: *wrap, site: *site, record: *record }
        }
        ExprKind::Unary(op, x) => ExprKind::Unary(*op, f(x)),
        ExprKind::Binary(op, a, b) => {
            let a = f(a);
            ExprKind::Binary(*op, a, f(b))
        }
        ExprKind::Where(c, a, b) => {
            let (c, a) = (f(c), f(a));
            ExprKind::Where(c, a, f(b))
        }
        ExprKind::Cast(x) => ExprKind::Cast(f(x)),
    }
}

/// `e`'s operands (child expressions), in order: none for a leaf, at most three.
pub fn operands(e: &E) -> impl Iterator<Item = &E> {
    let three = match &e.kind {
        ExprKind::Load { .. } | ExprKind::Const(_) | ExprKind::Index(_) => [None, None, None],
        ExprKind::Unary(_, x) | ExprKind::Cast(x) => [Some(x), None, None],
        ExprKind::LoadAt { offset: x, .. } | ExprKind::CheckIndex { value: x, .. } => [Some(x), None, None],
        ExprKind::Binary(_, a, b) => [Some(a), Some(b), None],
        ExprKind::Where(c, a, b) => [Some(c), Some(a), Some(b)],
    };
    three.into_iter().flatten()
}

/// Visits every distinct node once, children first.
pub fn visit(e: &E, f: &mut impl FnMut(&E)) {
    fn go(e: &E, f: &mut impl FnMut(&E), seen: &mut std::collections::HashSet<*const Expr>) {
        if !seen.insert(Rc::as_ptr(e)) {
            return;
        }
        for x in operands(e) {
            go(x, f, seen);
        }
        f(e);
    }
    go(e, f, &mut std::collections::HashSet::new())
}

/// Number of distinct nodes: how much work inlining `e` into a consumer duplicates.
pub fn size(e: &E) -> usize {
    let mut n = 0;
    visit(e, &mut |_| n += 1);
    n
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Load { buf, index } => write!(f, "{buf}[{index}]"),
            ExprKind::Const(v) => match v {
                Scalar::F(x) => write!(f, "{x:?}:{}", self.dtype),
                Scalar::I(x) => write!(f, "{x}:{}", self.dtype),
                Scalar::B(x) => write!(f, "{x}"),
            },
            ExprKind::Index(a) => write!(f, "index({a})"),
            ExprKind::LoadAt { buf, offset, .. } => write!(f, "{buf}[@{offset}]"),
            ExprKind::CheckIndex { value, bound, site, .. } => write!(f, "check_index#{site}({value}, {bound})"),
            ExprKind::Unary(op, x) => write!(f, "{}({x})", op.name()),
            ExprKind::Binary(op, a, b) => write!(f, "{}({a}, {b})", op.name()),
            ExprKind::Where(c, a, b) => write!(f, "where({c}, {a}, {b})"),
            ExprKind::Cast(x) => write!(f, "cast<{}>({x})", self.dtype),
        }
    }
}
