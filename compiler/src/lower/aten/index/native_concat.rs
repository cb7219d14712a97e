//! The fast path of torch.cat: when every part already sits contiguously at the start of
//! a buffer, one call of the support library's byte copy (`aotc_abi::concat`) writes the
//! result, a `memcpy` per block and part, instead of a kernel that picks the part of each
//! element. Lazy parts keep the general lowering, which fuses their computation into the
//! reads of the concatenation's consumers; so do mixed dtypes, complex values, and every
//! concatenation when lowering for CUDA.

use crate::ir::{BufKind, ExternArg, ExternCall, Kernel};
use crate::lower::tensor::{contiguous_strides, Repr, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::concat::SYMBOL;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// `parts` concatenated along `dim` into a new buffer of `sizes`, or None when the copy
/// does not apply. The caller has checked the parts against each other.
pub fn concat(
    lw: &mut Lowerer,
    parts: &[TensorValue],
    dim: usize,
    dtype: DType,
    sizes: &[SymExpr],
    name: &str,
) -> Option<TensorValue> {
    let whole_buffer = |t: &TensorValue| match &t.repr {
        Repr::View(r) => (r.offset == SymExpr::Int(0) && r.strides == contiguous_strides(&t.sizes)).then_some(r.buf),
        Repr::Lazy(..) => None,
    };
    if !lw.native_calls() || parts.is_empty() || parts.iter().any(|t| t.dtype != dtype || t.complex) {
        return None;
    }
    let bufs = parts.iter().map(whole_buffer).collect::<Option<Vec<_>>>()?;
    let element = SymExpr::Int(dtype.size() as i64);
    let block = |t: &TensorValue| SymExpr::mul([SymExpr::product(&t.sizes[dim..]), element.clone()]);
    let geometry = std::iter::once(SymExpr::product(&sizes[..dim])).chain(parts.iter().map(block)).collect();
    let out = lw.prog.add_buffer(name, dtype, sizes.to_vec(), BufKind::Scratch);
    let args = vec![ExternArg::Bufs(bufs), ExternArg::Sizes(geometry)];
    lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall { name: SYMBOL, out, args, flops: SymExpr::Int(0) })));
    Some(TensorValue::view_of(out, dtype, sizes.to_vec()))
}
