//! Which scratch slots share the instance's arena, over which kernels each is live, and
//! (when every size is static) where each lies in it.
//!
//! A slot is live from the first kernel that touches it to the last: kernels run one after
//! the other (a kernel split across threads finishes before the next starts), so two slots
//! whose lifetimes do not overlap may share memory. A slot whose value matters outside the
//! kernels keeps an allocation of its own: graph outputs (the caller reads them after the
//! call), new values of state and of mutated inputs (copied after the call), the index
//! error record (zeroed before the call, read after each stage) and the values of data
//! symbols (read between stages). So does a slot whose size is known only at a later stage
//! (data-dependent programs): the arena is laid out once, before the first stage.
//! A buffer placed in another (`passes::concat_in_place`) is no slot: it lies in that
//! one's memory, which stays live from the first kernel that touches either to the last.

use crate::error::{Error, Result};
use crate::ir::{BufId, BufKind, ExternArg, Kernel, Program};
use crate::lower::Lowered;
use aotc_abi::arena::{pack, Arena, ArenaSlot, Lifetime};
use aotc_abi::manifest::{stage_of, DataSymbol};
use cranelift_codegen::entity::{EntityRef, SecondaryMap};
use std::collections::HashSet;

pub fn plan_arena(l: &Lowered, data_symbols: &[DataSymbol]) -> Result<Arena> {
    let p = &l.program;
    let outlives_kernels: HashSet<BufId> = l
        .outputs
        .iter()
        .map(|(_, b)| *b)
        .chain(l.buffer_mutations.iter().chain(&l.input_mutations).map(|(b, _)| *b))
        .chain(p.index_errors)
        .chain(p.data_symbols.iter().map(|d| d.buf))
        .chain(p.loops.iter().map(|l| l.flag))
        .collect();
    let lifetimes = lifetimes(p);
    let mut slots = vec![];
    for (b, buf) in p.buffers.iter() {
        // A placed buffer lives in the memory of the one it is placed in, which lives as
        // long as anything placed in it.
        let members = || p.placements.iter().filter(move |(_, at)| at.within == b).map(|(&m, _)| m);
        let live = members()
            .chain([b])
            .filter_map(|m| lifetimes[m])
            .reduce(|a, l| Lifetime { first: a.first.min(l.first), last: a.last.max(l.last) });
        let (BufKind::Scratch, Some(live)) = (&buf.kind, live) else { continue };
        if outlives_kernels.contains(&b) || stage_of(data_symbols, &buf.bytes()) > 0 || p.placements.contains_key(&b) {
            continue;
        }
        // Memory shared with earlier slots holds their values: the first kernel must write
        // the slot (or a buffer placed in it), not read what an earlier call left there (or
        // use it as a workspace, whose contents mean nothing on entry).
        let k = &p.kernels[live.first];
        let workspace = matches!(k, Kernel::Extern(call) if call.args.iter().any(|a| matches!(a, ExternArg::Workspace(w) if *w == b)));
        let writes = k.out() == b || members().any(|m| m == k.out());
        if !workspace && (!writes || k.reads_out()) {
            return Err(internal(format!(
                "kernel {} reads {b} ({}) before any kernel writes it",
                live.first, buf.name
            )));
        }
        slots.push(ArenaSlot { slot: b.index(), live });
    }
    let sizes: Option<Vec<usize>> = slots
        .iter()
        .map(|s| p.buffers[BufId::new(s.slot)].bytes().as_int().and_then(|n| usize::try_from(n).ok()))
        .collect();
    let layout = match sizes {
        Some(sizes) => {
            let lifetimes: Vec<Lifetime> = slots.iter().map(|s| s.live).collect();
            Some(
                pack(&lifetimes, &sizes)
                    .ok_or_else(|| internal("the scratch arena does not fit the address space".into()))?,
            )
        }
        None => None,
    };
    Ok(Arena { slots, layout })
}

