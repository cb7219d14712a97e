//! One allocation for the scratch buffers of a call: buffers whose lifetimes (the kernels
//! from the first that writes one to the last that reads it) do not overlap share memory.
//!
//! The compiler decides which scratch slots may share and over which kernels each is live
//! ([`Arena`], in the manifest). The placement, [`pack`], runs in the compiler when every
//! size is static, and otherwise in the support library at the first call of each new set
//! of sizes; both run this code.

use serde::{Deserialize, Serialize};

/// Every buffer starts at a multiple of this many bytes from the start of the arena, which
/// is itself allocated so aligned.
pub const ALIGN: usize = 64;

/// The kernels, by position in the program and both ends included, over which a buffer's
/// contents matter: from the kernel that writes it to the last that reads it. Two buffers
/// one kernel touches are both live at that kernel, so they never share memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifetime {
    pub first: usize,
    pub last: usize,
}

impl Lifetime {
    pub fn overlaps(self, other: Lifetime) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// The scratch slots that share one allocation, and their placement when it is static.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Arena {
    pub slots: Vec<ArenaSlot>,
    /// Planned by the compiler when every size is static (one offset per entry of
    /// `slots`); `None`: the library plans it for the sizes of a call.
    pub layout: Option<Layout>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ArenaSlot {
    pub slot: usize,
    pub live: Lifetime,
}

/// Where each buffer starts in the arena, and the arena's size, in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub offsets: Vec<usize>,
    pub bytes: usize,
}

