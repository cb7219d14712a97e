//! Loop nests for pointwise and reduction kernels; extern calls for the others.
//!
//! The innermost loop runs on f32x4 vectors when the body allows it
//! ([`expr::vectorizable`]), with a scalar loop for the remainder; a pointwise body that
//! reads a buffer transposed runs its last two loops in tiles ([`expr::reads_transposed`]).

use super::expr::{self, Lanes};
use super::{extern_call, half, matmul};
use crate::ir::expr::E;
use crate::ir::{BufId, Kernel, Program, ReduceOp};
use crate::passes::plan::Plan;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, BlockArg, Endianness, FuncRef, Function, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::Module;
use cranelift_object::ObjectModule;
use std::collections::HashMap;

pub type R<T> = Result<T, String>;

/// State while emitting one kernel function.
pub struct Cx<'a, 'b> {
    pub b: FunctionBuilder<'b>,
    pub module: &'a mut ObjectModule,
    pub program: &'a Program,
    bases: HashMap<BufId, Value>,
    dims: HashMap<SymExpr, Value>,
    libm: HashMap<String, FuncRef>,
    /// `[begin, end)` of the kernel's split loop ([`Kernel::split`]), when it has one.
    split: Option<(Value, Value)>,
}

pub fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// The type of a value of dtype `d` in registers (16-bit floats are computed in f32).
pub fn clif_type(d: DType) -> R<Type> {
    Ok(match d {
        DType::F32 | DType::F16 | DType::BF16 => types::F32,
        DType::F64 => types::F64,
        DType::I64 => types::I64,
        DType::I32 => types::I32,
        DType::I16 => types::I16,
        DType::I8 | DType::U8 | DType::Bool => types::I8,
    })
}

impl<'a, 'b> Cx<'a, 'b> {
    /// The base address of a buffer (loaded once, in the entry block).
    pub fn base(&self, buf: BufId) -> Value {
        self.bases[&buf]
    }

    /// A symbolic size as an i64 value.
    pub fn sym(&mut self, e: &SymExpr) -> Value {
        match e.as_int() {
            Some(v) => self.b.ins().iconst(types::I64, v),
            None => self.dims[e],
        }
    }

    /// Declares (once per function) and returns a libm function of one or two arguments.
    pub fn libm(&mut self, name: &str, ty: Type, args: usize) -> R<FuncRef> {
        if let Some(f) = self.libm.get(name) {
            return Ok(*f);
        }
        let mut sig = self.module.make_signature();
        for _ in 0..args {
            sig.params.push(cranelift_codegen::ir::AbiParam::new(ty));
        }
        sig.returns.push(cranelift_codegen::ir::AbiParam::new(ty));
        let id =
            self.module.declare_function(name, cranelift_module::Linkage::Import, &sig).map_err(|e| e.to_string())?;
        let f = self.module.declare_func_in_func(id, self.b.func);
        self.libm.insert(name.to_string(), f);
        Ok(f)
    }

