//! torch.export's control-flow operators, whose bodies are subgraphs lowered like the main
//! graph (in their own scope of names and recorded metadata, nested ones too):
//!
//! - `cond(pred, true_graph, false_graph, operands)`: a predicate that export or the
//!   symbols' ranges decide selects one branch at compile time. A predicate on data is
//!   taken at run time by selection: both branches are computed and each output element
//!   is `pred ? true_value : false_value` (a predicate on sizes that the ranges leave open
//!   is computed from the sizes of the call the same way). The branches of `torch.cond` are pure functions
//!   of their operands with outputs of the same types (torch checks this), so selection
//!   gives the taken branch's values; what it costs is the other branch's work.
//! - `map_impl(body, xs, args)`: the body applied to each slice of `xs` along their leading
//!   dimension, which must be static (the loop is unrolled); the results are stacked.
//!
//! - `while_loop` and `scan`: loops in the generated code (loops.rs).
//! - `wrap_with_autocast` with autocast disabled: the region's subgraph as it stands.

use super::checks::show;
use super::tensor::{vars, TensorValue};
use super::{count_users, output_names, Lowerer};
use crate::error::{Error, Result};
use crate::frontend::schema::{self, Argument, Node};
use crate::ir::expr::{binary, cast, constant, select, size_value};
use crate::ir::{Prim, Scalar};
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::rc::Rc;

const COND: &str = "torch.ops.higher_order.cond";
const MAP: &str = "torch.ops.higher_order.map_impl";
const AUTOCAST: &str = "torch.ops.higher_order.wrap_with_autocast";
const WHILE: &str = "torch.ops.higher_order.while_loop";
const SCAN: &str = "torch.ops.higher_order.scan";

/// The most iterations `map` (and `scan`) is unrolled to: each one is a copy of the
/// body's code.
pub(super) const MAX_UNROLLED: i64 = 64;

/// The control-flow operators lowered here, by target.
pub const TARGETS: &[&str] = &[COND, MAP, WHILE, SCAN, AUTOCAST];

pub fn is_control_flow(target: &str) -> bool {
    TARGETS.contains(&target)
}

/// A subgraph argument (`{"as_graph": {"name": ..., "graph": ...}}`).
pub struct Subgraph {
    pub name: String,
    pub graph: Rc<schema::Graph>,
}

#[derive(serde::Deserialize)]
struct GraphArgument {
    name: String,
    graph: schema::Graph,
}

/// The subgraph `arg` holds, if it is one.
pub fn subgraph(arg: &Argument) -> Option<std::result::Result<Subgraph, String>> {
    let Argument::Graph(v) = arg else { return None };
    Some(
        serde_json::from_value::<GraphArgument>(v.clone())
            .map(|g| Subgraph { name: g.name, graph: Rc::new(g.graph) })
            .map_err(|e| format!("a subgraph the schema does not describe: {e}")),
    )
}