/// Places buffers of `sizes` bytes, live over `lifetimes`, in one arena so that two whose
/// lifetimes overlap never overlap in memory. Greedy, largest first: each buffer goes to
/// the lowest offset (a multiple of [`ALIGN`]) that is free over its whole lifetime. The
/// arena never exceeds the sum of the sizes rounded up to [`ALIGN`]. `None`: that sum
/// does not fit a `usize`.
pub fn pack(lifetimes: &[Lifetime], sizes: &[usize]) -> Option<Layout> {
    assert_eq!(lifetimes.len(), sizes.len(), "one size per lifetime");
    let rounded = sizes.iter().map(|&n| n.checked_next_multiple_of(ALIGN)).collect::<Option<Vec<usize>>>()?;
    rounded.iter().try_fold(0usize, |sum, &n| sum.checked_add(n))?;
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(rounded[i]), lifetimes[i].first, i));
    let mut offsets = vec![0; sizes.len()];
    // The buffers placed so far, and the byte ranges of those live with the current one.
    let mut placed: Vec<usize> = Vec::with_capacity(sizes.len());
    let mut taken: Vec<(usize, usize)> = Vec::new();
    let mut bytes = 0;
    for i in order {
        if rounded[i] == 0 {
            continue;
        }
        taken.clear();
        taken.extend(
            placed
                .iter()
                .filter(|&&j| lifetimes[j].overlaps(lifetimes[i]))
                .map(|&j| (offsets[j], offsets[j] + rounded[j])),
        );
        taken.sort_unstable();
        let mut offset = 0;
        for &(start, end) in &taken {
            if offset + rounded[i] <= start {
                break;
            }
            offset = offset.max(end);
        }
        offsets[i] = offset;
        bytes = bytes.max(offset + rounded[i]);
        placed.push(i);
    }
    Some(Layout { offsets, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(first: usize, last: usize) -> Lifetime {
        Lifetime { first, last }
    }

    /// Two buffers live together never share a byte, every offset is aligned, and each
    /// buffer lies inside the arena, which is no larger than the buffers side by side.
    fn check(lifetimes: &[Lifetime], sizes: &[usize], layout: &Layout) {
        let o = &layout.offsets;
        for i in 0..sizes.len() {
            assert_eq!(o[i] % ALIGN, 0, "offset of {i}");
            assert!(o[i] + sizes[i] <= layout.bytes, "buffer {i} ends past the arena");
            for j in 0..i {
                let disjoint = o[i] + sizes[i] <= o[j] || o[j] + sizes[j] <= o[i];
                let empty = sizes[i] == 0 || sizes[j] == 0;
                assert!(
                    !lifetimes[i].overlaps(lifetimes[j]) || disjoint || empty,
                    "{i} {:?} and {j} {:?} overlap: {layout:?}",
                    lifetimes[i],
                    lifetimes[j]
                );
            }
        }
        assert!(layout.bytes <= sizes.iter().map(|n| n.next_multiple_of(ALIGN)).sum::<usize>());
    }

    #[test]
    fn a_chain_reuses_memory_and_neighbours_in_a_kernel_do_not() {
        // a -> b -> c -> d, each read only by the next kernel: live 0-1, 1-2, 2-3, 3-4.
        let lifetimes = [live(0, 1), live(1, 2), live(2, 3), live(3, 4)];
        let sizes = [1000, 1000, 1000, 1000];
        let layout = pack(&lifetimes, &sizes).unwrap();
        check(&lifetimes, &sizes, &layout);
        // Two 1024-byte places alternate: a and c share one, b and d the other.
        assert_eq!(layout.bytes, 2048);
        assert_eq!(layout.offsets[0], layout.offsets[2]);
        assert_ne!(layout.offsets[0], layout.offsets[1]);
    }

    #[test]
    fn offsets_are_aligned_and_the_largest_goes_first() {
        let lifetimes = [live(0, 5), live(0, 5), live(0, 5)];
        let sizes = [1, 100, 65];
        let layout = pack(&lifetimes, &sizes).unwrap();
        check(&lifetimes, &sizes, &layout);
        assert_eq!(layout.offsets, vec![256, 0, 128]);
        assert_eq!(layout.bytes, 320);
    }

    #[test]
    fn a_gap_between_live_buffers_is_filled() {
        // x and z live throughout; y (live only at first) left a hole that w fits.
        let lifetimes = [live(0, 9), live(0, 0), live(0, 9), live(5, 6)];
        let sizes = [256, 128, 256, 64];
        let layout = pack(&lifetimes, &sizes).unwrap();
        check(&lifetimes, &sizes, &layout);
        assert_eq!(layout.bytes, 640);
        assert_eq!(layout.offsets[3], layout.offsets[1]);
    }

    #[test]
    fn empty_buffers_and_overflow() {
        assert_eq!(pack(&[], &[]), Some(Layout::default()));
        let layout = pack(&[live(0, 0), live(0, 0)], &[0, 8]).unwrap();
        assert_eq!(layout.bytes, 64);
        assert_eq!(pack(&[live(0, 0)], &[usize::MAX]), None);
        assert_eq!(pack(&[live(0, 0), live(1, 1)], &[usize::MAX / 2 + 1, usize::MAX / 2 + 1]), None);
    }

    #[test]
    fn random_lifetimes_never_overlap_in_memory() {
        // xorshift64: a fixed sequence of cases, the same on every run.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for _ in 0..500 {
            let count = 1 + next(40);
            let kernels = 1 + next(30);
            let lifetimes: Vec<Lifetime> = (0..count)
                .map(|_| {
                    let first = next(kernels);
                    live(first, first + next(kernels - first))
                })
                .collect();
            let sizes: Vec<usize> = (0..count).map(|_| if next(8) == 0 { 0 } else { 1 + next(5000) }).collect();
            let layout = pack(&lifetimes, &sizes).unwrap();
            check(&lifetimes, &sizes, &layout);
            // The buffers live at the busiest kernel lie side by side, whatever the packing.
            let peak = (0..kernels)
                .map(|k| {
                    lifetimes
                        .iter()
                        .zip(&sizes)
                        .filter(|(l, _)| l.first <= k && k <= l.last)
                        .map(|(_, n)| n.next_multiple_of(ALIGN))
                        .sum::<usize>()
                })
                .max()
                .unwrap();
            assert!(layout.bytes >= peak);
        }
    }
}
