//! Buffers a kernel needs only while it runs, sized by the call rather than by the
//! compiler (one per thread of a parallel kernel, however many threads the call has: the
//! Winograd convolution's transformed blocks), kept by the instance from call to call.
//! Allocating them per call would cost page faults on every call, and two threads
//! faulting at once serialize in the kernel.
//!
//! The instance lends its [`Spare`] to the calling thread for the duration of a call
//! ([`lend`]); a kernel takes a [`Handle`] to it on that thread and passes it to its
//! workers, which [`Handle::take`] buffers and give them back by dropping them.

use std::cell::Cell;
use std::sync::Mutex;

/// An instance's buffers between calls.
#[derive(Default)]
pub struct Spare {
    free: Mutex<Vec<Vec<f32>>>,
}

#[cfg(test)]
impl Spare {
    /// `count` buffers of `len` NaNs: what a kernel must not read before writing.
    pub fn poisoned(count: usize, len: usize) -> Spare {
        Spare { free: Mutex::new(vec![vec![f32::NAN; len]; count]) }
    }
}

thread_local! {
    // The spare buffers of the instance whose call runs on this thread (a pointer, not a
    // reference: a thread-local without a destructor).
    static CURRENT: Cell<*const Spare> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` with `spare` as the calling thread's spare buffers.
pub fn lend<T>(spare: &Spare, f: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|c| c.replace(spare));
    let out = f();
    CURRENT.with(|c| c.set(previous));
    out
}

/// Runs `f` with `handle`'s buffers as the calling thread's: a worker of a parallel
/// region takes those of the call that posted it.
pub fn with_handle<T>(handle: Handle, f: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|c| c.replace(handle.0));
    let out = f();
    CURRENT.with(|c| c.set(previous));
    out
}

/// The spare buffers of the running call, for its kernel's threads.
#[derive(Clone, Copy)]
pub struct Handle(*const Spare);

// SAFETY: the Spare is a Mutex, and it outlives the call (the instance lends it for the
// call only, and a kernel's threads finish within the call).
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

impl Handle {
    /// The calling thread's (none outside an instance's call: buffers are then freed).
    pub fn current() -> Handle {
        Handle(CURRENT.with(|c| c.get()))
    }

    /// A buffer of `len` floats, whatever it held before (zeros when new).
    pub fn take(self, len: usize) -> Buffer {
        // SAFETY: see `Handle`: the pointer is null or to the lending instance's Spare.
        let spare = unsafe { self.0.as_ref() };
        let mut data = spare
            .and_then(|s| best_fit(&mut s.free.lock().unwrap_or_else(|e| e.into_inner()), len))
            .unwrap_or_default();
        // Grown, never shrunk: a buffer serves calls of different sizes in turn, and
        // growing it back after a truncation would write zeros again every time.
        if data.len() < len {
            data.resize(len, 0.0);
        }
        Buffer { data, len, home: self }
    }
}

/// The smallest free buffer that holds `len` floats, else the largest (to be grown): the
/// buffers keep their sizes from call to call, whatever order threads take them in, so
/// that a steady call grows none.
fn best_fit(free: &mut Vec<Vec<f32>>, len: usize) -> Option<Vec<f32>> {
    let holds = free.iter().enumerate().filter(|(_, b)| b.len() >= len).min_by_key(|(_, b)| b.len());
    let (i, _) = holds.or_else(|| free.iter().enumerate().max_by_key(|(_, b)| b.len()))?;
    Some(free.swap_remove(i))
}

/// A taken buffer (its first `len` floats); dropping it gives it back.
pub struct Buffer {
    data: Vec<f32>,
    len: usize,
    home: Handle,
}

impl std::ops::Deref for Buffer {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.data[..self.len]
    }
}

impl std::ops::DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.data[..self.len]
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: as in `take`.
        if let Some(spare) = unsafe { self.home.0.as_ref() } {
            spare.free.lock().unwrap_or_else(|e| e.into_inner()).push(std::mem::take(&mut self.data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_to_the_lending_instance_and_are_freed_outside_one() {
        let spare = Spare::default();
        lend(&spare, || {
            let mut a = Handle::current().take(100);
            a[0] = 7.0;
            drop(a);
            let b = Handle::current().take(50);
            assert_eq!((b.len(), b[0]), (50, 7.0), "the same buffer, its contents as they were");
            drop(b);
            let mut c = Handle::current().take(100);
            assert_eq!(c.len(), 100);
            c[99] = 1.0;
        });
        assert_eq!(spare.free.lock().unwrap().len(), 1);
        let c = Handle::current().take(10);
        assert_eq!(&c[..], &[0.0; 10]);
        drop(c);
        assert_eq!(spare.free.lock().unwrap().len(), 1, "not given to an instance outside its call");
    }
}
