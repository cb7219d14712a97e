//! Work that depends only on a pointwise kernel's outer loop, computed once per outer
//! index by a kernel of its own: squeeze-and-excite's `x * sigmoid(s[c])` evaluated the
//! sigmoid of one value per channel at every element of the channel's plane (EfficientNet:
//! a third of its pointwise time). The hoisted part is a maximal subexpression that reads
//! no loop variable but the first and holds an expensive operation (a transcendental,
//! a division, a power); it becomes a one-dimensional kernel writing a new buffer, read
//! back by the original kernel at the outer index.
//!
//! Runs after `squeeze` and `collapse` (so that the outer loop is a real one, not a unit
//! batch, and a batch's images and channels are one loop), for every target: the
//! program stays the same program, with one more kernel.

use crate::ir::expr::{load, map_operands, operands, Affine, Expr, ExprKind, E};
use crate::ir::{BufKind, Kernel, Prim, Program};
use crate::lower::Lowered;
use aotc_abi::sym::SymExpr;
use std::collections::HashMap;
use std::rc::Rc;

/// Inner iterations (per outer index) below which hoisting saves too little to pay for a
/// kernel of its own.
const MIN_INNER: i64 = 8;

pub fn hoist_outer_invariants(lowered: &mut Lowered) {
    let prog = &mut lowered.program;
    let mut i = 0;
    while i < prog.kernels.len() {
        let hoisted = match &prog.kernels[i] {
            Kernel::Pointwise { ranges, body, .. } if worth_it(ranges) => {
                let (outer, body) = (ranges[0].clone(), body.clone());
                let mut hoister = Hoister { prog, outer, facts: HashMap::new(), done: HashMap::new(), kernels: vec![] };
                let body = hoister.rewrite(&body);
                let kernels = hoister.kernels;
                if let Kernel::Pointwise { body: old, .. } = &mut prog.kernels[i] {
                    *old = body;
                }
                kernels
            }
            _ => vec![],
        };
        let nodes = prog.kernel_nodes.get(i).cloned().unwrap_or_default();
        for kernel in hoisted {
            prog.insert_kernel(i, kernel, nodes.clone());
            i += 1;
        }
        i += 1;
    }
}

/// A kernel of at least two loops with [`MIN_INNER`] inner iterations (or a symbolic count).
fn worth_it(ranges: &[SymExpr]) -> bool {
    ranges.len() >= 2 && SymExpr::product(&ranges[1..]).as_int().is_none_or(|n| n >= MIN_INNER)
}

struct Hoister<'a> {
    prog: &'a mut Program,
    /// The outer loop's range: the hoisted buffers' length.
    outer: SymExpr,
    /// Per node: what [`Facts`] says of it.
    facts: HashMap<*const Expr, Facts>,
    /// Per node already rewritten: its replacement.
    done: HashMap<*const Expr, E>,
    /// The kernels computing the hoisted values, in order.
    kernels: Vec<Kernel>,
}

/// What decides whether a subexpression is hoisted, worked out once per node.
#[derive(Clone, Copy)]
struct Facts {
    /// A bit per loop variable it reads (bit 63: any variable from 63 on).
    vars: u64,
    /// It holds an operation that costs many instructions per element.
    expensive: bool,
}

impl Hoister<'_> {
    fn rewrite(&mut self, e: &E) -> E {
        if let Some(done) = self.done.get(&Rc::as_ptr(e)) {
            return done.clone();
        }
        let facts = self.facts(e);
        let out = if facts.vars & !1 == 0 && facts.expensive {
            let buf = self.prog.add_buffer("hoisted", e.dtype, vec![self.outer.clone()], BufKind::Scratch);
            self.kernels.push(Kernel::Pointwise { out: buf, ranges: vec![self.outer.clone()], body: e.clone() });
            load(buf, e.dtype, Affine::var(0))
        } else if matches!(e.kind, ExprKind::Load { .. } | ExprKind::Const(_) | ExprKind::Index(_)) {
            e.clone()
        } else {
            Rc::new(Expr { dtype: e.dtype, kind: map_operands(e, |x| self.rewrite(x)) })
        };
        self.done.insert(Rc::as_ptr(e), out.clone());
        out
    }

    fn facts(&mut self, e: &E) -> Facts {
        if let Some(&facts) = self.facts.get(&Rc::as_ptr(e)) {
            return facts;
        }
        let of_affine = |a: &Affine| a.terms.iter().fold(0u64, |bits, (v, _)| bits | 1 << (*v).min(63));
        let mut facts = match &e.kind {
            ExprKind::Load { index, .. } | ExprKind::Index(index) => Facts { vars: of_affine(index), expensive: false },
            ExprKind::Unary(op, _) | ExprKind::Binary(op, _, _) => Facts { vars: 0, expensive: expensive(*op) },
            _ => Facts { vars: 0, expensive: false },
        };
        for x in operands(e) {
            let of = self.facts(x);
            facts.vars |= of.vars;
            facts.expensive |= of.expensive;
        }
        self.facts.insert(Rc::as_ptr(e), facts);
        facts
    }
}

