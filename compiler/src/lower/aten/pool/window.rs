//! Sliding windows over the trailing (spatial) dimensions of a tensor: the geometry that
//! pooling and convolution share.
//!
//! Along each spatial dimension, offset `k` of the window at output position `o` reads
//! input position `o * stride - padding + k * dilation`. Forward ops gather every window
//! ([`taps`]); gradients and transposed convolution go the other way, from an input
//! position and an offset to the window that read it ([`sum_over_windows`]). Adaptive
//! pooling has windows of varying length instead ([`adaptive_sum`]).
//!
//! Positions the lowering computes are read through `LoadAt`, which cannot leave its
//! buffer, and masked where they fall outside the input (padding, a ceil-mode window
//! that hangs over the end).

use crate::ir::expr::{binary, cast, constant, index_value, int, select, size_value, unary, Affine, ExprKind, E};
use crate::ir::{Prim, ReduceOp, Scalar};
use crate::lower::aten::reduction::reduce;
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// Window geometry along the spatial dimensions.
pub struct Windows {
    pub kernel: Vec<SymExpr>,
    pub stride: Vec<i64>,
    pub padding: Vec<i64>,
    pub dilation: Vec<i64>,
    /// Sizes of the spatial dimensions the windows read.
    pub input: Vec<SymExpr>,
    /// Number of windows along each.
    pub output: Vec<SymExpr>,
}

impl Windows {
    /// Windows of `kernel` sliding over `input`, as many as fit (torch's
    /// `pooling_output_shape`; with `ceil_mode`, a last partial window, provided it starts
    /// inside the input or its left padding). Requires what every user needs: positive
    /// kernel, stride and dilation, padding >= 0, and at least one window.
    pub fn new(
        lw: &mut Lowerer,
        input: &[SymExpr],
        kernel: Vec<SymExpr>,
        stride: Vec<i64>,
        padding: Vec<i64>,
        dilation: Vec<i64>,
        ceil_mode: bool,
    ) -> Result<Windows, String> {
        for d in 0..input.len() {
            if stride[d] <= 0 || dilation[d] <= 0 || padding[d] < 0 {
                return Err(format!("stride and dilation must be positive and padding non-negative, got stride {stride:?}, padding {padding:?}, dilation {dilation:?}"));
            }
            lw.require(
                SymExpr::Int(1),
                GuardOp::Le,
                kernel[d].clone(),
                &format!("the kernel size of spatial dimension {d} must be positive"),
            )?;
        }
        let mut output = vec![];
        for d in 0..input.len() {
            let (s, p) = (SymExpr::Int(stride[d]), SymExpr::Int(padding[d]));
            // in + 2p - dilation * (k - 1) - 1 (+ stride - 1 to round up)
            let reach = SymExpr::mul([SymExpr::Int(dilation[d]), SymExpr::add([kernel[d].clone(), SymExpr::Int(-1)])]);
            let round_up = SymExpr::Int(if ceil_mode { stride[d] - 1 } else { 0 });
            let span = SymExpr::add([
                input[d].clone(),
                SymExpr::mul([SymExpr::Int(2), p.clone()]),
                negate(reach),
                SymExpr::Int(-1),
                round_up,
            ]);
            let mut out = SymExpr::add([floor_div_size(span, stride[d]), SymExpr::Int(1)]);
            if ceil_mode {
                // Drop the last window when it would start past the input and its left
                // padding: out -= [(out - 1) * s >= in + p], the bracket as min(1, max(0, x + 1)).
                let excess = SymExpr::add([
                    SymExpr::mul([SymExpr::add([out.clone(), SymExpr::Int(-1)]), s]),
                    negate(input[d].clone()),
                    negate(p),
                    SymExpr::Int(1),
                ]);
                let starts_past = SymExpr::min(SymExpr::Int(1), SymExpr::max(SymExpr::Int(0), excess));
                out = SymExpr::add([out, negate(starts_past)]);
            }
            let rule = format!(
                "spatial dimension {d} of size {} (padding {}) must hold at least one window of {} (dilation {})",
                input[d], padding[d], kernel[d], dilation[d]
            );
            lw.require(SymExpr::Int(1), GuardOp::Le, out.clone(), &rule)?;
            output.push(out);
        }
        Ok(Windows { kernel, stride, padding, dilation, input: input.to_vec(), output })
    }

