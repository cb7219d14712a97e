//! An instance's scratch arena: one allocation for the scratch slots the manifest's
//! [`Arena`] lists, laid out by [`aotc_abi::arena::pack`] for the sizes of a call. The
//! layout is kept while the sizes stay the same, so steady calls plan and allocate nothing.
//! [`ArenaPlan`] is the layout, whatever memory holds it (host here, a device allocation
//! for a CUDA instance).

use crate::error::{Error, Result};
use crate::memory::{self, ensure_len, AlignedBuf};
use aotc_abi::arena::{pack, Arena, Layout, Lifetime};
use aotc_abi::manifest::Slot;
use aotc_abi::status;

// The offsets `pack` chooses keep their alignment only in memory aligned at least as much.
const _: () = assert!(memory::ALIGN.is_multiple_of(aotc_abi::arena::ALIGN));

/// Where each arena slot sits for the slot sizes of the last call.
pub struct ArenaPlan {
    /// The size of each arena slot the layout was planned for (empty: not planned yet).
    sizes: Vec<usize>,
    layout: Layout,
    /// Whether each slot of the program lives in the arena.
    holds: Vec<bool>,
}

impl ArenaPlan {
    /// Starts from the compiler's layout when it planned one (every size static).
    pub fn new(arena: &Arena, slots: &[Slot]) -> ArenaPlan {
        let mut holds = vec![false; slots.len()];
        arena.slots.iter().for_each(|s| holds[s.slot] = true);
        let static_size = |k: usize| match &slots[k] {
            Slot::Scratch { bytes } => bytes.as_int().and_then(|n| usize::try_from(n).ok()),
            _ => None,
        };
        let sizes = arena.slots.iter().map(|s| static_size(s.slot)).collect::<Option<Vec<usize>>>();
        let planned = arena.layout.clone().filter(|l| l.offsets.len() == arena.slots.len()).zip(sizes);
        let (layout, sizes) = planned.unwrap_or_default();
        ArenaPlan { sizes, layout, holds }
    }

    /// Whether slot `k` lives in the arena.
    pub fn holds(&self, k: usize) -> bool {
        self.holds.get(k).copied().unwrap_or(false)
    }

    /// The layout for the slot sizes `bytes` (all known before the first stage), planned
    /// again only when they changed: offsets per entry of `arena.slots`, and the total.
    pub fn layout(&mut self, arena: &Arena, bytes: &[Option<usize>]) -> Result<&Layout> {
        let size = |k: usize| {
            bytes[k].ok_or_else(|| Error {
                code: status::INTERNAL,
                message: format!("the size of arena slot {k} is not known before the first stage"),
            })
        };
        let same = self.sizes.len() == arena.slots.len()
            && arena.slots.iter().zip(&self.sizes).all(|(s, &n)| bytes[s.slot] == Some(n));
        if !same {
            let sizes = arena.slots.iter().map(|s| size(s.slot)).collect::<Result<Vec<usize>>>()?;
            let lifetimes: Vec<Lifetime> = arena.slots.iter().map(|s| s.live).collect();
            self.layout = pack(&lifetimes, &sizes).ok_or_else(|| Error {
                code: status::OUT_OF_MEMORY,
                message: "the scratch memory of this call exceeds the address space".into(),
            })?;
            self.sizes = sizes;
        }
        Ok(&self.layout)
    }
}

/// The arena of a CPU instance: the plan and the host memory it lays out.
pub struct ScratchArena {
    plan: ArenaPlan,
    memory: AlignedBuf,
}

impl ScratchArena {
    pub fn new(arena: &Arena, slots: &[Slot]) -> ScratchArena {
        ScratchArena { plan: ArenaPlan::new(arena, slots), memory: AlignedBuf::empty() }
    }

    /// Whether slot `k` lives in the arena (and [`ScratchArena::bind`] places it).
    pub fn holds(&self, k: usize) -> bool {
        self.plan.holds(k)
    }

    /// True when some byte of `span` (addresses) lies in the arena.
    pub fn overlaps(&self, span: &std::ops::Range<usize>) -> bool {
        self.memory.overlaps(span)
    }

    /// The arena's memory, for keeping it apart from inputs that live in it.
    pub fn memory(&mut self) -> &mut AlignedBuf {
        &mut self.memory
    }

    /// Points every arena slot of `slots` into the arena, for the slot sizes `bytes` (all
    /// known before the first stage), re-planning and reallocating only when they changed.
    pub fn bind(&mut self, arena: &Arena, bytes: &[Option<usize>], slots: &mut [*mut u8]) -> Result<()> {
        let layout = self.plan.layout(arena, bytes)?;
        let base = ensure_len(&mut self.memory, layout.bytes)?;
        for (s, &offset) in arena.slots.iter().zip(&layout.offsets) {
            // Inside the allocation: pack places every slot within `layout.bytes`.
            slots[s.slot] = base.wrapping_add(offset);
        }
        Ok(())
    }
}

/// Points each alias slot (`Slot::Alias`, a part of a concatenation placed in it) into the
/// memory of the slot it lies in, which must be bound already; `at(p, n)` is the address
/// `n` bytes past `p`. An alias whose slot is not scratch of a static size it fits in (an
/// alias of an alias, a slot outside the table) fails the call: the compiler never
/// writes one.
pub fn bind_aliases<P: Copy>(slots: &[Slot], bound: &mut [P], at: impl Fn(P, u64) -> P) -> Result<()> {
    for (k, slot) in slots.iter().enumerate() {
        if let Slot::Alias { within, offset } = *slot {
            let holds = |bytes: &aotc_abi::sym::SymExpr| bytes.as_int().and_then(|n| u64::try_from(n).ok());
            if !matches!(slots.get(within), Some(Slot::Scratch { bytes }) if holds(bytes).is_some_and(|n| offset <= n))
            {
                return Err(Error {
                    code: status::INTERNAL,
                    message: format!("slot {k} is placed in slot {within} at byte {offset}, which cannot hold it"),
                });
            }
            bound[k] = at(bound[within], offset);
        }
    }
    Ok(())
}
