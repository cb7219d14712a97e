//! Row-major layouts of `i64` sizes and element strides, shared by the compiler (dense
//! weights from strided storage) and the support library (strided inputs and outputs).
//!
//! Sizes and strides come from files and callers we do not trust, so counts and offsets
//! are computed with checked arithmetic: [`numel`] and [`extent`] say `None` rather than
//! wrap around, and [`for_each_offset`] walks only views whose extent was checked.

use std::ops::Range;

/// The element count of `sizes`; `None` if a size is negative or the count overflows
/// `i64`. A size of 0 makes the tensor empty whatever the other sizes are.
pub fn numel(sizes: &[i64]) -> Option<i64> {
    if sizes.iter().any(|&n| n < 0) {
        return None;
    }
    if sizes.contains(&0) {
        return Some(0);
    }
    sizes.iter().try_fold(1i64, |acc, &n| acc.checked_mul(n))
}

/// `numel(sizes) * elem`, the bytes of the contiguous layout; `None` on a negative size
/// or when it does not fit `isize` (the most one allocation can hold).
pub fn byte_len(sizes: &[i64], elem: usize) -> Option<usize> {
    let bytes = usize::try_from(numel(sizes)?).ok()?.checked_mul(elem)?;
    isize::try_from(bytes).ok().map(|_| bytes)
}

/// The strides of the contiguous (row-major) layout of `sizes`. Exact whenever
/// `numel(sizes)` is `Some`; the strides of an empty tensor address nothing, so there
/// they saturate rather than overflow.
pub fn contiguous_strides(sizes: &[i64]) -> Vec<i64> {
    let mut strides = vec![0; sizes.len()];
    write_contiguous_strides(sizes, &mut strides);
    strides
}

/// [`contiguous_strides`] into `strides` (as long as `sizes`), for callers that must not
/// allocate.
pub fn write_contiguous_strides(sizes: &[i64], strides: &mut [i64]) {
    let mut stride = 1i64;
    for (s, &n) in strides.iter_mut().zip(sizes).rev() {
        *s = stride;
        stride = stride.saturating_mul(n.max(1));
    }
}

/// True when `strides` describe the row-major layout of `sizes`; strides of size-1
/// dimensions do not matter.
pub fn is_contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    let mut expected = 1i64;
    for (&n, &s) in sizes.iter().zip(strides).rev() {
        if n != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(n);
    }
    true
}

/// Where the elements of a strided view lie, in elements from its first one (index 0):
/// `min` and `max` are the lowest and highest offsets reached (negative strides reach
/// below the first element). An empty view has `numel == 0` and reaches nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub numel: i64,
    pub min: i64,
    pub max: i64,
}

/// The extent of the view `sizes`/`strides`; `None` if the lengths differ, a size is
/// negative, or the count or an offset overflows `i64`.
pub fn extent(sizes: &[i64], strides: &[i64]) -> Option<Extent> {
    if sizes.len() != strides.len() {
        return None;
    }
    let numel = numel(sizes)?;
    let mut e = Extent { numel, min: 0, max: 0 };
    if numel == 0 {
        return Some(e);
    }
    for (&n, &s) in sizes.iter().zip(strides) {
        // The last index of a dimension moves the offset furthest from the first element.
        let reach = (n - 1).checked_mul(s)?;
        if reach < 0 {
            e.min = e.min.checked_add(reach)?;
        } else {
            e.max = e.max.checked_add(reach)?;
        }
    }
    Some(e)
}

impl Extent {
    /// The bytes the view touches relative to its data pointer, for elements of `elem`
    /// bytes starting `byte_offset` bytes in: `[offset of min, end of max)`, empty for an
    /// empty view. `None` when a bound overflows `i64`.
    pub fn byte_span(&self, elem: usize, byte_offset: u64) -> Option<Range<i64>> {
        let base = i64::try_from(byte_offset).ok()?;
        if self.numel == 0 {
            return Some(base..base);
        }
        let elem = i64::try_from(elem).ok()?;
        let start = base.checked_add(self.min.checked_mul(elem)?)?;
        let end = base.checked_add(self.max.checked_add(1)?.checked_mul(elem)?)?;
        Some(start..end)
    }
}

