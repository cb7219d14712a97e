//! The CPU backend: Cranelift, host ISA, position-independent code.
//!
//! ```text
//!  Program + Plan ──► one Cranelift function per kernel (kernel.rs, expr.rs, math.rs, matmul.rs,
//!                     extern_call.rs; half.rs: float16/bfloat16, stored in 16 bits, computed
//!                     in f32; vmath.rs: exp, log, tanh, erf... on f32x4 lanes; lanes.rs:
//!                     bit-level operations on one value or four lanes, for those two)
//!                 ──► __aotc_graph_run(slots, dims, stage, profile): calls one stage's kernels
//!                     in order (large ones split across threads by __aotc_parallel), and
//!                     __aotc_profile_mark after each when profile is not null
//!                 ──► data: __aotc_manifest(+_len), __aotc_weights (64-byte aligned) when
//!                     it is one byte (the weights live in a file, or there are none)
//!                 ──► ObjectModule::finish() ──► .o bytes for the linker
//! ```

mod expr;
mod extern_call;
pub(crate) mod half;
mod kernel;
mod lane_ints;
mod lanes;
mod math;
mod matmul;
#[cfg(test)]
mod test_kernel;
mod vmath;

use crate::error::{Error, Result};
use crate::ir::Program;
use crate::passes::plan::{Plan, WEIGHT_ALIGN};
use aotc_abi::internal_symbols as sym;
use aotc_abi::sym::SymExpr;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, JumpTableData, Signature, UserFuncName, Value};
use cranelift_codegen::isa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{DataDescription, FuncId, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};
use std::str::FromStr;

fn cg<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::Codegen(format!("{what}: {e}"))
}