    pub fn rank(&self) -> usize {
        self.input.len()
    }

    /// The input position of offset `k` of window `o` along `d`.
    pub fn position(&self, d: usize, o: &Affine, k: &Affine) -> Affine {
        o.scale(&SymExpr::Int(self.stride[d]))
            .plus(&k.scale(&SymExpr::Int(self.dilation[d])))
            .plus(&Affine::constant(SymExpr::Int(-self.padding[d])))
    }

    /// [`Self::position`] of computed `o` and `k`.
    pub fn position_of(&self, d: usize, o: &E, k: &E) -> E {
        add(add(mul(o.clone(), int(self.stride[d])), mul(k.clone(), int(self.dilation[d]))), int(-self.padding[d]))
    }

    /// Whether some window reaches outside the input along `d`: it has padding, or its
    /// last window may end past the input (ceil mode, or sizes unknown until run time).
    pub fn may_leave(&self, d: usize) -> bool {
        let last = SymExpr::add([
            SymExpr::mul([SymExpr::add([self.output[d].clone(), SymExpr::Int(-1)]), SymExpr::Int(self.stride[d])]),
            SymExpr::mul([SymExpr::add([self.kernel[d].clone(), SymExpr::Int(-1)]), SymExpr::Int(self.dilation[d])]),
        ]);
        let room = SymExpr::add([self.input[d].clone(), SymExpr::Int(-1), negate(last)]);
        self.padding[d] > 0 || room.as_int().is_none_or(|r| r < 0)
    }

    /// The dimensions along which some window reaches outside the input.
    pub fn leaving(&self) -> Vec<usize> {
        (0..self.rank()).filter(|&d| self.may_leave(d)).collect()
    }

    /// The first offset of window `o` along `d` that lies inside the input:
    /// max(0, ceil((padding - o * stride) / dilation)).
    pub fn first_inside(&self, d: usize, o: &E) -> E {
        let before = binary(Prim::Sub, int(self.padding[d]), mul(o.clone(), int(self.stride[d])));
        let offsets = if self.dilation[d] == 1 {
            before
        } else {
            floor_div(add(before, int(self.dilation[d] - 1)), int(self.dilation[d]))
        };
        binary(Prim::Max, offsets, int(0))
    }

    /// Step `j` of the windows that read input position `h` along `d`. Strided without
    /// dilation, only the offsets `k = (h + padding) mod stride + j * stride` can land on
    /// `h`, from window `(h + padding) div stride - j`: ceil(kernel / stride) steps, not
    /// kernel (a 2x2 kernel at stride 2, a U-Net's up-convolution, has one step, not four
    /// of which three miss). Otherwise the steps are the offsets, each checked.
    fn reached(&self, d: usize, h: &Affine, j: &Affine) -> Reached {
        let (s, kernel) = (self.stride[d], &self.kernel[d]);
        let from_padding = index_value(h.plus(&Affine::constant(SymExpr::Int(self.padding[d]))));
        if let (Some(k), 1, 2..) = (kernel.as_int(), self.dilation[d], s) {
            let (q, j) = (floor_div(from_padding.clone(), int(s)), index_value(j.clone()));
            let first = binary(Prim::Sub, from_padding, mul(q.clone(), int(s)));
            let offset = add(first, mul(j.clone(), int(s)));
            let window = binary(Prim::Sub, q, j);
            let mut valid = vec![
                binary(Prim::Ge, window.clone(), int(0)),
                binary(Prim::Lt, window.clone(), size_value(&self.output[d])),
            ];
            if k % s != 0 {
                valid.push(binary(Prim::Lt, offset.clone(), int(k)));
            }
            let valid = all_of(valid).expect("two conditions at least");
            return Reached { window, offset, valid, steps: SymExpr::Int((k + s - 1) / s) };
        }
        let from_origin = index_value(
            h.plus(&Affine::constant(SymExpr::Int(self.padding[d]))).plus(&j.scale(&SymExpr::Int(-self.dilation[d]))),
        );
        let window = if s == 1 { from_origin.clone() } else { floor_div(from_origin.clone(), int(s)) };
        let mut valid = vec![
            binary(Prim::Ge, from_origin.clone(), int(0)),
            binary(Prim::Lt, window.clone(), size_value(&self.output[d])),
        ];
        if s != 1 {
            valid.push(binary(Prim::Eq, mul(window.clone(), int(s)), from_origin));
        }
        let valid = all_of(valid).expect("two conditions at least");
        Reached { window, offset: index_value(j.clone()), valid, steps: kernel.clone() }
    }