    /// `for iv in (start..end).step_by(step)` while `iv + step <= end`; returns the first
    /// index not visited (where a remainder loop starts).
    pub fn for_loop(
        &mut self,
        start: Value,
        end: Value,
        step: i64,
        body: &mut dyn FnMut(&mut Self, Value) -> R<()>,
    ) -> R<Value> {
        let header = self.b.create_block();
        let body_block = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        self.b.append_block_param(exit, types::I64);
        self.b.ins().jump(header, &[BlockArg::Value(start)]);
        self.b.switch_to_block(header);
        let iv = self.b.block_params(header)[0];
        let next = self.b.ins().iadd_imm_s(iv, step);
        let more = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, next, end);
        self.b.ins().brif(more, body_block, &[], exit, &[BlockArg::Value(iv)]);
        self.b.switch_to_block(body_block);
        self.b.seal_block(body_block);
        body(self, iv)?;
        self.b.ins().jump(header, &[BlockArg::Value(next)]);
        self.b.seal_block(header);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        Ok(self.b.block_params(exit)[0])
    }

    /// `body(block start, block end)` over the blocks of `size` of `[start, end)`, the last
    /// one shorter.
    fn blocks(
        &mut self,
        (start, end): (Value, Value),
        size: i64,
        body: &mut dyn FnMut(&mut Self, Value, Value) -> R<()>,
    ) -> R<()> {
        // Every block that starts before `end`.
        let last = self.b.ins().iadd_imm_s(end, size - 1);
        self.for_loop(start, last, size, &mut |cx, first| {
            let full = cx.b.ins().iadd_imm_s(first, size);
            let block_end = cx.b.ins().smin(full, end);
            body(cx, first, block_end)
        })?;
        Ok(())
    }

    /// The bounds of the loop over output dimension `d` of size `n`: the split range for
    /// dimension 0 of a split kernel, else `[0, n)`.
    pub fn loop_bounds(&mut self, d: usize, n: &SymExpr) -> (Value, Value) {
        match self.split {
            Some(range) if d == 0 => range,
            _ => (self.b.ins().iconst(types::I64, 0), self.sym(n)),
        }
    }

    /// Nested loops over the output dimensions `ranges[..n]`, calling `body` with the loop
    /// variables.
    fn nest(
        &mut self,
        ranges: &[SymExpr],
        vars: &mut Vec<Value>,
        body: &mut dyn FnMut(&mut Self, &[Value]) -> R<()>,
    ) -> R<()> {
        if vars.len() == ranges.len() {
            return body(self, vars);
        }
        let (start, end) = self.loop_bounds(vars.len(), &ranges[vars.len()]);
        self.for_loop(start, end, 1, &mut |cx, iv| {
            vars.push(iv);
            let r = cx.nest(ranges, vars, body);
            vars.pop();
            r
        })?;
        Ok(())
    }

    /// The contiguous (row-major) element offset of `vars` within `ranges`.
    fn linear(&mut self, ranges: &[SymExpr], vars: &[Value]) -> Value {
        let mut acc = self.b.ins().iconst(types::I64, 0);
        for (d, v) in vars.iter().enumerate() {
            let n = self.sym(&ranges[d]);
            let scaled = self.b.ins().imul(acc, n);
            acc = self.b.ins().iadd(scaled, *v);
        }
        acc
    }

    pub fn elem_addr(&mut self, buf: BufId, index: Value) -> Value {
        let size = self.program.buffers[buf].dtype.size() as i64;
        let off = self.b.ins().imul_imm_s(index, size);
        let base = self.base(buf);
        self.b.ins().iadd(base, off)
    }

    /// Element `index` of `buf` (with `Lanes::X4`, the four from `index` on, as f32x4),
    /// in its register type: 16-bit floats are widened to f32.
    pub fn load_elems(&mut self, buf: BufId, index: Value, lanes: Lanes) -> R<Value> {
        let dtype = self.program.buffers[buf].dtype;
        let addr = self.elem_addr(buf, index);
        let ins = self.b.ins();
        Ok(match (lanes, half::is_half(dtype)) {
            (Lanes::Scalar, false) => ins.load(clif_type(dtype)?, flags(), addr, 0),
            (Lanes::X4(_), false) => ins.load(types::F32X4, flags(), addr, 0),
            (Lanes::Scalar, true) => {
                let bits = ins.load(types::I16, flags(), addr, 0);
                half::widen(self, bits, dtype, lanes)
            }
            (Lanes::X4(_), true) => {
                let bits = ins.uload16x4(flags(), addr, 0);
                half::widen(self, bits, dtype, lanes)
            }
        })
    }

    /// Stores `v` (in the register type of `buf`'s dtype) as element `index` of `buf`
    /// (with `Lanes::X4`, as the four from `index` on); 16-bit floats are rounded.
    pub fn store_elems(&mut self, buf: BufId, index: Value, v: Value, lanes: Lanes) {
        let dtype = self.program.buffers[buf].dtype;
        let addr = self.elem_addr(buf, index);
        let v = match (lanes, half::is_half(dtype)) {
            (_, false) => v,
            (Lanes::Scalar, true) => half::narrow(self, v, dtype, lanes),
            (Lanes::X4(_), true) => {
                // Four 16-bit results in the low 64 bits of an i16x8.
                let bits = half::narrow(self, v, dtype, lanes);
                let packed = self.b.ins().unarrow(bits, bits);
                let packed =
                    self.b.ins().bitcast(types::I64X2, MemFlagsData::new().with_endianness(Endianness::Little), packed);
                self.b.ins().extractlane(packed, 0)
            }
        };
        self.b.ins().store(flags(), v, addr, 0);
    }
}

