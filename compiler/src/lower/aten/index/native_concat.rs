//! The fast path of torch.cat: when every part already sits in a buffer as equally spaced
//! contiguous blocks (a whole buffer, or a view such as a channel slice of it), one call of
//! the support library's byte copy (`aotc_abi::concat`) writes the result, a `memcpy` per
//! block and part, instead of a kernel that picks the part of each element. Lazy parts keep the general lowering, which fuses their computation into the
//! reads of the concatenation's consumers; so do mixed dtypes, complex values, and every
//! concatenation when lowering for CUDA.

use crate::ir::{BufKind, ExternArg, ExternCall, Kernel};
use crate::lower::tensor::{contiguous_strides, same_size as same, Repr, TensorValue};
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
    if !lw.native_calls() || parts.is_empty() || parts.iter().any(|t| t.dtype != dtype || t.complex) {
        return None;
    }
    let views = parts.iter().map(|t| blocks(t, dim)).collect::<Option<Vec<_>>>()?;
    let element = SymExpr::Int(dtype.size() as i64);
    let bytes = |e: &SymExpr| SymExpr::mul([e.clone(), element.clone()]);
    let block = |t: &TensorValue| bytes(&SymExpr::product(&t.sizes[dim..]));
    let geometry = std::iter::once(SymExpr::product(&sizes[..dim]))
        .chain(parts.iter().map(block))
        .chain(views.iter().map(|(_, offset, _)| bytes(offset)))
        .chain(views.iter().map(|(_, _, stride)| bytes(stride)))
        .collect();
    let bufs = views.iter().map(|(buf, _, _)| *buf).collect();
    let out = lw.prog.add_buffer(name, dtype, sizes.to_vec(), BufKind::Scratch);
    let args = vec![ExternArg::Bufs(bufs), ExternArg::Sizes(geometry)];
    lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall { name: SYMBOL, out, args, flops: SymExpr::Int(0) })));
    Some(TensorValue::view_of(out, dtype, sizes.to_vec()))
}

/// Where `t`'s blocks (its elements from `dim` on, for each index before it) lie: its
/// buffer, the first block's offset and the step between blocks, in elements; None unless
/// each block is contiguous and the blocks equally spaced (the dimensions before `dim`
/// walk as one), or `t` is lazy.
fn blocks(t: &TensorValue, dim: usize) -> Option<(crate::ir::BufId, SymExpr, SymExpr)> {
    let Repr::View(r) = &t.repr else { return None };
    let dense = contiguous_strides(&t.sizes);
    let long: Vec<usize> = (0..t.sizes.len()).filter(|&d| t.sizes[d] != SymExpr::Int(1)).collect();
    let (outer, inner) = long.split_at(long.partition_point(|&d| d < dim));
    let contiguous = inner.iter().all(|&d| same(&r.strides[d], &dense[d]));
    let one_walk = outer
        .windows(2)
        .all(|w| same(&r.strides[w[0]], &SymExpr::mul([r.strides[w[1]].clone(), t.sizes[w[1]].clone()])));
    let step = outer.last().map_or_else(|| SymExpr::product(&t.sizes[dim..]), |&d| r.strides[d].clone());
    (contiguous && one_walk).then(|| (r.buf, r.offset.clone(), step))
}