    /// The number of elements of window `o` (avg pooling, no dilation): the window clipped
    /// to the padded input, or, without `include_pad`, to the input itself.
    pub fn count(&self, o: &[E], include_pad: bool) -> E {
        (0..self.rank())
            .map(|d| {
                if !self.may_leave(d) {
                    return size_value(&self.kernel[d]);
                }
                let start = add(mul(o[d].clone(), int(self.stride[d])), int(-self.padding[d]));
                let end = binary(
                    Prim::Min,
                    add(start.clone(), size_value(&self.kernel[d])),
                    add(size_value(&self.input[d]), int(self.padding[d])),
                );
                if include_pad {
                    binary(Prim::Sub, end, start)
                } else {
                    binary(
                        Prim::Sub,
                        binary(Prim::Min, end, size_value(&self.input[d])),
                        binary(Prim::Max, start, int(0)),
                    )
                }
            })
            .reduce(mul)
            .unwrap_or_else(|| int(1))
    }
}

/// The windows of `x` (whose trailing dims are `w.input`) as a lazy tensor of sizes
/// [leading dims of x..., w.output..., w.kernel...]: x at each offset of each window, or
/// `fill` outside the input.
pub fn taps(lw: &mut Lowerer, x: &TensorValue, w: &Windows, fill: E, name: &str) -> TensorValue {
    let nd = w.rank();
    let lead = x.rank() - nd;
    // Each element is read by several windows: compute a lazy input once.
    let x = if w.kernel.iter().all(|k| *k == SymExpr::Int(1)) {
        x.clone()
    } else {
        lw.realize(x, &format!("{name}.input"))
    };
    let mut index: Vec<Affine> = (0..lead).map(Affine::var).collect();
    index.extend((0..nd).map(|d| w.position(d, &Affine::var(lead + d), &Affine::var(lead + nd + d))));
    let leaving: Vec<usize> = w.leaving().into_iter().map(|d| lead + d).collect();
    let body = if leaving.is_empty() {
        x.load(&index)
    } else {
        let inside = all_of(leaving.iter().map(|&d| in_range(index_value(index[d].clone()), &x.sizes[d])))
            .expect("some dimension leaves");
        let at: Vec<E> = index.into_iter().map(index_value).collect();
        select(inside, lw.load_at_indices(&x, &at, name), fill)
    };
    let sizes = x.sizes[..lead].iter().chain(&w.output).chain(&w.kernel).cloned().collect();
    TensorValue::lazy(x.dtype, sizes, body)
}

/// What window `o` contributes to input position `h` at its offset `k`, given the
/// leading variables, `h`, `o` and `k` (computed int64 values).
pub type Term<'a> = dyn FnMut(&mut Lowerer, &[Affine], &[Affine], &[E], &[E]) -> E + 'a;