/// The kernels from the first to the last that touches each buffer (`None`: no kernel).
/// A loop runs its kernels again: a buffer written before a loop and touched inside it
/// stays live to the loop's last kernel (its next iteration reads it again).
fn lifetimes(p: &Program) -> SecondaryMap<BufId, Option<Lifetime>> {
    let mut live: SecondaryMap<BufId, Option<Lifetime>> = SecondaryMap::with_capacity(p.buffers.len());
    for (i, k) in p.kernels.iter().enumerate() {
        for b in k.inputs().0 {
            let l = live[b].get_or_insert(Lifetime { first: i, last: i });
            l.last = i;
        }
    }
    // Outer loops contain inner ones: extending for an inner loop first can carry a
    // lifetime into the outer loop's span, which the outer loop then extends.
    let mut loops = p.loops.clone();
    loops.sort_by_key(|l| l.end - l.cond);
    for l in &loops {
        for (_, life) in live.iter_mut() {
            if let Some(life) = life.as_mut().filter(|life| life.first < l.cond && life.last >= l.cond) {
                life.last = life.last.max(l.end - 1);
            }
        }
    }
    live
}

fn internal(message: String) -> Error {
    Error::Codegen(format!("internal error in the arena plan: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::expr::{constant, load, Scalar};
    use crate::ir::{Affine, Kernel};
    use aotc_abi::sym::SymExpr;
    use aotc_abi::DType;

    fn lowered(program: Program, outputs: Vec<BufId>) -> Lowered {
        Lowered { program, outputs: outputs.into_iter().map(|b| (format!("{b}"), b)).collect(), ..Lowered::default() }
    }

    /// `out[n] = src[n]` (a copy) as a kernel, or a constant when there is no source.
    fn copy(p: &mut Program, name: &str, src: Option<BufId>) -> BufId {
        let out = p.add_buffer(name, DType::F32, vec![SymExpr::Int(100)], BufKind::Scratch);
        let body = match src {
            Some(s) => load(s, DType::F32, Affine::var(0)),
            None => constant(Scalar::F(1.0), DType::F32),
        };
        p.kernels.push(Kernel::Pointwise { out, ranges: vec![SymExpr::Int(100)], body });
        out
    }

    #[test]
    fn a_chain_alternates_between_two_places_and_the_output_stays_out() {
        let mut p = Program::default();
        let a = copy(&mut p, "a", None);
        let b = copy(&mut p, "b", Some(a));
        let c = copy(&mut p, "c", Some(b));
        let d = copy(&mut p, "d", Some(c));
        let arena = plan_arena(&lowered(p, vec![d]), &[]).unwrap();
        let live: Vec<(usize, usize, usize)> =
            arena.slots.iter().map(|s| (s.slot, s.live.first, s.live.last)).collect();
        assert_eq!(live, vec![(a.index(), 0, 1), (b.index(), 1, 2), (c.index(), 2, 3)]);
        let layout = arena.layout.unwrap();
        assert_eq!(layout.bytes, 2 * 448);
        assert_eq!(layout.offsets[0], layout.offsets[2]);
    }

    /// A value made before a loop and last read inside it is read again by the next
    /// iteration: it stays live to the loop's last kernel, so nothing made in the loop
    /// shares its memory.
    #[test]
    fn a_value_read_inside_a_loop_lives_to_the_loop_end() {
        let mut p = Program::default();
        let before = copy(&mut p, "before", None);
        let state = copy(&mut p, "state", None);
        let flag = p.add_buffer("go_on", DType::I64, vec![], BufKind::Scratch);
        p.kernels.push(Kernel::Pointwise { out: flag, ranges: vec![], body: constant(Scalar::I(1), DType::I64) });
        let read = copy(&mut p, "read", Some(before));
        let late = copy(&mut p, "late", Some(read));
        p.kernels.push(Kernel::Pointwise {
            out: state,
            ranges: vec![SymExpr::Int(100)],
            body: load(late, DType::F32, Affine::var(0)),
        });
        p.loops.push(crate::ir::LoopRegion { cond: 2, body: 3, end: 6, flag });
        let arena = plan_arena(&lowered(p, vec![state]), &[]).unwrap();
        let live = |b: BufId| arena.slots.iter().find(|s| s.slot == b.index()).map(|s| (s.live.first, s.live.last));
        assert_eq!(live(before), Some((0, 5)), "read in the loop's body, kept to its end");
        assert_eq!(live(read), Some((3, 4)), "made and read within one iteration");
        assert_eq!(live(flag), None, "the condition the library reads has memory of its own");
        let layout = arena.layout.unwrap();
        let offset = |b: BufId| layout.offsets[arena.slots.iter().position(|s| s.slot == b.index()).unwrap()];
        assert_ne!(offset(before), offset(late), "'late' is written while 'before' is still needed");
    }
}