/// The x86-64 ISA with `cpu`'s features and the settings the `.so` needs (see
/// ../shared/notes/cranelift.md).
pub fn target_isa(cpu: &aotc_abi::cpu::CpuTarget) -> Result<isa::OwnedTargetIsa> {
    let mut flags = settings::builder();
    for (k, v) in
        [("is_pic", "true"), ("opt_level", "speed"), ("probestack_strategy", "inline"), ("unwind_info", "false")]
    {
        flags.set(k, v).map_err(cg(k))?;
    }
    flags
        .set("enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })
        .map_err(cg("enable_verifier"))?;
    let triple = target_lexicon::Triple::from_str("x86_64-unknown-linux-gnu").map_err(cg("target triple"))?;
    let mut builder = isa::lookup(triple).map_err(cg("x86-64 ISA"))?;
    for feature in &cpu.features {
        let (_, setting) = aotc_abi::cpu::FEATURES
            .iter()
            .find(|(f, _)| f == feature)
            .ok_or_else(|| Error::Codegen(format!("CPU target {}: unknown feature {feature}", cpu.name)))?;
        builder.enable(setting).map_err(cg(setting))?;
    }
    builder.finish(settings::Flags::new(flags)).map_err(cg("ISA"))
}

/// `void kernel(void **slots, const int64_t *dims, int64_t begin, int64_t end)`: a kernel
/// over `[begin, end)` of the loop [`crate::ir::Kernel::split`] names (the whole kernel otherwise).
fn kernel_signature(module: &ObjectModule) -> Signature {
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.extend([AbiParam::new(ptr), AbiParam::new(ptr), AbiParam::new(types::I64), AbiParam::new(types::I64)]);
    sig
}

/// A size for the driver: a constant, or its entry of the dims table.
fn dim_value(b: &mut FunctionBuilder, plan: &Plan, dims: Value, e: &SymExpr) -> Result<Value> {
    if let Some(v) = e.as_int() {
        return Ok(b.ins().iconst(types::I64, v));
    }
    let i = plan.dim_index.get(e).ok_or_else(|| Error::Codegen(format!("size {e} is missing from the dims table")))?;
    Ok(b.ins().load(types::I64, kernel::flags(), dims, (*i * 8) as i32))
}

fn define_data(module: &mut ObjectModule, name: &str, bytes: Vec<u8>, align: u64) -> Result<()> {
    let id = module.declare_data(name, Linkage::Export, false, false).map_err(cg(name))?;
    let mut desc = DataDescription::new();
    desc.define(bytes.into_boxed_slice());
    desc.set_align(align);
    module.define_data(id, &desc).map_err(cg(name))
}

/// Compiles the program into an object file.
pub fn emit_object(program: &Program, plan: &Plan) -> Result<Vec<u8>> {
    let isa = target_isa(&plan.manifest.cpu)?;
    let builder =
        ObjectBuilder::new(isa, "aotc_model", cranelift_module::default_libcall_names()).map_err(cg("object"))?;
    let mut module = ObjectModule::new(builder);
    let mut fctx = FunctionBuilderContext::new();
    let mut ctx = module.make_context();
    let sig = kernel_signature(&module);

    let mut kernel_ids: Vec<FuncId> = Vec::with_capacity(program.kernels.len());
    for (i, k) in program.kernels.iter().enumerate() {
        let name = format!("__aotc_kernel_{i}");
        let id = module.declare_function(&name, Linkage::Local, &sig).map_err(cg(&name))?;
        ctx.func.signature = sig.clone();
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        let what = k.kind();
        kernel::emit_kernel(&mut module, &mut ctx.func, &mut fctx, program, plan, k).map_err(|e| {
            Error::Codegen(format!("kernel {i} ({what} writing {}): {e}", program.buffers[k.out()].name))
        })?;
        module.define_function(id, &mut ctx).map_err(|e| Error::Codegen(format!("kernel {i} ({what}): {e:?}")))?;
        module.clear_context(&mut ctx);
        kernel_ids.push(id);
    }

    // The driver: `void run(slots, dims, stage, profile)` runs the kernels of one stage in
    // order, each large one through the support library's `__aotc_parallel`; with a
    // profile, it marks the end of each (a test and a branch per kernel when not).
    let ptr = module.target_config().pointer_type();
    let mut parallel_sig = module.make_signature();
    parallel_sig.params.extend([
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(ptr),
        AbiParam::new(types::I64),
        AbiParam::new(types::I64),
    ]);
    let parallel = module.declare_function(sym::PARALLEL, Linkage::Import, &parallel_sig).map_err(cg("parallel"))?;
    let mut mark_sig = module.make_signature();
    mark_sig.params.extend([AbiParam::new(ptr), AbiParam::new(types::I64)]);
    let mark = module.declare_function(sym::PROFILE_MARK, Linkage::Import, &mark_sig).map_err(cg("profile mark"))?;
    let mut driver_sig = module.make_signature();
    driver_sig.params.extend([AbiParam::new(ptr), AbiParam::new(ptr), AbiParam::new(types::I64), AbiParam::new(ptr)]);
    let driver = module.declare_function(sym::GRAPH_RUN, Linkage::Export, &driver_sig).map_err(cg("driver"))?;
    ctx.func.signature = driver_sig;
    ctx.func.name = UserFuncName::user(0, driver.as_u32());
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let params = b.block_params(entry).to_vec();
        let (slots, dims, stage, profile) = (params[0], params[1], params[2], params[3]);
        let done = b.create_block();
        let stage_blocks: Vec<_> = plan.stage_ends.iter().map(|_| b.create_block()).collect();
        let table: Vec<_> = stage_blocks.iter().map(|&blk| b.func.dfg.block_call(blk, &[])).collect();
        let default = b.func.dfg.block_call(done, &[]);
        let jt = b.create_jump_table(JumpTableData::new(default, &table));
        let stage32 = b.ins().ireduce(types::I32, stage);
        b.ins().br_table(stage32, jt);
        b.seal_block(entry);
        let parallel = module.declare_func_in_func(parallel, b.func);
        let mark = module.declare_func_in_func(mark, b.func);
        let mut start = 0;
        for (&blk, &end) in stage_blocks.iter().zip(&plan.stage_ends) {
            b.switch_to_block(blk);
            b.seal_block(blk);
            for (i, (id, k)) in kernel_ids.iter().zip(&program.kernels).enumerate().take(end).skip(start) {
                let f = module.declare_func_in_func(*id, b.func);
                let (extent, work) = k.split().unwrap_or((SymExpr::Int(0), SymExpr::Int(0)));
                let small =
                    SymExpr::mul([extent.clone(), work.clone()]).as_int().is_some_and(|w| w < sym::MIN_PARALLEL_WORK);
                let n = dim_value(&mut b, plan, dims, &extent)?;
                if small {
                    let zero = b.ins().iconst(types::I64, 0);
                    b.ins().call(f, &[slots, dims, zero, n]);
                } else {
                    let w = dim_value(&mut b, plan, dims, &work)?;
                    let addr = b.ins().func_addr(ptr, f);
                    b.ins().call(parallel, &[addr, slots, dims, n, w]);
                }
                let (marked, next) = (b.create_block(), b.create_block());
                b.ins().brif(profile, marked, &[], next, &[]);
                b.switch_to_block(marked);
                b.seal_block(marked);
                let index = b.ins().iconst(types::I64, i as i64);
                b.ins().call(mark, &[profile, index]);
                b.ins().jump(next, &[]);
                b.switch_to_block(next);
                b.seal_block(next);
            }
            b.ins().jump(done, &[]);
            start = end;
        }
        b.switch_to_block(done);
        b.seal_block(done);
        b.ins().return_(&[]);
        b.finalize(module.target_config());
    }
    module.define_function(driver, &mut ctx).map_err(|e| Error::Codegen(format!("driver: {e:?}")))?;
    module.clear_context(&mut ctx);

    let manifest = serde_json::to_vec(&plan.manifest).map_err(cg("manifest"))?;
    let len = (manifest.len() as u64).to_le_bytes().to_vec();
    define_data(&mut module, sym::MANIFEST, manifest, 8)?;
    define_data(&mut module, sym::MANIFEST_LEN, len, 8)?;
    // Embedded weights come in an object of their own, written straight from their
    // sources (`crate::weights_out::write_object`). External weights live in a file beside
    // the library: the symbol stays, one byte long, so that the support library links the
    // same way.
    if !crate::weights_out::has_object(plan) {
        define_data(&mut module, sym::WEIGHTS, vec![0], WEIGHT_ALIGN as u64)?;
    }
    module.finish().emit().map_err(cg("object emission"))
}