/// The reverse of [`taps`]: a tensor of sizes [lead..., w.input...] whose element at
/// input position `h` sums `term` over every window `o` that reads `h` (at offset `k`),
/// accumulated in `dtype`.
pub fn sum_over_windows(
    lw: &mut Lowerer,
    w: &Windows,
    lead: &[SymExpr],
    dtype: DType,
    name: &str,
    term: &mut Term,
) -> TensorValue {
    let (nl, nd) = (lead.len(), w.rank());
    let lead_vars: Vec<Affine> = (0..nl).map(Affine::var).collect();
    let here: Vec<Affine> = (0..nd).map(|d| Affine::var(nl + d)).collect();
    let steps: Vec<Affine> = (0..nd).map(|d| Affine::var(nl + nd + d)).collect();
    let reached: Vec<Reached> = (0..nd).map(|d| w.reached(d, &here[d], &steps[d])).collect();
    let (sources, offsets): (Vec<E>, Vec<E>) = reached.iter().map(|r| (r.window.clone(), r.offset.clone())).unzip();
    let value = cast(term(lw, &lead_vars, &here, &sources, &offsets), dtype);
    let valid = all_of(reached.iter().map(|r| r.valid.clone())).expect("at least one spatial dimension");
    let body = select(valid, value, constant(Scalar::I(0), dtype));
    let sizes: Vec<SymExpr> =
        lead.iter().chain(&w.input).cloned().chain(reached.into_iter().map(|r| r.steps)).collect();
    let all = TensorValue::lazy(dtype, sizes, body);
    let steps: Vec<usize> = (nl + nd..nl + 2 * nd).collect();
    reduce(lw, &all, &steps, false, ReduceOp::Sum, dtype, name)
}

/// One step of [`sum_over_windows`] along a dimension: the window and offset that reach
/// an input position, whether they exist, and how many steps there are.
struct Reached {
    window: E,
    offset: E,
    valid: E,
    steps: SymExpr,
}

/// Adaptive pooling's window `i` along a dimension of `from` elements split into `to`
/// windows: `floor(i * from / to) .. ceil((i + 1) * from / to)`.
pub fn adaptive_range(i: &E, from: &SymExpr, to: &SymExpr) -> (E, E) {
    let (from, to) = (size_value(from), size_value(to));
    let start = floor_div(mul(i.clone(), from.clone()), to.clone());
    let end = floor_div(add(mul(add(i.clone(), int(1)), from), binary(Prim::Sub, to.clone(), int(1))), to);
    (start, end)
}

/// The longest of [`adaptive_range`]'s windows, or a bound on it when sizes are symbolic.
fn adaptive_longest(from: &SymExpr, to: &SymExpr) -> SymExpr {
    match (from.as_int(), to.as_int()) {
        (Some(f), Some(t)) if t > 0 && f % t == 0 => SymExpr::Int(f / t),
        _ => {
            // ceil(from / to) + 1; a `to` of 0 has no windows at all.
            let to = SymExpr::max(to.clone(), SymExpr::Int(1));
            SymExpr::add([
                SymExpr::floor_div(SymExpr::add([from.clone(), to.clone(), SymExpr::Int(-1)]), to),
                SymExpr::Int(1),
            ])
        }
    }
}

/// A tensor of sizes [leading dims of v..., to...] holding, for each window of
/// [`adaptive_range`] over v's trailing dims, the sum of v over it, in `dtype`.
pub fn adaptive_sum(lw: &mut Lowerer, v: &TensorValue, to: &[SymExpr], dtype: DType, name: &str) -> TensorValue {
    let nd = to.len();
    let lead = v.rank() - nd;
    let from = &v.sizes[lead..];
    let mut at: Vec<E> = (0..lead).map(|l| index_value(Affine::var(l))).collect();
    let mut inside = vec![];
    for d in 0..nd {
        let (start, end) = adaptive_range(&index_value(Affine::var(lead + d)), &from[d], &to[d]);
        let position = add(start, index_value(Affine::var(lead + nd + d)));
        inside.push(binary(Prim::Lt, position.clone(), end));
        at.push(position);
    }
    let value = cast(lw.load_at_indices(v, &at, name), dtype);
    let body = select(all_of(inside).expect("at least one spatial dimension"), value, constant(Scalar::I(0), dtype));
    let longest = from.iter().zip(to).map(|(f, t)| adaptive_longest(f, t));
    let sizes: Vec<SymExpr> = v.sizes[..lead].iter().chain(to).cloned().chain(longest).collect();
    let all = TensorValue::lazy(dtype, sizes, body);
    reduce(lw, &all, &(lead + nd..lead + 2 * nd).collect::<Vec<_>>(), false, ReduceOp::Sum, dtype, name)
}