impl Lowerer<'_> {
    pub(super) fn lower_control_flow(&mut self, node: &Node) -> Result<Vec<TensorValue>> {
        let name = node.name.clone().unwrap_or_else(|| output_names(node).join(","));
        let err = |message: String| Error::Lower { node: name.clone(), target: node.target.clone(), message };
        let args: Vec<&Argument> = node.inputs.iter().map(|a| &a.arg).collect();
        let graph = |a: &Argument| subgraph(a).unwrap_or_else(|| Err(format!("expected a subgraph, got {a:?}")));
        let results = match (node.target.as_str(), args.as_slice()) {
            (COND, [pred, on_true, on_false, operands]) => {
                let (on_true, on_false) = (graph(on_true).map_err(err)?, graph(on_false).map_err(err)?);
                let operands = self.tensor_list(operands).map_err(err)?;
                self.cond(pred, &on_true, &on_false, &operands, &name, &err)?
            }
            (MAP, [body, xs, rest]) => {
                let body = graph(body).map_err(err)?;
                let (xs, rest) = (self.tensor_list(xs).map_err(err)?, self.tensor_list(rest).map_err(err)?);
                self.map(&body, &xs, &rest, &name, &err)?
            }
            (WHILE, [cond, body, carried, additional]) => {
                let (cond, body) = (graph(cond).map_err(err)?, graph(body).map_err(err)?);
                let carried = self.tensor_list(carried).map_err(err)?;
                let additional = self.tensor_list(additional).map_err(err)?;
                self.while_loop(&cond, &body, &carried, &additional, &name, &err)?
            }
            (SCAN, [combine, init, xs, additional]) => {
                let combine = graph(combine).map_err(err)?;
                let init = self.tensor_list(init).map_err(err)?;
                let xs = self.tensor_list(xs).map_err(err)?;
                let additional = self.tensor_list(additional).map_err(err)?;
                self.scan(&combine, &init, &xs, &additional, &name, &err)?
            }
            // A region under `torch.autocast(..., enabled=False)`: its operators keep
            // their dtypes, so it is the subgraph as it stands.
            (AUTOCAST, [_device, _dtype, Argument::Bool(false), _cache, body, operands @ ..]) => {
                let body = graph(body).map_err(err)?;
                let operands: Vec<TensorValue> = operands
                    .iter()
                    .map(|o| match o {
                        Argument::Tensor(t) => self.value(&t.name),
                        other => Err(format!("an autocast operand {other:?}: aotc passes tensors only")),
                    })
                    .collect::<std::result::Result<_, _>>()
                    .map_err(err)?;
                self.lower_subgraph(&body, &operands)?
            }
            (AUTOCAST, _) => {
                return Err(err("torch.autocast enabled inside the program is not supported: export the model \
                                in the dtype it should run in"
                    .into()))
            }
            _ => return Err(err(format!("unexpected arguments {args:?}"))),
        };
        // The selection and stacking kernels belong to the control-flow node itself.
        self.node_desc = format!("node '{name}' ({})", node.target);
        self.begin_node(Some(super::origin::graph_node(node, &name)));
        Ok(results)
    }

    pub(super) fn tensor_list(&self, arg: &Argument) -> std::result::Result<Vec<TensorValue>, String> {
        match arg {
            Argument::Tensors(ts) => ts.iter().map(|t| self.value(&t.name)).collect(),
            other => Err(format!("expected a list of tensors, got {other:?}")),
        }
    }

    /// The outputs of `sub` applied to `operands`, lowered in the subgraph's own scope.
    pub(super) fn lower_subgraph(&mut self, sub: &Subgraph, operands: &[TensorValue]) -> Result<Vec<TensorValue>> {
        let graph = sub.graph.clone();
        let fail = |message: String| Error::Lower { node: sub.name.clone(), target: "subgraph".into(), message };
        if graph.inputs.len() != operands.len() {
            return Err(fail(format!("takes {} inputs, given {}", graph.inputs.len(), operands.len())));
        }
        let outer_env = std::mem::take(&mut self.env);
        let outer_users = std::mem::replace(&mut self.users, count_users(&graph));
        self.scopes.push(graph.clone());
        let result = (|| {
            for (input, value) in graph.inputs.iter().zip(operands) {
                let Argument::Tensor(t) = input else {
                    return Err(fail(format!("a non-tensor input {input:?}: aotc passes tensors only")));
                };
                self.check_meta(&t.name, value).map_err(fail)?;
                self.env.insert(t.name.clone(), value.clone());
            }
            for node in &graph.nodes {
                self.lower_node(None, node)?;
            }
            let mut outputs = vec![];
            for o in &graph.outputs {
                let Argument::Tensor(t) = o else {
                    return Err(fail(format!("a non-tensor output {o:?}: aotc returns tensors only")));
                };
                outputs.push(self.value(&t.name).map_err(fail)?);
            }
            Ok(outputs)
        })();
        self.scopes.pop();
        self.env = outer_env;
        self.users = outer_users;
        result
    }

    fn cond(
        &mut self,
        pred: &Argument,
        on_true: &Subgraph,
        on_false: &Subgraph,
        operands: &[TensorValue],
        name: &str,
        err: &dyn Fn(String) -> Error,
    ) -> Result<Vec<TensorValue>> {
        let pred = match pred {
            Argument::Bool(b) => Predicate::Static(*b),
            Argument::SymBool(v) => match (self.decide(v), self.sym_bool(v)) {
                (Ok(Some(b)), _) => Predicate::Static(b),
                (Ok(None), Ok(condition)) => Predicate::Data(self.sizes_hold(&condition)),
                (Err(m), _) | (_, Err(m)) => return Err(err(m)),
            },
            Argument::Tensor(t) => match self.value(&t.name) {
                Ok(p) => Predicate::Data(p),
                Err(m) => return Err(err(m)),
            },
            other => return Err(err(format!("unexpected predicate {other:?}"))),
        };
        let pred = match pred {
            Predicate::Static(true) => return self.lower_subgraph(on_true, operands),
            Predicate::Static(false) => return self.lower_subgraph(on_false, operands),
            Predicate::Data(p) => p,
        };
        let taken = self.lower_subgraph(on_true, operands)?;
        let other = self.lower_subgraph(on_false, operands)?;
        self.select_outputs(&pred, taken, other, name).map_err(err)
    }

    /// Each output `pred ? t : f` elementwise, the one-element `pred` read once per element.
    fn select_outputs(
        &mut self,
        pred: &TensorValue,
        on_true: Vec<TensorValue>,
        on_false: Vec<TensorValue>,
        name: &str,
    ) -> std::result::Result<Vec<TensorValue>, String> {
        let holds = cast(self.only_element(pred, "the predicate of cond is a tensor of one element")?, DType::Bool);
        if on_true.len() != on_false.len() {
            return Err(format!("the branches return {} and {} values", on_true.len(), on_false.len()));
        }
        let mut out = vec![];
        for (k, (t, f)) in on_true.iter().zip(&on_false).enumerate() {
            if t.dtype != f.dtype || t.rank() != f.rank() || t.complex || f.complex {
                let ty = |v: &TensorValue| format!("{}[{}]", v.type_name(), show(&v.sizes));
                return Err(format!("output {k}: the branches give {} and {}", ty(t), ty(f)));
            }
            for (d, (a, b)) in t.sizes.iter().zip(&f.sizes).enumerate() {
                self.require(a.clone(), GuardOp::Eq, b.clone(), &format!("{name}: output {k} dimension {d} agrees"))?;
            }
            let at = vars(t.rank());
            let body = select(holds.clone(), t.load(&at), f.load(&at));
            out.push(TensorValue::lazy(t.dtype, t.sizes.clone(), body));
        }
        Ok(out)
    }

    /// A 0-dim bool value: whether every requirement of `condition` holds for the sizes
    /// of the call (a predicate on sizes the ranges leave open).
    fn sizes_hold(&self, condition: &[(SymExpr, GuardOp, SymExpr)]) -> TensorValue {
        let holds = condition.iter().fold(constant(Scalar::B(true), DType::Bool), |all, (lhs, op, rhs)| {
            let prim = match op {
                GuardOp::Eq => Prim::Eq,
                GuardOp::Le => Prim::Le,
            };
            binary(Prim::And, all, binary(prim, size_value(lhs), size_value(rhs)))
        });
        TensorValue::lazy(DType::Bool, vec![], holds)
    }

    /// A SymBool decided at compile time by the symbols' ranges, or None.
    fn decide(&mut self, v: &serde_json::Value) -> std::result::Result<Option<bool>, String> {
        let mut all = Some(true);
        for (lhs, op, rhs) in self.sym_bool(v)? {
            let holds = match op {
                GuardOp::Eq => lhs.equal_under(&rhs, &self.symbols),
                GuardOp::Le => lhs.le_under(&rhs, &self.symbols),
            };
            all = match (all, holds) {
                (_, Some(false)) => return Ok(Some(false)),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
        }
        Ok(all)
    }

    fn map(
        &mut self,
        body: &Subgraph,
        xs: &[TensorValue],
        rest: &[TensorValue],
        name: &str,
        err: &dyn Fn(String) -> Error,
    ) -> Result<Vec<TensorValue>> {
        let Some(first) = xs.first() else { return Err(err("map over no tensors".into())) };
        let Some(n) = first.sizes.first().and_then(|s| s.as_int()) else {
            return Err(err(
                "map over a dynamic or 0-dim leading dimension: aotc unrolls map and needs its length".into()
            ));
        };
        if !(1..=MAX_UNROLLED).contains(&n) {
            return Err(err(format!("map over {n} slices: aotc unrolls map up to {MAX_UNROLLED}")));
        }
        if xs.iter().any(|x| x.sizes.first() != Some(&SymExpr::Int(n))) {
            return Err(err("the mapped tensors differ in their leading dimension".into()));
        }
        let mut per_output: Vec<Vec<TensorValue>> = vec![];
        for i in 0..n {
            let operands: Vec<TensorValue> =
                xs.iter().map(|x| x.select(0, SymExpr::Int(i))).chain(rest.iter().cloned()).collect();
            let results = self.lower_subgraph(body, &operands)?;
            per_output.resize(results.len(), vec![]);
            for (k, r) in results.iter().enumerate() {
                per_output[k].push(self.realize(r, &format!("{name}_{i}_{k}")).unsqueeze(0));
            }
        }
        per_output.iter().map(|parts| super::aten::index::concat(self, parts, 0, name).map_err(err)).collect()
    }
}

enum Predicate {
    Static(bool),
    Data(TensorValue),
}
