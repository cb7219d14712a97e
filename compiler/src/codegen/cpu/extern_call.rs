//! Extern kernels: one call into the support library, `name(out, args...)`; a list
//! (`Sizes`, `Bufs`) passes as a pointer to its elements on the stack and their count.

use super::kernel::{Cx, R};
use crate::ir::{ExternArg, ExternCall};
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, StackSlotData, StackSlotKind};
use cranelift_module::{Linkage, Module};

pub fn emit(cx: &mut Cx, call: &ExternCall) -> R<()> {
    let ptr = AbiParam::new(cx.module.target_config().pointer_type());
    let i64_ = AbiParam::new(types::I64);
    let mut sig = cx.module.make_signature();
    let mut args = vec![cx.base(call.out)];
    sig.params.push(ptr);
    for arg in &call.args {
        match arg {
            ExternArg::Buf(b) | ExternArg::Workspace(b) => {
                sig.params.push(ptr);
                args.push(cx.base(*b));
            }
            ExternArg::Size(s) => {
                sig.params.push(i64_);
                args.push(cx.sym(s));
            }
            ExternArg::Bufs(bufs) => {
                // An array of base pointers on the stack (one dummy slot when empty).
                let bytes = ptr.value_type.bytes() * bufs.len().max(1) as u32;
                let slot = cx.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 3));
                for (i, b) in bufs.iter().enumerate() {
                    let v = cx.base(*b);
                    cx.b.ins().stack_store(ptr.value_type, v, slot, (ptr.value_type.bytes() as usize * i) as i32);
                }
                sig.params.extend([ptr, i64_]);
                let addr = cx.b.ins().stack_addr(ptr.value_type, slot, 0);
                let n = cx.b.ins().iconst(types::I64, bufs.len() as i64);
                args.extend([addr, n]);
            }
            ExternArg::Sizes(sizes) => {
                // An int64 array on the stack (one dummy slot when empty, for a valid address).
                let bytes = 8 * sizes.len().max(1) as u32;
                let slot = cx.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 3));
                for (i, s) in sizes.iter().enumerate() {
                    let v = cx.sym(s);
                    cx.b.ins().stack_store(ptr.value_type, v, slot, 8 * i as i32);
                }
                sig.params.extend([ptr, i64_]);
                let addr = cx.b.ins().stack_addr(ptr.value_type, slot, 0);
                let n = cx.b.ins().iconst(types::I64, sizes.len() as i64);
                args.extend([addr, n]);
            }
        }
    }
    let id = cx.module.declare_function(call.name, Linkage::Import, &sig).map_err(|e| e.to_string())?;
    let f = cx.module.declare_func_in_func(id, cx.b.func);
    cx.b.ins().call(f, &args);
    Ok(())
}
