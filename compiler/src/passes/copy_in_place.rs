//! Copies of a contiguous run of a buffer, read where the run lies.
//!
//! A pointwise kernel that only copies elements `c..c + n` of a buffer into a new one,
//! in order, goes: the new buffer is placed over that run ([`Placement`]), so its readers
//! read the source. Such copies make a batch-1 channel slice contiguous for a support
//! library call, which takes a base pointer (ShuffleNet's split halves, each the input of a
//! convolution).
//!
//! Why this is sound: the source is written by one kernel, before the copy read it, and
//! the copy's result by the copy alone; with the copy gone, no kernel writes those bytes
//! again. The source's memory lives as long as anything placed in it (`passes::arena`).
//! Programs with loops or computed sizes are left alone, as in `concat_in_place`.

use super::concat_in_place::{holds_others, own_scratch, remove_into_writer};
use crate::ir::{ExprKind, Kernel, Placement, Program};
use crate::lower::Lowered;
use aotc_abi::sym::SymExpr;

pub fn place_contiguous_copies(lowered: &mut Lowered) {
    let keep = lowered.caller_visible();
    let prog = &mut lowered.program;
    if !prog.loops.is_empty() || !prog.data_symbols.is_empty() {
        return;
    }
    let mut i = 0;
    while i < prog.kernels.len() {
        let Some((out, src, first)) = contiguous_copy(prog, i) else {
            i += 1;
            continue;
        };
        let elem = prog.buffers[src].dtype.size() as u64;
        let fits = matches!((prog.buffers[out].static_bytes(), prog.buffers[src].static_bytes()), (Some(n), Some(total)) if first * elem + n <= total);
        let movable = own_scratch(prog, out, &keep) && !prog.placements.contains_key(&out) && !holds_others(prog, out);
        if !fits || !movable || !own_scratch(prog, src, &keep) {
            i += 1;
            continue;
        }
        let at = prog.placements.get(&src).copied().unwrap_or(Placement { within: src, offset: 0 });
        prog.placements.insert(out, Placement { within: at.within, offset: at.offset + first * elem });
        // The kernel that wrote the source now also makes the copy's value.
        remove_into_writer(prog, i, src);
    }
}

/// Kernel `i` as `out[j] = src[first + j]` over all of `out`, in the same dtype: `out`,
/// `src` and `first`.
fn contiguous_copy(prog: &Program, i: usize) -> Option<(crate::ir::BufId, crate::ir::BufId, u64)> {
    let Kernel::Pointwise { out, ranges, body } = &prog.kernels[i] else { return None };
    let ExprKind::Load { buf: src, index } = &body.kind else { return None };
    let sizes = ranges.iter().map(SymExpr::as_int).collect::<Option<Vec<i64>>>()?;
    let same_type = body.dtype == prog.buffers[*out].dtype && body.dtype == prog.buffers[*src].dtype;
    // Each loop steps the source as a contiguous array of `ranges` (a unit loop any way).
    let mut step = 1i64;
    let mut contiguous = true;
    for (v, &size) in sizes.iter().enumerate().rev() {
        let coef = index.terms.iter().find(|(w, _)| *w == v).map_or(Some(0), |(_, c)| c.as_int());
        contiguous &= size == 1 || coef == Some(step);
        step = step.checked_mul(size)?;
    }
    let first = u64::try_from(index.offset.as_int()?).ok()?;
    let whole = prog.buffers[*out].static_bytes() == Some(step as u64 * prog.buffers[*out].dtype.size() as u64);
    (same_type && contiguous && whole && src != out).then_some((*out, *src, first))
}