pub fn emit_kernel(
    module: &mut ObjectModule,
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
    program: &Program,
    plan: &Plan,
    k: &Kernel,
) -> R<()> {
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let params = b.block_params(entry).to_vec();
    let (slots, dims_ptr) = (params[0], params[1]);
    let split = k.split().map(|_| (params[2], params[3]));
    let (bufs, syms) = k.inputs();
    let mut bases = HashMap::new();
    for buf in bufs {
        let v = b.ins().load(types::I64, flags(), slots, (plan.slot(buf) * 8) as i32);
        bases.insert(buf, v);
    }
    let mut dims = HashMap::new();
    for s in syms {
        let idx = *plan.dim_index.get(&s).ok_or_else(|| format!("size {s} is missing from the dims table"))?;
        let v = b.ins().load(types::I64, flags(), dims_ptr, (idx * 8) as i32);
        dims.insert(s, v);
    }
    let mut cx = Cx { b, module, program, bases, dims, libm: HashMap::new(), split };
    match k {
        Kernel::Pointwise { out, ranges, body } => pointwise(&mut cx, *out, ranges, body)?,
        Kernel::Reduction { out, ranges, reduce, op, body } => reduction(&mut cx, *out, ranges, reduce, *op, body)?,
        Kernel::Matmul(m) => matmul::emit(&mut cx, m)?,
        Kernel::Extern(call) => extern_call::emit(&mut cx, call)?,
    }
    cx.b.ins().return_(&[]);
    cx.b.finalize(cx.module.target_config());
    Ok(())
}

fn pointwise(cx: &mut Cx, out: BufId, ranges: &[SymExpr], body: &E) -> R<()> {
    let dtype = cx.program.buffers[out].dtype;
    let rank = ranges.len();
    let store = |cx: &mut Cx, vars: &[Value], lanes: Lanes| -> R<()> {
        let v = expr::emit(cx, body, vars, lanes)?;
        let at = cx.linear(ranges, vars);
        cx.store_elems(out, at, v, lanes);
        Ok(())
    };
    if rank == 0 {
        return store(cx, &[], Lanes::Scalar);
    }
    let vector = half::in_f32(dtype) && expr::vectorizable(body, rank - 1, true);
    // Columns `[start, end)` of the row `outer` (every variable but the last).
    let row = |cx: &mut Cx, outer: &[Value], start: Value, end: Value| -> R<()> {
        let mut vars = outer.to_vec();
        let rest = if vector {
            cx.for_loop(start, end, 4, &mut |cx, iv| {
                vars.push(iv);
                let r = store(cx, &vars, Lanes::X4(rank - 1));
                vars.pop();
                r
            })?
        } else {
            start
        };
        cx.for_loop(rest, end, 1, &mut |cx, iv| {
            vars.push(iv);
            let r = store(cx, &vars, Lanes::Scalar);
            vars.pop();
            r
        })?;
        Ok(())
    };
    if rank >= 2 && expr::reads_transposed(body, rank - 2, rank - 1) {
        // The last two loops in tiles of TILE x TILE: the lines a tile reads down its
        // columns serve all its rows (row by row, on planes of thousands of rows, each
        // line is gone before the next row comes back to it).
        return cx.nest(&ranges[..rank - 2], &mut vec![], &mut |cx, outer| {
            let (rows, cols) =
                (cx.loop_bounds(rank - 2, &ranges[rank - 2]), cx.loop_bounds(rank - 1, &ranges[rank - 1]));
            cx.blocks(rows, TILE, &mut |cx, first_row, end_row| {
                cx.blocks(cols, TILE, &mut |cx, start, end| {
                    cx.for_loop(first_row, end_row, 1, &mut |cx, r| row(cx, &[outer, &[r]].concat(), start, end))?;
                    Ok(())
                })
            })
        });
    }
    cx.nest(&ranges[..rank - 1], &mut vec![], &mut |cx, outer| {
        let (start, end) = cx.loop_bounds(rank - 1, &ranges[rank - 1]);
        row(cx, outer, start, end)
    })
}

/// Rows and columns of a transposing pointwise kernel's tiles: 16 float32s fill a cache
/// line.
const TILE: i64 = 16;

