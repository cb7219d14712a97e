//! 64-byte aligned owned memory, and copies between strided and contiguous layouts.

use crate::error::{Error, Result};
use aotc_abi::layout::for_each_offset;
use aotc_abi::status;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

pub const ALIGN: usize = 64;

/// An owned, zero-initialised, 64-byte aligned byte buffer.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf uniquely owns its allocation, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// No memory: what a slot holds before its first call.
    pub fn empty() -> AlignedBuf {
        AlignedBuf { ptr: NonNull::<[u8; ALIGN]>::dangling().cast(), len: 0 }
    }

    /// `None` when the allocation fails (or `len` is too large for one).
    pub fn new(len: usize) -> Option<AlignedBuf> {
        if len == 0 {
            return Some(AlignedBuf::empty());
        }
        let layout = Layout::from_size_align(len, ALIGN).ok()?;
        // SAFETY: layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        Some(AlignedBuf { ptr, len })
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<AlignedBuf> {
        let mut b = AlignedBuf::new(bytes.len())?;
        b.as_mut_slice().copy_from_slice(bytes);
        Some(b)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// True when some byte of `span` (addresses) lies in this buffer.
    pub fn overlaps(&self, span: &std::ops::Range<usize>) -> bool {
        let start = self.ptr.as_ptr() as usize;
        self.len > 0 && !span.is_empty() && span.start < start + self.len && start < span.end
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling and len == 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: allocated in `new` with this exact layout.
            unsafe { dealloc(self.ptr.as_ptr(), Layout::from_size_align_unchecked(self.len, ALIGN)) }
        }
    }
}

/// `buf` with exactly `bytes` bytes, reallocated only when its size changes.
pub fn ensure_len(buf: &mut AlignedBuf, bytes: usize) -> Result<*mut u8> {
    if buf.len() != bytes {
        *buf = AlignedBuf::new(bytes)
            .ok_or_else(|| Error { code: status::OUT_OF_MEMORY, message: format!("cannot allocate {bytes} bytes") })?;
    }
    Ok(buf.as_ptr())
}

/// Which way [`strided_copy`] moves elements.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    StridedToContiguous,
    ContiguousToStrided,
}

/// Copies every element between a contiguous buffer and a strided view.
///
/// # Safety
/// `contiguous` must be valid for `product(sizes) * elem` bytes and `strided` for every
/// element the strides reach, a view whose extent was checked (so no offset overflows);
/// the two must not overlap.
pub unsafe fn strided_copy(
    contiguous: *mut u8,
    strided: *mut u8,
    sizes: &[i64],
    strides: &[i64],
    elem: usize,
    dir: Direction,
) {
    for_each_offset(sizes, strides, |linear, offset| {
        // SAFETY: the caller guarantees both ranges are valid; offsets stay inside them.
        unsafe {
            let c = contiguous.add(linear * elem);
            let s = strided.offset(offset as isize * elem as isize);
            match dir {
                Direction::StridedToContiguous => std::ptr::copy_nonoverlapping(s, c, elem),
                Direction::ContiguousToStrided => std::ptr::copy_nonoverlapping(c, s, elem),
            }
        }
    });
}