/// The number of elements of each adaptive window: the product of the range lengths.
pub fn adaptive_count(i: &[E], from: &[SymExpr], to: &[SymExpr]) -> E {
    (0..i.len())
        .map(|d| {
            let (start, end) = adaptive_range(&i[d], &from[d], &to[d]);
            binary(Prim::Sub, end, start)
        })
        .reduce(mul)
        .unwrap_or_else(|| int(1))
}

/// `floor(a / k)` (k > 0) with the terms of `a` that are multiples of `k` taken out of
/// the division (floor((k * m + r) / k) = m + floor(r / k)): a size like
/// floor((8 * s - 1) / 2) + 1 comes out as 4 * s, the way torch.export records it, so
/// that later shape rules compare equal sizes as equal.
pub fn floor_div_size(a: SymExpr, k: i64) -> SymExpr {
    let terms = match a {
        SymExpr::Add(terms) => terms,
        other => vec![other],
    };
    let (mut whole, mut rest) = (vec![], vec![]);
    for t in terms {
        match &t {
            SymExpr::Mul(factors) if matches!(factors[0], SymExpr::Int(c) if c % k == 0) => {
                let SymExpr::Int(c) = factors[0] else { unreachable!("matched a constant factor") };
                whole.push(SymExpr::mul([SymExpr::Int(c / k)].into_iter().chain(factors[1..].iter().cloned())));
            }
            _ => rest.push(t),
        }
    }
    SymExpr::add(whole.into_iter().chain([SymExpr::floor_div(SymExpr::add(rest), SymExpr::Int(k))]))
}

/// A per-dimension list of a pooling or convolution argument: `nd` values, or one for all.
pub fn per_dim(values: Vec<i64>, nd: usize, what: &str) -> Result<Vec<i64>, String> {
    match values.len() {
        1 => Ok(vec![values[0]; nd]),
        n if n == nd => Ok(values),
        n => Err(format!("{what} must have 1 or {nd} elements, got {n}")),
    }
}

/// `floor(a / b)` of int64 values. There is no integer division primitive, so it goes
/// through float64: exact for |a| < 2^52, far above any position or size product here.
pub fn floor_div(a: E, b: E) -> E {
    round_div(a, b, Prim::Floor)
}

/// `a / b` of int64 values rounded by `rounding` (Floor, Trunc), through float64.
pub fn round_div(a: E, b: E, rounding: Prim) -> E {
    let q = binary(Prim::Div, cast(a, DType::F64), cast(b, DType::F64));
    cast(unary(rounding, q), DType::I64)
}

/// `0 <= i < size`.
pub fn in_range(i: E, size: &SymExpr) -> E {
    binary(Prim::And, binary(Prim::Ge, i.clone(), int(0)), binary(Prim::Lt, i, size_value(size)))
}

/// The conjunction of `conds`; `None` when there are none.
pub fn all_of(conds: impl IntoIterator<Item = E>) -> Option<E> {
    conds.into_iter().reduce(|a, b| binary(Prim::And, a, b))
}

/// `a + b`, leaving out a constant 0 (positions with no padding or offset).
pub fn add(a: E, b: E) -> E {
    match (is_int(&a, 0), is_int(&b, 0)) {
        (true, _) => b,
        (_, true) => a,
        _ => binary(Prim::Add, a, b),
    }
}

/// `a * b`, leaving out a constant 1 (unit strides and dilations).
pub fn mul(a: E, b: E) -> E {
    match (is_int(&a, 1), is_int(&b, 1)) {
        (true, _) => b,
        (_, true) => a,
        _ => binary(Prim::Mul, a, b),
    }
}

fn is_int(e: &E, v: i64) -> bool {
    matches!(e.kind, ExprKind::Const(Scalar::I(x)) if x == v)
}

fn negate(s: SymExpr) -> SymExpr {
    SymExpr::mul([SymExpr::Int(-1), s])
}