/// The identity of a reduction, as a constant of type `ty`.
fn init_value(cx: &mut Cx, op: ReduceOp, dtype: DType, ty: Type) -> Value {
    let float =
        |cx: &mut Cx, v: f64| if ty == types::F32 { cx.b.ins().f32const(v as f32) } else { cx.b.ins().f64const(v) };
    let (lo, hi) = dtype.int_range();
    match (op, ty.is_float()) {
        (ReduceOp::Sum, true) => float(cx, 0.0),
        (ReduceOp::Prod, true) => float(cx, 1.0),
        (ReduceOp::Max | ReduceOp::ArgMax, true) => float(cx, f64::NEG_INFINITY),
        (ReduceOp::Min | ReduceOp::ArgMin, true) => float(cx, f64::INFINITY),
        (ReduceOp::Sum, false) => cx.b.ins().iconst(ty, 0),
        (ReduceOp::Prod, false) => cx.b.ins().iconst(ty, 1),
        (ReduceOp::Max | ReduceOp::ArgMax, false) => cx.b.ins().iconst(ty, lo),
        (ReduceOp::Min | ReduceOp::ArgMin, false) => cx.b.ins().iconst(ty, hi),
    }
}

/// `acc op x` for Sum/Prod/Max/Min, scalar or vector.
fn combine(cx: &mut Cx, op: ReduceOp, dtype: DType, acc: Value, x: Value) -> Value {
    let float = dtype.is_float();
    let unsigned = matches!(dtype, DType::U8 | DType::Bool);
    let ins = cx.b.ins();
    match (op, float) {
        (ReduceOp::Sum, true) => ins.fadd(acc, x),
        (ReduceOp::Sum, false) => ins.iadd(acc, x),
        (ReduceOp::Prod, true) => ins.fmul(acc, x),
        (ReduceOp::Prod, false) => ins.imul(acc, x),
        (ReduceOp::Max, true) => ins.fmax(acc, x),
        (ReduceOp::Min, true) => ins.fmin(acc, x),
        (ReduceOp::Max, false) => {
            if unsigned {
                ins.umax(acc, x)
            } else {
                ins.smax(acc, x)
            }
        }
        (ReduceOp::Min, false) => {
            if unsigned {
                ins.umin(acc, x)
            } else {
                ins.smin(acc, x)
            }
        }
        (ReduceOp::ArgMax | ReduceOp::ArgMin, _) => unreachable!("arg reductions track an index"),
    }
}

/// Vectors a vectorized reduction's unrolled loop combines per step, each into its own
/// accumulator.
const UNROLL: usize = 4;

