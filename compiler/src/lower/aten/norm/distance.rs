//! p-norm distances between rows: cdist (every row of x1 with every row of x2, batched)
//! and pdist (every pair i < j of the rows of one matrix), for p = 0 (the count of
//! differing coordinates), 1, 2, infinity and any other p >= 0.

use super::super::pad::{int, int_const, var};
use super::super::reduction::reduce;
use super::R;
use crate::ir::expr::{self, binary, cast, unary, E};
use crate::ir::{Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::{broadcast_shapes, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

fn float_const(v: f64, d: DType) -> E {
    expr::constant(Scalar::F(v), d)
}

fn exponent(a: &Args, name: &str, default: f64) -> Result<f64, String> {
    let p = a.opt_scalar(name)?.map_or(default, |s| s.as_f64());
    if p.is_nan() || p < 0.0 {
        return Err(format!("p must be a non-negative number, got {p}"));
    }
    Ok(p)
}

/// The p-norm of `diff` (differences of coordinates) over its last axis, into a new buffer.
fn p_norm(lw: &mut Lowerer, diff: &TensorValue, p: f64, name: &str) -> TensorValue {
    let d = diff.dtype;
    let last = diff.rank() - 1;
    let idx = vars(diff.rank());
    let x = diff.load(&idx);
    let terms = |body: E| TensorValue::lazy(d, diff.sizes.clone(), body);
    let sum_of = |lw: &mut Lowerer, body: E| reduce(lw, &terms(body), &[last], false, ReduceOp::Sum, d, name);
    let finish =
        |r: &TensorValue, f: &dyn Fn(E) -> E| TensorValue::lazy(d, r.sizes.clone(), f(r.load(&vars(r.rank()))));
    if p == 0.0 {
        sum_of(lw, cast(binary(Prim::Ne, x, float_const(0.0, d)), d))
    } else if p == 1.0 {
        sum_of(lw, unary(Prim::Abs, x))
    } else if p == 2.0 {
        let s = sum_of(lw, binary(Prim::Mul, x.clone(), x));
        finish(&s, &|v| unary(Prim::Sqrt, v))
    } else if p.is_infinite() {
        let m = reduce(lw, &terms(unary(Prim::Abs, x)), &[last], false, ReduceOp::Max, d, name);
        // The largest of no coordinates is 0, not the reduction's -inf.
        let columns = diff.sizes[last].clone();
        if columns.as_int().is_some_and(|c| c > 0) {
            return m;
        }
        finish(&m, &|v| expr::select(binary(Prim::Eq, int(&columns), int_const(0)), float_const(0.0, d), v))
    } else {
        let s = sum_of(lw, binary(Prim::Pow, unary(Prim::Abs, x), float_const(p, d)));
        finish(&s, &|v| binary(Prim::Pow, v, float_const(1.0 / p, d)))
    }
}

/// `_cdist_forward(x1 [*, P, M], x2 [*, R, M], p, compute_mode)` → [*, P, R], the batch
/// dimensions broadcast. For p = 2 torch uses the matrix-product form
/// sqrt(max(|a|² + |b|² - 2 a·b, 0)) when compute_mode asks for it (1), or by default (0)
/// when P or R exceeds 25; its rounding differs from the direct form, so aotc follows.
pub fn cdist(lw: &mut Lowerer, a: &Args) -> R {
    let (x1, x2) = (a.tensor(lw, "x1")?, a.tensor(lw, "x2")?);
    let p = exponent(a, "p", 2.0)?;
    let mode = a.opt_int("compute_mode")?.unwrap_or(0);
    if !(0..=2).contains(&mode) {
        return Err(format!("compute_mode must be 0, 1 or 2, got {mode}"));
    }
    for (x, what) in [(&x1, "x1"), (&x2, "x2")] {
        if x.rank() < 2 || !x.dtype.is_float() {
            return Err(format!(
                "{what} must be a floating-point tensor of at least 2 dimensions, got {}[rank {}]",
                x.dtype,
                x.rank()
            ));
        }
    }
    if x1.dtype != x2.dtype {
        return Err(format!("x1 and x2 must have one dtype, got {} and {}", x1.dtype, x2.dtype));
    }
    let (r1, r2) = (x1.rank(), x2.rank());
    let m = x1.sizes[r1 - 1].clone();
    lw.require(x2.sizes[r2 - 1].clone(), GuardOp::Eq, m.clone(), "x1 and x2 have the same number of columns")?;
    let batch = broadcast_shapes(&[&x1.sizes[..r1 - 2], &x2.sizes[..r2 - 2]])?;
    let (rows1, rows2) = (x1.sizes[r1 - 2].clone(), x2.sizes[r2 - 2].clone());
    let with_batch = |tail: [SymExpr; 2]| batch.iter().cloned().chain(tail).collect::<Vec<_>>();
    let (x1, x2) =
        (x1.expand(&with_batch([rows1.clone(), m.clone()]))?, x2.expand(&with_batch([rows2.clone(), m.clone()]))?);
    let nb = batch.len();
    // Over [*, P, R, M]: loop variables (batch..., i, j, k).
    let pair_sizes: Vec<SymExpr> = batch.iter().cloned().chain([rows1.clone(), rows2.clone(), m]).collect();
    let v = vars(nb + 3);
    let row = |x: &TensorValue, r: usize| {
        x.load(&v[..nb].iter().cloned().chain([v[nb + r].clone(), v[nb + 2].clone()]).collect::<Vec<_>>())
    };
    let (a1, a2) = (row(&x1, 0), row(&x2, 1));
    let name = a.node_name();
    let direct = |lw: &mut Lowerer| {
        p_norm(
            lw,
            &TensorValue::lazy(x1.dtype, pair_sizes.clone(), binary(Prim::Sub, a1.clone(), a2.clone())),
            p,
            &name,
        )
    };
    let by_product = |lw: &mut Lowerer| euclidean_by_product(lw, &x1, &x2, &pair_sizes, &a1, &a2, &name);
    let out = match (p == 2.0, mode, rows1.as_int(), rows2.as_int()) {
        (false, ..) | (true, 2, ..) => direct(lw),
        (true, 1, ..) => by_product(lw),
        (true, _, Some(p1), Some(p2)) => {
            if p1 > 25 || p2 > 25 {
                by_product(lw)
            } else {
                direct(lw)
            }
        }
        _ => {
            // Symbolic row counts: torch's choice is made at run time.
            let (prod, direct) = (by_product(lw), direct(lw));
            let big = |rows: &SymExpr| binary(Prim::Gt, int(rows), int_const(25));
            let body = expr::select(
                binary(Prim::Or, big(&rows1), big(&rows2)),
                prod.load(&vars(nb + 2)),
                direct.load(&vars(nb + 2)),
            );
            TensorValue::lazy(x1.dtype, direct.sizes.clone(), body)
        }
    };
    Ok(vec![out])
}

/// torch's `_euclidean_dist`: sqrt(max(-2 a·b + |a|² + |b|², 0)) per pair of rows;
/// `a1`, `a2` are the coordinates of a pair over `pair_sizes` [*, P, R, M].
fn euclidean_by_product(
    lw: &mut Lowerer,
    x1: &TensorValue,
    x2: &TensorValue,
    pair_sizes: &[SymExpr],
    a1: &E,
    a2: &E,
    name: &str,
) -> TensorValue {
    let d = x1.dtype;
    let nb = pair_sizes.len() - 3;
    let squared_norm = |lw: &mut Lowerer, x: &TensorValue| {
        let body = x.load(&vars(x.rank()));
        let squares = TensorValue::lazy(d, x.sizes.clone(), binary(Prim::Mul, body.clone(), body));
        reduce(lw, &squares, &[nb + 1], false, ReduceOp::Sum, d, &format!("{name}.norm"))
    };
    let (n1, n2) = (squared_norm(lw, x1), squared_norm(lw, x2));
    let products = TensorValue::lazy(
        d,
        pair_sizes.to_vec(),
        binary(Prim::Mul, binary(Prim::Mul, a1.clone(), float_const(-2.0, d)), a2.clone()),
    );
    let dot = reduce(lw, &products, &[nb + 2], false, ReduceOp::Sum, d, &format!("{name}.dot"));
    let v = vars(nb + 2);
    let norm_at =
        |n: &TensorValue, r: usize| n.load(&v[..nb].iter().cloned().chain([v[nb + r].clone()]).collect::<Vec<_>>());
    let squared = binary(Prim::Add, binary(Prim::Add, dot.load(&v), norm_at(&n1, 0)), norm_at(&n2, 1));
    let body = unary(Prim::Sqrt, binary(Prim::Max, squared, float_const(0.0, d)));
    TensorValue::lazy(d, dot.sizes.clone(), body)
}

/// `_pdist_forward(self [N, M], p)` → [N (N - 1) / 2]: the distance of rows i < j in
/// row-major order of the pairs. Output k finds its pair with torch's formula
/// i = trunc(n2 - sqrt(n2² - 1 - 2k)), n2 = N - 1/2 (in double precision), and
/// j = k - N i + i (i + 1) / 2 + i + 1; the rows are read through `LoadAt`.
pub fn pdist(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    if x.rank() != 2 || !x.dtype.is_float() {
        return Err(format!("pdist needs a 2-D floating-point tensor, got {}[rank {}]", x.dtype, x.rank()));
    }
    let p = exponent(a, "p", 2.0)?;
    let (n, m) = (x.sizes[0].clone(), x.sizes[1].clone());
    let pairs =
        SymExpr::floor_div(SymExpr::mul([n.clone(), SymExpr::add([n.clone(), SymExpr::Int(-1)])]), SymExpr::Int(2));
    let f64_of = |e: E| cast(e, DType::F64);
    let k = f64_of(var(0));
    let n2 = binary(Prim::Sub, f64_of(int(&n)), float_const(0.5, DType::F64));
    let under_root = binary(
        Prim::Sub,
        binary(Prim::Sub, binary(Prim::Mul, n2.clone(), n2.clone()), float_const(1.0, DType::F64)),
        binary(Prim::Mul, k.clone(), float_const(2.0, DType::F64)),
    );
    let i = cast(binary(Prim::Sub, n2, unary(Prim::Sqrt, under_root)), DType::I64);
    let half_triangle =
        binary(Prim::Div, binary(Prim::Mul, i.clone(), binary(Prim::Add, i.clone(), int_const(1))), int_const(2));
    let j = binary(
        Prim::Add,
        binary(Prim::Sub, var(0), binary(Prim::Mul, int(&n), i.clone())),
        binary(Prim::Add, half_triangle, binary(Prim::Add, i.clone(), int_const(1))),
    );
    let name = a.node_name();
    // Realized once: both rows read the same buffer.
    let x = lw.realize(&x, &name);
    let column = var(1);
    let (xi, xj) = (lw.load_at_indices(&x, &[i, column.clone()], &name), lw.load_at_indices(&x, &[j, column], &name));
    let diff = TensorValue::lazy(x.dtype, vec![pairs, m], binary(Prim::Sub, xi, xj));
    Ok(vec![p_norm(lw, &diff, p, &name)])
}
