//! 64-byte aligned owned memory, and copies between strided and contiguous layouts.

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
    pub fn new(len: usize) -> Option<AlignedBuf> {
        if len == 0 {
            return Some(AlignedBuf { ptr: NonNull::<[u8; ALIGN]>::dangling().cast(), len: 0 });
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

/// True when `strides` (in elements) describe the row-major layout of `sizes`;
/// strides of size-1 dimensions do not matter.
pub fn is_contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    let mut expected = 1i64;
    for (&n, &s) in sizes.iter().zip(strides).rev() {
        if n != 1 && s != expected {
            return false;
        }
        expected *= n;
    }
    true
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
/// element the strides reach; the two must not overlap.
pub unsafe fn strided_copy(contiguous: *mut u8, strided: *mut u8, sizes: &[i64], strides: &[i64], elem: usize, dir: Direction) {
    let count: i64 = sizes.iter().product();
    let mut index = vec![0i64; sizes.len()];
    for linear in 0..count.max(0) as usize {
        let offset: i64 = index.iter().zip(strides).map(|(i, s)| i * s).sum();
        // SAFETY: the caller guarantees both ranges are valid; offsets stay inside them.
        unsafe {
            let c = contiguous.add(linear * elem);
            let s = strided.offset(offset as isize * elem as isize);
            match dir {
                Direction::StridedToContiguous => std::ptr::copy_nonoverlapping(s, c, elem),
                Direction::ContiguousToStrided => std::ptr::copy_nonoverlapping(c, s, elem),
            }
        }
        for d in (0..sizes.len()).rev() {
            index[d] += 1;
            if index[d] < sizes[d] {
                break;
            }
            index[d] = 0;
        }
    }
}
