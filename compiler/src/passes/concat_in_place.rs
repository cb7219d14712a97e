//! Concatenations written in place by their producers.
//!
//! A concatenation of whole buffers (`aotc_abi::concat`, one block per part) copies
//! every part into its output. When each part is scratch of its own, written by one
//! kernel and seen by no caller, the part is placed inside the output instead, at its byte
//! offset there ([`Placement`]): its producer then writes it in place and the copy goes.
//! SqueezeNet's fire modules concatenate two convolutions this way. DenseNet's blocks
//! concatenate the block's input and every feature map so far, again after each layer:
//! going from the last concatenation back, the parts of the last are placed in it, and
//! each earlier one, whose parts then lie in that buffer one after the other in its own
//! order, is placed over them in turn. Every concatenation of a block goes, and each
//! feature map is written once.
//!
//! Why this is sound: the bytes of a placed buffer belong to it alone. Each part is
//! written by one kernel (so nothing else writes its bytes) and a concatenation's output,
//! whose copy goes, by none (so its bytes are its parts'); regions overlap only where a
//! placed concatenation covers the parts it holds, with the same values. The output's
//! memory lives as long as any buffer placed in it (`passes::arena`).
//!
//! Programs with loops or computed sizes are left alone (a part would live across
//! stages), and so is every concatenation with anything else: a part that is a view
//! (a channel slice), a batch of several blocks per part, a part that is an output.

use crate::ir::{BufId, BufKind, ExternArg, Kernel, Placement, Program};
use crate::lower::Lowered;
use std::collections::HashSet;

pub fn place_concat_parts(lowered: &mut Lowered) {
    let keep = lowered.caller_visible();
    let prog = &mut lowered.program;
    if !prog.loops.is_empty() || !prog.data_symbols.is_empty() {
        return;
    }
    let mut i = prog.kernels.len();
    while i > 0 {
        i -= 1;
        let Some((out, parts)) = whole_part_concat(prog, i) else { continue };
        let free = |b: BufId, prog: &Program| {
            own_scratch(prog, b, &keep) && !prog.placements.contains_key(&b) && !holds_others(prog, b)
        };
        let distinct = parts.iter().map(|(b, _)| b).collect::<HashSet<_>>().len() == parts.len();
        let target = prog.placements.get(&out).copied().unwrap_or(Placement { within: out, offset: 0 });
        let placed = if !distinct || !own_scratch(prog, out, &keep) || holds_others(prog, out) {
            false
        } else if parts.iter().all(|&(b, _)| free(b, prog)) {
            // Into the output (or where the output itself lies).
            for &(b, at) in &parts {
                prog.placements.insert(b, Placement { within: target.within, offset: target.offset + at });
            }
            true
        } else if let Some(base) = consecutive(prog, &parts).filter(|_| free(out, prog)) {
            // Over its parts, which an enclosing concatenation already holds in order.
            prog.placements.insert(out, base);
            true
        } else {
            false
        };
        if placed {
            // The kernel that writes the last part now completes the concatenation.
            remove_into_writer(prog, i, parts[parts.len() - 1].0);
        }
    }
}

/// Kernel `i` as a concatenation of whole buffers of static size, one block each: its
/// output, and each part with its byte offset in the output.
fn whole_part_concat(prog: &Program, i: usize) -> Option<(BufId, Vec<(BufId, u64)>)> {
    let Kernel::Extern(call) = &prog.kernels[i] else { return None };
    let [ExternArg::Bufs(parts), ExternArg::Sizes(geometry)] = call.args.as_slice() else { return None };
    if call.name != aotc_abi::concat::SYMBOL || parts.is_empty() {
        return None;
    }
    // [outer, block bytes per part, first byte per part, step per part] (`native_concat`).
    let ints = geometry.iter().map(|s| s.as_int().and_then(|v| u64::try_from(v).ok())).collect::<Option<Vec<u64>>>()?;
    let n = parts.len();
    if ints.len() != 1 + 3 * n || ints[0] != 1 || ints[1 + n..1 + 2 * n].iter().any(|&first| first != 0) {
        return None;
    }
    let mut at = 0u64;
    let mut placed = Vec::with_capacity(n);
    for (&b, &block) in parts.iter().zip(&ints[1..1 + n]) {
        if prog.buffers[b].static_bytes() != Some(block) {
            return None;
        }
        placed.push((b, at));
        at = at.checked_add(block)?;
    }
    (prog.buffers[call.out].static_bytes() == Some(at)).then_some((call.out, placed))
}

/// Where `parts` lie when an enclosing placement already holds each of them at its
/// offset from one base: that base.
fn consecutive(prog: &Program, parts: &[(BufId, u64)]) -> Option<Placement> {
    let first = prog.placements.get(&parts[0].0)?;
    let base = Placement { within: first.within, offset: first.offset.checked_sub(parts[0].1)? };
    parts
        .iter()
        .all(|&(b, at)| prog.placements.get(&b) == Some(&Placement { within: base.within, offset: base.offset + at }))
        .then_some(base)
}

/// Scratch of static size that no caller sees, written by exactly one kernel (a kernel's
/// output, or the workspace of a call: such a call writes it too).
pub(super) fn own_scratch(prog: &Program, b: BufId, keep: &HashSet<BufId>) -> bool {
    let writes = |k: &Kernel| match k {
        Kernel::Extern(call) => {
            (call.out == b) as usize
                + call.args.iter().filter(|a| matches!(a, ExternArg::Workspace(w) if *w == b)).count()
        }
        k => (k.out() == b) as usize,
    };
    prog.buffers[b].kind == BufKind::Scratch
        && prog.buffers[b].static_bytes().is_some()
        && !keep.contains(&b)
        && prog.kernels.iter().map(writes).sum::<usize>() == 1
}

/// Whether some buffer is placed in `b`.
pub(super) fn holds_others(prog: &Program, b: BufId) -> bool {
    prog.placements.values().any(|p| p.within == b)
}

/// Removes kernel `i`, whose work a placement made unneeded, and gives its graph nodes to
/// the last kernel before it that writes `buf` (which now makes its value).
pub(super) fn remove_into_writer(prog: &mut Program, i: usize, buf: BufId) {
    let nodes = prog.remove_kernel(i);
    if let Some(writer) = (0..i).rev().find(|&k| prog.kernels[k].out() == buf) {
        super::epilogue::merge_nodes(prog, writer, nodes);
    }
}