/// Calls `f(linear, offset)` for every element in row-major order: `linear` is its
/// position in the contiguous layout, `offset` its element offset under `strides`.
///
/// The offset moves by one stride per step, so every value computed is the offset of an
/// element of the view: none overflows once [`extent`] has accepted the view.
///
/// # Panics
/// If `extent(sizes, strides)` is `None`: callers check views from outside first.
pub fn for_each_offset(sizes: &[i64], strides: &[i64], mut f: impl FnMut(usize, i64)) {
    let Some(e) = extent(sizes, strides) else {
        panic!("for_each_offset: the view (sizes {sizes:?}, strides {strides:?}) overflows; check its extent first");
    };
    let mut index = vec![0i64; sizes.len()];
    let mut offset = 0i64;
    // numel fits i64, so it fits usize on the 64-bit targets aotc supports.
    for linear in 0..e.numel as usize {
        f(linear, offset);
        for d in (0..sizes.len()).rev() {
            index[d] += 1;
            if index[d] < sizes[d] {
                offset += strides[d];
                break;
            }
            index[d] = 0;
            offset -= (sizes[d] - 1) * strides[d];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_of_a_transpose() {
        let mut seen = vec![];
        for_each_offset(&[2, 3], &[1, 2], |l, o| seen.push((l, o)));
        assert_eq!(seen, vec![(0, 0), (1, 2), (2, 4), (3, 1), (4, 3), (5, 5)]);
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert!(is_contiguous(&[2, 1, 4], &[4, 99, 1]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
    }

    #[test]
    fn negative_strides_walk_below_the_first_element() {
        let mut seen = vec![];
        for_each_offset(&[2, 2], &[-2, 1], |_, o| seen.push(o));
        assert_eq!(seen, vec![0, 1, -2, -1]);
        assert_eq!(extent(&[2, 2], &[-2, 1]), Some(Extent { numel: 4, min: -2, max: 1 }));
        // The bytes of f32 elements 1 element in: from element -1 to the end of element 2.
        assert_eq!(extent(&[2, 2], &[-2, 1]).unwrap().byte_span(4, 4), Some(-4..12));
    }

    #[test]
    fn counts_and_offsets_that_overflow_are_refused() {
        assert_eq!(numel(&[i64::MAX, 2]), None);
        assert_eq!(numel(&[3, -1]), None);
        assert_eq!(numel(&[i64::MAX, i64::MAX, 0]), Some(0));
        assert_eq!(byte_len(&[i64::MAX / 2], 4), None);
        assert_eq!(byte_len(&[3, 4], 8), Some(96));
        assert_eq!(extent(&[3], &[i64::MAX]), None);
        assert_eq!(extent(&[3], &[i64::MIN]), None);
        assert_eq!(extent(&[2, 2], &[i64::MAX, i64::MAX]), None, "each reach fits, their sum does not");
        assert_eq!(
            extent(&[1, 5], &[i64::MAX, 1]),
            Some(Extent { numel: 5, min: 0, max: 4 }),
            "a size-1 dimension reaches nothing"
        );
        assert_eq!(extent(&[2], &[1, 1]), None, "rank mismatch");
        let e = extent(&[4], &[1]).unwrap();
        assert_eq!(e.byte_span(4, u64::MAX), None);
        assert_eq!(e.byte_span(4, i64::MAX as u64), None);
        assert_eq!(
            extent(&[0, 7], &[i64::MAX, 1]).unwrap().byte_span(4, 8),
            Some(8..8),
            "an empty view touches nothing"
        );
        // Views of an empty tensor with huge sizes need strides too; they saturate.
        assert_eq!(contiguous_strides(&[0, i64::MAX, i64::MAX]), vec![i64::MAX, i64::MAX, 1]);
    }

    #[test]
    #[should_panic(expected = "check its extent first")]
    fn walking_an_unchecked_view_panics_rather_than_wrapping() {
        for_each_offset(&[2, 2], &[i64::MAX, i64::MAX], |_, _| {});
    }
}
