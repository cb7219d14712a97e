//! The program's own checks: `_assert_scalar` (a condition on sizes or on data symbols,
//! `torch._check`), `sym_constrain_range(_for_size)` (`torch._check_is_size`, ranges) and
//! `_assert_async` (a condition on a tensor's value: `one_hot`'s class range, an `assert`
//! on data). Each becomes requirements through [`Lowerer::require`]: decided at compile
//! time where the sizes and ranges decide them, else run-time guards that fail the call
//! with the assert's own message before the code that relies on it runs. A check on
//! data binds a data symbol (0 or 1) from the tensor, so the guard runs in the stage
//! after the kernels that compute it.

use super::args::Args;
use super::Lowerer;
use crate::frontend::schema::{Argument, Node};
use crate::frontend::sympy;
use crate::ir::expr::cast;
use crate::ir::{BufKind, Kernel};
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

const ASSERT_SCALAR: &str = "torch.ops.aten._assert_scalar.default";
const ASSERT_ASYNC: &str = "torch.ops.aten._assert_async.default";
const ASSERT_ASYNC_MSG: &str = "torch.ops.aten._assert_async.msg";
const CONSTRAIN_RANGE: &str = "torch.ops.aten.sym_constrain_range.default";
const CONSTRAIN_RANGE_FOR_SIZE: &str = "torch.ops.aten.sym_constrain_range_for_size.default";

/// The checks lowered here, by target.
pub const TARGETS: &[&str] =
    &[ASSERT_SCALAR, ASSERT_ASYNC, ASSERT_ASYNC_MSG, CONSTRAIN_RANGE, CONSTRAIN_RANGE_FOR_SIZE];

pub fn is_assert(target: &str) -> bool {
    TARGETS.contains(&target)
}

/// `lhs op rhs`, one of the requirements a condition is the conjunction of.
type Requirement = (SymExpr, GuardOp, SymExpr);