/// Whether `op` costs many instructions per element: a transcendental, a division, a power.
fn expensive(op: Prim) -> bool {
    use Prim::*;
    matches!(
        op,
        Recip
            | Sqrt
            | Rsqrt
            | Exp
            | Expm1
            | Log
            | Log1p
            | Log2
            | Log10
            | Sigmoid
            | Tanh
            | Erf
            | Sin
            | Cos
            | Tan
            | Asin
            | Acos
            | Atan
            | Sinh
            | Cosh
            | Asinh
            | Acosh
            | Atanh
            | Div
            | Fmod
            | Atan2
            | Pow
    )
}

#[cfg(test)]
mod tests {
    use super::hoist_outer_invariants;
    use crate::ir::expr::{binary, load, unary, Affine};
    use crate::ir::program::{BufKind, Kernel, LoopRegion};
    use crate::ir::Prim;
    use crate::lower::Lowered;
    use aotc_abi::manifest::GraphNode;
    use aotc_abi::sym::SymExpr;
    use aotc_abi::DType;

    /// `out[c, p] = x[c, p] * sigmoid(s[c])` (squeeze-and-excite's scale), then a kernel
    /// whose outer-only part is cheap, inside a loop's body.
    fn lowered() -> Lowered {
        let mut l = Lowered::default();
        let p = &mut l.program;
        let int = SymExpr::Int;
        let x = p.add_buffer("x", DType::F32, vec![int(6), int(10)], BufKind::Input(0));
        let s = p.add_buffer("s", DType::F32, vec![int(6)], BufKind::Input(1));
        let y = p.add_buffer("y", DType::F32, vec![int(6), int(10)], BufKind::Scratch);
        let z = p.add_buffer("z", DType::F32, vec![int(6), int(10)], BufKind::Scratch);
        let flag = p.add_buffer("go_on", DType::I64, vec![], BufKind::Scratch);
        let element = |buf| load(buf, DType::F32, Affine::var(0).scale(&int(10)).plus(&Affine::var(1)));
        let scale = unary(Prim::Sigmoid, load(s, DType::F32, Affine::var(0)));
        let ranges = vec![int(6), int(10)];
        p.kernels.push(Kernel::Pointwise { out: flag, ranges: vec![], body: crate::ir::expr::int(0) });
        p.kernels.push(Kernel::Pointwise {
            out: y,
            ranges: ranges.clone(),
            body: binary(Prim::Mul, element(x), scale),
        });
        let cheap = binary(Prim::Add, load(s, DType::F32, Affine::var(0)), load(s, DType::F32, Affine::var(0)));
        p.kernels.push(Kernel::Pointwise { out: z, ranges, body: binary(Prim::Mul, element(y), cheap) });
        p.kernel_nodes = vec![vec![0], vec![1], vec![2]];
        p.nodes = ["go_on", "mul", "mul_1"]
            .map(|name| GraphNode {
                name: name.into(),
                target: "torch.ops.aten.mul.Tensor".into(),
                module: None,
                module_type: None,
                source: None,
            })
            .to_vec();
        p.loops.push(LoopRegion { cond: 0, body: 1, end: 3, flag });
        l
    }

    #[test]
    fn an_expensive_part_of_the_outer_loop_alone_gets_its_own_kernel() {
        let mut l = lowered();
        hoist_outer_invariants(&mut l);
        let p = &l.program;
        assert_eq!(p.kernels.len(), 4, "one kernel more: the sigmoid per channel");
        let Kernel::Pointwise { out: hoisted, ranges, body } = &p.kernels[1] else { panic!("not pointwise") };
        assert_eq!((ranges.as_slice(), body.to_string()), ([SymExpr::Int(6)].as_slice(), "sigmoid(buf1[i0])".into()));
        let Kernel::Pointwise { body, .. } = &p.kernels[2] else { panic!("not pointwise") };
        assert_eq!(body.to_string(), format!("mul(buf0[10*i0 + i1], {hoisted}[i0])"));
        let Kernel::Pointwise { body, .. } = &p.kernels[3] else { panic!("not pointwise") };
        assert!(!body.to_string().contains("buf5"), "a cheap outer part stays: {body}");
        // The new kernel joins the body of the loop its kernel was in, with its graph nodes.
        let region = &p.loops[0];
        assert_eq!((region.cond, region.body, region.end), (0, 1, 4));
        assert_eq!(p.kernel_nodes, [vec![0], vec![1], vec![1], vec![2]]);
        assert_eq!(crate::ir::verify::verify(p), Ok(()));
    }
}