fn reduction(cx: &mut Cx, out: BufId, ranges: &[SymExpr], reduce: &[SymExpr], op: ReduceOp, body: &E) -> R<()> {
    let is_arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let dtype = body.dtype;
    let ty = clif_type(dtype)?;
    let n_out = ranges.len();
    let last = n_out + reduce.len() - 1;
    let vector = !is_arg && half::in_f32(dtype) && !reduce.is_empty() && expr::vectorizable(body, last, false);
    cx.nest(ranges, &mut vec![], &mut |cx, outer| {
        let acc = cx.b.declare_var(ty);
        let init = init_value(cx, op, dtype, ty);
        cx.b.def_var(acc, init);
        let best = cx.b.declare_var(types::I64);
        let zero = cx.b.ins().iconst(types::I64, 0);
        cx.b.def_var(best, zero);
        // Vector accumulators: one per vector of an unrolled step, so that the step's
        // combines do not wait on each other (a float add's latency is several cycles).
        let vaccs: [_; UNROLL] = std::array::from_fn(|_| cx.b.declare_var(types::F32X4));
        if vector {
            let splat = cx.b.ins().splat(types::F32X4, init);
            vaccs.iter().for_each(|&v| cx.b.def_var(v, splat));
        }
        let mut vars = outer.to_vec();
        let mut inner = |cx: &mut Cx, vars: &mut Vec<Value>| -> R<()> {
            let zero = cx.b.ins().iconst(types::I64, 0);
            let end = cx.sym(&reduce[reduce.len() - 1]);
            let rest = if vector {
                let mut step = |cx: &mut Cx, iv: Value, vectors: usize| -> R<()> {
                    for (i, &vacc) in vaccs.iter().enumerate().take(vectors) {
                        let at = cx.b.ins().iadd_imm_s(iv, 4 * i as i64);
                        vars.push(at);
                        let x = expr::emit(cx, body, vars, Lanes::X4(last))?;
                        vars.pop();
                        let a = cx.b.use_var(vacc);
                        let c = combine(cx, op, dtype, a, x);
                        cx.b.def_var(vacc, c);
                    }
                    Ok(())
                };
                let rest = cx.for_loop(zero, end, 4 * UNROLL as i64, &mut |cx, iv| step(cx, iv, UNROLL))?;
                cx.for_loop(rest, end, 4, &mut |cx, iv| step(cx, iv, 1))?
            } else {
                zero
            };
            cx.for_loop(rest, end, 1, &mut |cx, iv| {
                vars.push(iv);
                let x = expr::emit(cx, body, vars, Lanes::Scalar)?;
                let flat = cx.linear(reduce, &vars[n_out..]);
                vars.pop();
                let a = cx.b.use_var(acc);
                if is_arg {
                    let take = arg_better(cx, op, dtype, x, a);
                    let nv = cx.b.ins().select(take, x, a);
                    cx.b.def_var(acc, nv);
                    let bi = cx.b.use_var(best);
                    let ni = cx.b.ins().select(take, flat, bi);
                    cx.b.def_var(best, ni);
                } else {
                    let c = combine(cx, op, dtype, a, x);
                    cx.b.def_var(acc, c);
                }
                Ok(())
            })?;
            Ok(())
        };
        reduce_nest(cx, reduce, n_out, &mut vars, &mut inner)?;
        let mut result = cx.b.use_var(acc);
        if vector {
            let mut v = cx.b.use_var(vaccs[0]);
            for &vacc in &vaccs[1..] {
                let w = cx.b.use_var(vacc);
                v = combine(cx, op, dtype, v, w);
            }
            for lane in 0..4u8 {
                let x = cx.b.ins().extractlane(v, lane);
                result = combine(cx, op, dtype, result, x);
            }
        }
        if is_arg {
            result = cx.b.use_var(best);
        }
        let at = cx.linear(ranges, outer);
        cx.store_elems(out, at, result, Lanes::Scalar);
        Ok(())
    })
}

/// Loops over every reduction variable but the last, then runs `inner`.
fn reduce_nest(
    cx: &mut Cx,
    reduce: &[SymExpr],
    n_out: usize,
    vars: &mut Vec<Value>,
    inner: &mut dyn FnMut(&mut Cx, &mut Vec<Value>) -> R<()>,
) -> R<()> {
    if vars.len() == n_out + reduce.len() - 1 {
        return inner(cx, vars);
    }
    let zero = cx.b.ins().iconst(types::I64, 0);
    let end = cx.sym(&reduce[vars.len() - n_out]);
    cx.for_loop(zero, end, 1, &mut |cx, iv| {
        vars.push(iv);
        let r = reduce_nest(cx, reduce, n_out, vars, inner);
        vars.pop();
        r
    })?;
    Ok(())
}

/// For argmax/argmin: is `x` strictly better than `best`? NaN beats everything, as in torch.
fn arg_better(cx: &mut Cx, op: ReduceOp, dtype: DType, x: Value, best: Value) -> Value {
    if dtype.is_float() {
        let cc = if op == ReduceOp::ArgMax { FloatCC::GreaterThan } else { FloatCC::LessThan };
        let better = cx.b.ins().fcmp(cc, x, best);
        let x_nan = cx.b.ins().fcmp(FloatCC::Unordered, x, x);
        let best_nan = cx.b.ins().fcmp(FloatCC::Unordered, best, best);
        let not_best_nan = cx.b.ins().bxor_imm_s(best_nan, 1);
        let nan_wins = cx.b.ins().band(x_nan, not_best_nan);
        cx.b.ins().bor(better, nan_wins)
    } else {
        let unsigned = matches!(dtype, DType::U8 | DType::Bool);
        let cc = match (op == ReduceOp::ArgMax, unsigned) {
            (true, false) => IntCC::SignedGreaterThan,
            (true, true) => IntCC::UnsignedGreaterThan,
            (false, false) => IntCC::SignedLessThan,
            (false, true) => IntCC::UnsignedLessThan,
        };
        cx.b.ins().icmp(cc, x, best)
    }
}