impl Lowerer<'_> {
    pub(super) fn lower_assert(&mut self, node: &Node) -> Result<(), String> {
        let a = Args { node };
        match node.target.as_str() {
            ASSERT_SCALAR => {
                let message = a.string_or("assert_msg", "assertion failed")?;
                let condition = match a.get("self") {
                    Some(Argument::Bool(true)) => return Ok(()),
                    Some(Argument::Bool(false)) => return Err(format!("{message}: the condition is False")),
                    Some(Argument::SymBool(v)) => self.sym_bool(v)?,
                    other => return Err(format!("argument 'self' should be a SymBool, got {other:?}")),
                };
                for (lhs, op, rhs) in condition {
                    self.require_assert(lhs, op, rhs, &message)?;
                }
                Ok(())
            }
            CONSTRAIN_RANGE | CONSTRAIN_RANGE_FOR_SIZE => {
                let size = a.sym_int(self, "size")?;
                // torch._check_is_size: a size is never negative.
                let min = match (a.opt_int("min")?, node.target == CONSTRAIN_RANGE_FOR_SIZE) {
                    (Some(m), _) => Some(m),
                    (None, true) => Some(0),
                    (None, false) => None,
                };
                if let Some(min) = min {
                    self.require_assert(SymExpr::Int(min), GuardOp::Le, size.clone(), &format!("{size} >= {min}"))?;
                }
                if let Some(max) = a.opt_int("max")? {
                    self.require_assert(size.clone(), GuardOp::Le, SymExpr::Int(max), &format!("{size} <= {max}"))?;
                }
                Ok(())
            }
            _ => {
                let message = a.string_or("assert_msg", "assertion failed (torch._assert_async)")?;
                self.assert_on_data(&a, &message)
            }
        }
    }

    /// `_assert_async(t)`: the one element of `t` must be nonzero when the call runs.
    fn assert_on_data(&mut self, a: &Args, message: &str) -> Result<(), String> {
        let x = a.tensor(self, "self")?;
        let element = self.only_element(&x, "an assert's condition is a tensor of one element")?;
        let name = format!("{}_holds", a.node_name());
        let flag = self.prog.add_buffer(name.as_str(), DType::I64, vec![], BufKind::Scratch);
        let body = cast(cast(element, DType::Bool), DType::I64);
        self.prog.kernels.push(Kernel::Pointwise { out: flag, ranges: vec![], body });
        let holds = self.symbol_id(&format!("__{name}"));
        let range = &mut self.symbols[holds as usize];
        (range.min, range.max) = (0, Some(1));
        self.bind_data_symbol(holds, flag);
        self.require_assert(SymExpr::Sym(holds), GuardOp::Eq, SymExpr::Int(1), message)
    }

    /// The requirements whose conjunction the SymBool argument `v` (`{"as_name": n}`)
    /// names, from the graph's `sym_bool_values`.
    pub(super) fn sym_bool(&mut self, v: &serde_json::Value) -> Result<Vec<Requirement>, String> {
        if let Some(b) = v.get("as_bool").and_then(|b| b.as_bool()) {
            return Ok(constant_condition(b));
        }
        let name = v.get("as_name").and_then(|n| n.as_str()).ok_or_else(|| format!("unexpected SymBool {v}"))?;
        let values = match self.scopes.last() {
            Some(sub) => &sub.sym_bool_values,
            None => &self.src.program.graph_module.graph.sym_bool_values,
        };
        let recorded = values.get(name).cloned().ok_or_else(|| format!("SymBool '{name}' has no recorded value"))?;
        if let Some(b) = recorded.get("as_bool").and_then(|b| b.as_bool()) {
            return Ok(constant_condition(b));
        }
        let text = recorded
            .get("as_expr")
            .and_then(|e| e.get("expr_str"))
            .and_then(|e| e.as_str())
            .ok_or_else(|| format!("SymBool '{name}': unexpected record {recorded}"))?;
        self.condition(text).map_err(|m| format!("SymBool '{name}' ({text}): {m}"))
    }

    /// A sympy relational (`StrictLessThan(Symbol('u0'), Integer(1))`, `And(...)`) as the
    /// requirements it is the conjunction of (integers: `a < b` is `a + 1 <= b`).
    fn condition(&mut self, text: &str) -> Result<Vec<Requirement>, String> {
        let text = text.trim();
        match text {
            "true" | "True" | "BooleanTrue()" => return Ok(constant_condition(true)),
            "false" | "False" | "BooleanFalse()" => return Ok(constant_condition(false)),
            _ => {}
        }
        let (head, args) = split_call(text).ok_or_else(|| "not a condition".to_string())?;
        if head == "And" {
            let mut all = vec![];
            for a in args {
                all.extend(self.condition(a)?);
            }
            return Ok(all);
        }
        let [a, b] = args.as_slice() else { return Err(format!("{head} with {} arguments", args.len())) };
        let mut parse = |t: &str| sympy::parse(t, &mut |n| self.symbol_id(n));
        let (a, b) = (parse(a)?, parse(b)?);
        let (a, b) = (self.resolve(&a), self.resolve(&b));
        let plus_one = |e: SymExpr| SymExpr::add([e, SymExpr::Int(1)]);
        Ok(vec![match head {
            "Equality" | "Eq" => (a, GuardOp::Eq, b),
            "LessThan" | "Le" => (a, GuardOp::Le, b),
            "GreaterThan" | "Ge" => (b, GuardOp::Le, a),
            "StrictLessThan" | "Lt" => (plus_one(a), GuardOp::Le, b),
            "StrictGreaterThan" | "Gt" => (plus_one(b), GuardOp::Le, a),
            other => return Err(format!("aotc checks conjunctions of =, <=, <, >=, > only, not {other}")),
        }])
    }
}

/// A condition that always holds (no requirement) or never does (`1 <= 0`).
fn constant_condition(holds: bool) -> Vec<Requirement> {
    if holds {
        vec![]
    } else {
        vec![(SymExpr::Int(1), GuardOp::Le, SymExpr::Int(0))]
    }
}

/// `Head(arg, arg, ...)` split at the top level: the head and the argument texts.
fn split_call(text: &str) -> Option<(&str, Vec<&str>)> {
    let open = text.find('(')?;
    let inner = text.strip_suffix(')')?.get(open + 1..)?;
    let (mut depth, mut start, mut args) = (0usize, 0, vec![]);
    for (i, c) in inner.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                args.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    args.push(inner[start..].trim());
    Some((&text[..open], args))
}

#[cfg(test)]
mod tests {
    use super::split_call;

    #[test]
    fn calls_split_at_the_top_level_only() {
        let (head, args) = split_call("And(StrictLessThan(Symbol('u0'), Integer(1)), Eq(Add(a, b), c))").unwrap();
        assert_eq!(head, "And");
        assert_eq!(args, ["StrictLessThan(Symbol('u0'), Integer(1))", "Eq(Add(a, b), c)"]);
        assert!(split_call("Symbol").is_none());
        assert!(split_call("F(a))(").is_none());
    }
}
