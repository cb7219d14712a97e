//! torch.export's loops, as loops in the generated code ([`LoopRegion`]):
//!
//! - `while_loop(cond, body, carried, additional)`: the carried values live in buffers of
//!   the loop's own (its state); the condition's kernels compute a flag the library tests
//!   after them; the body's kernels compute the next values, which are copied into the
//!   state as the iteration ends (each first in memory of the body's own, since a next
//!   value may read any carried one).
//! - `scan(combine, init, xs, additional)`: `combine` applied along the leading dimension
//!   of `xs`, carrying values from one step to the next and stacking the others. A short
//!   static length is unrolled (no loop, no copies); a longer or dynamic one is a loop
//!   whose state is a step counter and the carries, each step reading its slice of `xs`
//!   at the counter and writing its row of the stacked outputs (a pass over the stacked
//!   outputs per step: such a scan costs steps x outputs).
//!
//! A loop's body binds no data symbol: a size computed from data could change from one
//! iteration to the next.

use super::checks::show;
use super::control_flow::{Subgraph, MAX_UNROLLED};
use super::tensor::{vars, Repr, TensorValue};
use super::Lowerer;
use crate::error::{Error, Result};
use crate::ir::expr::{binary, cast, constant, index_value, select, size_value};
use crate::ir::{Affine, BufKind, Kernel, LoopRegion, Prim, Scalar, E};
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// What a loop computes from its state (the values it carries): whether to go on, or
/// the next state.
type FromState<'s, 'f, T> = dyn FnMut(&mut Lowerer<'s>, &[TensorValue]) -> Result<T> + 'f;

impl<'s> Lowerer<'s> {
    pub(super) fn while_loop(
        &mut self,
        cond: &Subgraph,
        body: &Subgraph,
        carried: &[TensorValue],
        additional: &[TensorValue],
        name: &str,
        err: &dyn Fn(String) -> Error,
    ) -> Result<Vec<TensorValue>> {
        let operands =
            |state: &[TensorValue]| -> Vec<TensorValue> { state.iter().chain(additional).cloned().collect() };
        self.emit_loop(
            carried,
            name,
            err,
            &mut |lw, state| match lw.lower_subgraph(cond, &operands(state))?.as_slice() {
                [p] => lw.only_element(p, "the condition of while_loop is a tensor of one element").map_err(err),
                other => Err(err(format!("the condition returns {} values, not one", other.len()))),
            },
            &mut |lw, state| lw.lower_subgraph(body, &operands(state)),
        )
    }

    pub(super) fn scan(
        &mut self,
        combine: &Subgraph,
        init: &[TensorValue],
        xs: &[TensorValue],
        additional: &[TensorValue],
        name: &str,
        err: &dyn Fn(String) -> Error,
    ) -> Result<Vec<TensorValue>> {
        let Some(steps) = xs.first().and_then(|x| x.sizes.first()).cloned() else {
            return Err(err("scan over no tensors, or over a 0-dim one".into()));
        };
        for (k, x) in xs.iter().enumerate() {
            let Some(n) = x.sizes.first() else { return Err(err(format!("scanned tensor {k} is 0-dim"))) };
            self.require(
                n.clone(),
                GuardOp::Eq,
                steps.clone(),
                &format!("{name}: the scanned tensors agree in length"),
            )
            .map_err(err)?;
        }
        if let Some(v) = init.iter().chain(xs).chain(additional).find(|v| v.complex) {
            return Err(err(format!("a complex operand ({}): scan carries real tensors only", v.type_name())));
        }
        match steps.as_int() {
            Some(n) if (1..=MAX_UNROLLED).contains(&n) => {
                self.scan_unrolled(combine, init, xs, additional, n, name, err)
            }
            _ => self.scan_loop(combine, init, xs, additional, &steps, name, err),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn scan_unrolled(
        &mut self,
        combine: &Subgraph,
        init: &[TensorValue],
        xs: &[TensorValue],
        additional: &[TensorValue],
        steps: i64,
        name: &str,
        err: &dyn Fn(String) -> Error,
    ) -> Result<Vec<TensorValue>> {
        let mut carries = init.to_vec();
        let mut rows: Vec<Vec<TensorValue>> = vec![];
        for i in 0..steps {
            let slices = xs.iter().map(|x| x.select(0, SymExpr::Int(i)));
            let operands: Vec<TensorValue> =
                carries.iter().cloned().chain(slices).chain(additional.iter().cloned()).collect();
            let results = self.lower_subgraph(combine, &operands)?;
            let (next, ys) = split_results(results, carries.len()).map_err(err)?;
            // Each step's values in memory: the next step (and the stacking) reads them.
            carries = next.iter().enumerate().map(|(k, v)| self.realize(v, &format!("{name}_{i}_carry{k}"))).collect();
            rows.resize(ys.len(), vec![]);
            for (k, y) in ys.iter().enumerate() {
                rows[k].push(self.realize(y, &format!("{name}_{i}_y{k}")).unsqueeze(0));
            }
        }
        let stacked: Vec<TensorValue> = rows
            .iter()
            .map(|parts| super::aten::index::concat(self, parts, 0, name).map_err(err))
            .collect::<Result<_>>()?;
        Ok(carries.into_iter().chain(stacked).collect())
    }

    #[allow(clippy::too_many_arguments)]
    fn scan_loop(
        &mut self,
        combine: &Subgraph,
        init: &[TensorValue],
        xs: &[TensorValue],
        additional: &[TensorValue],
        steps: &SymExpr,
        name: &str,
        err: &dyn Fn(String) -> Error,
    ) -> Result<Vec<TensorValue>> {
        // The stacked outputs, zeros before the loop (whose first kernel must write
        // them), with the types torch.export recorded for the combine function's outputs.
        let mut stacked = vec![];
        for (k, (dtype, sizes)) in self.subgraph_outputs(combine)?.into_iter().skip(init.len()).enumerate() {
            let sizes: Vec<SymExpr> = std::iter::once(steps.clone()).chain(sizes).collect();
            let zeros = TensorValue::lazy(dtype, sizes.clone(), constant(Scalar::I(0), dtype));
            stacked.push(self.copy(&zeros, &format!("{name}_ys{k}")));
        }
        let counter = TensorValue::lazy(DType::I64, vec![], constant(Scalar::I(0), DType::I64));
        let state_init: Vec<TensorValue> = std::iter::once(counter).chain(init.iter().cloned()).collect();
        let outputs = self.emit_loop(
            &state_init,
            name,
            err,
            &mut |_, state| Ok(binary(Prim::Lt, state[0].load(&[]), size_value(steps))),
            &mut |lw, state| {
                let step = state[0].load(&[]);
                let slices: Vec<TensorValue> = xs
                    .iter()
                    .enumerate()
                    .map(|(k, x)| {
                        let idx: Vec<E> = std::iter::once(step.clone())
                            .chain((0..x.rank() - 1).map(|d| index_value(Affine::var(d))))
                            .collect();
                        let body = lw.load_at_indices(x, &idx, &format!("{name}_xs{k}"));
                        TensorValue::lazy(x.dtype, x.sizes[1..].to_vec(), body)
                    })
                    .collect();
                let operands: Vec<TensorValue> =
                    state[1..].iter().cloned().chain(slices).chain(additional.iter().cloned()).collect();
                let results = lw.lower_subgraph(combine, &operands)?;
                let (next, ys) = split_results(results, state.len() - 1).map_err(err)?;
                if ys.len() != stacked.len() {
                    return Err(err(format!(
                        "the combine function stacks {} values, export recorded {}",
                        ys.len(),
                        stacked.len()
                    )));
                }
                for (k, (y, all)) in ys.iter().zip(&stacked).enumerate() {
                    if y.dtype != all.dtype || y.rank() + 1 != all.rank() || y.complex {
                        return Err(err(format!(
                            "stacked value {k}: {} where export recorded {}",
                            y.type_name(),
                            all.type_name()
                        )));
                    }
                    for (d, (a, b)) in y.sizes.iter().zip(&all.sizes[1..]).enumerate() {
                        let what = format!("{name}: stacked value {k} dimension {d} is the one recorded");
                        lw.require(a.clone(), GuardOp::Eq, b.clone(), &what).map_err(err)?;
                    }
                    // Every row of the stacked output: row `step` takes this step's value.
                    let Repr::View(r) = &all.repr else { unreachable!("a stacked output is a view of its buffer") };
                    let at = vars(all.rank());
                    let row = binary(Prim::Eq, index_value(Affine::var(0)), step.clone());
                    let write = select(row, y.load(&at[1..]), all.load(&at));
                    lw.prog.kernels.push(Kernel::Pointwise { out: r.buf, ranges: all.sizes.clone(), body: write });
                }
                let counter = binary(Prim::Add, step, constant(Scalar::I(1), DType::I64));
                Ok(std::iter::once(TensorValue::lazy(DType::I64, vec![], counter)).chain(next).collect())
            },
        )?;
        Ok(outputs.into_iter().skip(1).chain(stacked).collect())
    }

    /// The dtype and sizes torch.export recorded for each output of `sub`.
    fn subgraph_outputs(&mut self, sub: &Subgraph) -> Result<Vec<(DType, Vec<SymExpr>)>> {
        let fail = |message: String| Error::Lower { node: sub.name.clone(), target: "subgraph".into(), message };
        self.scopes.push(sub.graph.clone());
        let recorded = sub
            .graph
            .outputs
            .iter()
            .map(|o| match o {
                crate::frontend::schema::Argument::Tensor(t) => self.meta_sizes(&t.name),
                other => Err(format!("a non-tensor output {other:?}: aotc returns tensors only")),
            })
            .collect::<std::result::Result<Vec<_>, _>>();
        self.scopes.pop();
        recorded.map_err(fail)
    }

    /// A loop over `init` (copied into the loop's state): `cond` gives the one value whether
    /// to go on (any type; nonzero goes on), `body` the next values of the state.
    fn emit_loop(
        &mut self,
        init: &[TensorValue],
        name: &str,
        err: &dyn Fn(String) -> Error,
        cond: &mut FromState<'s, '_, E>,
        body: &mut FromState<'s, '_, Vec<TensorValue>>,
    ) -> Result<Vec<TensorValue>> {
        if init.is_empty() {
            return Err(err("a loop that carries no value".into()));
        }
        if let Some(c) = init.iter().find(|v| v.complex) {
            return Err(err(format!("a complex operand ({}): loops carry real tensors only", c.type_name())));
        }
        let state: Vec<TensorValue> =
            init.iter().enumerate().map(|(k, v)| self.copy(v, &format!("{name}_state{k}"))).collect();
        let bindings = self.prog.data_symbols.len();
        let cond_start = self.prog.kernels.len();
        let go_on = cond(self, &state)?;
        let flag = self.prog.add_buffer(format!("{name}_go_on"), DType::I64, vec![], BufKind::Scratch);
        let go_on = cast(cast(go_on, DType::Bool), DType::I64);
        self.prog.kernels.push(Kernel::Pointwise { out: flag, ranges: vec![], body: go_on });
        let body_start = self.prog.kernels.len();
        let next = body(self, &state)?;
        if next.len() != state.len() {
            return Err(err(format!("the body returns {} values for {} carried", next.len(), state.len())));
        }
        let mut fresh = vec![];
        for (k, (v, s)) in next.iter().zip(&state).enumerate() {
            if v.dtype != s.dtype || v.rank() != s.rank() || v.complex {
                let ty = |v: &TensorValue| format!("{}[{}]", v.type_name(), show(&v.sizes));
                return Err(err(format!("carried value {k}: the body turns {} into {}", ty(s), ty(v))));
            }
            for (d, (a, b)) in v.sizes.iter().zip(&s.sizes).enumerate() {
                let what = format!("{name}: carried value {k} keeps dimension {d}");
                self.require(a.clone(), GuardOp::Eq, b.clone(), &what).map_err(err)?;
            }
            let computed_in_body = match &v.repr {
                Repr::View(r) => self.prog.kernels[body_start..].iter().any(|k| k.out() == r.buf),
                Repr::Lazy(..) => false,
            };
            fresh.push(match computed_in_body {
                true => v.clone(),
                false => self.copy(v, &format!("{name}_next{k}")),
            });
        }
        for (v, s) in fresh.iter().zip(&state) {
            let Repr::View(r) = &s.repr else { unreachable!("the state is a view of its buffer") };
            let body = v.load(&vars(v.rank()));
            self.prog.kernels.push(Kernel::Pointwise { out: r.buf, ranges: s.sizes.clone(), body });
        }
        if let Some(d) = self.prog.data_symbols.get(bindings) {
            return Err(err(format!(
                "{} inside the loop computes a size from data, which could change from one iteration to the next: \
                 not supported",
                d.what
            )));
        }
        let end = self.prog.kernels.len();
        self.prog.loops.push(LoopRegion { cond: cond_start, body: body_start, end, flag });
        Ok(state)
    }
}

/// A step's results: the next carries (the first `carries`), then the values stacked.
fn split_results(
    mut results: Vec<TensorValue>,
    carries: usize,
) -> std::result::Result<(Vec<TensorValue>, Vec<TensorValue>), String> {
    if results.len() < carries {
        return Err(format!("the combine function returns {} values for {carries} carries", results.len()));
    }
    let ys = results.split_off(carries);
    Ok((results, ys))
}
