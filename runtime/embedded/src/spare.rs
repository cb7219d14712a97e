//! Buffers a kernel needs only while it runs, sized by the call rather than by the
//! compiler (one per thread of a parallel kernel, however many threads the call has: the
//! Winograd convolution's transformed blocks), kept by the instance from call to call.
//! Allocating them per call would cost page faults on every call, and two threads
//! faulting at once serialize in the kernel.
//!
//! The instance lends its [`Spare`] to the calling thread for the duration of a call
//! ([`lend`]); a kernel takes a [`Handle`] to it on that thread and passes it to its
//! workers, which [`Handle::take`] buffers and give them back by dropping them.
//!
//! Each thread of a parallel region has a seat (the caller 0, the pool's workers 1..) with
//! buffers of its own, and a buffer allocated or grown for one seat is allocated for every
//! seat: which worker runs which chunk, and how many run at once, changes from call to
//! call (a busy machine wakes a worker late), so a seat must be ready for any chunk the
//! moment another seat has needed it. A steady call then allocates nothing, however its
//! chunks fall.

use std::cell::Cell;
use std::sync::Mutex;

/// An instance's buffers between calls, per seat.
pub struct Spare {
    seats: Box<[Mutex<Vec<Vec<f32>>>]>,
}

impl Spare {
    /// The buffers of an instance whose calls run on up to `threads` threads.
    pub fn new(threads: usize) -> Spare {
        Spare { seats: (0..threads.max(1)).map(|_| Mutex::default()).collect() }
    }

    /// Seat `seat`'s free buffers (a seat past the instance's threads, which the pool does
    /// not give, shares another's).
    fn free(&self, seat: usize) -> std::sync::MutexGuard<'_, Vec<Vec<f32>>> {
        self.seats[seat % self.seats.len()].lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
impl Spare {
    /// `threads` seats of `count` buffers of `len` NaNs each: what a kernel must not read
    /// before writing.
    pub fn poisoned(threads: usize, count: usize, len: usize) -> Spare {
        let spare = Spare::new(threads);
        for seat in 0..threads {
            *spare.free(seat) = vec![vec![f32::NAN; len]; count];
        }
        spare
    }
}

thread_local! {
    // The spare buffers of the instance whose call runs on this thread (a pointer, not a
    // reference: a thread-local without a destructor).
    static CURRENT: Cell<Handle> = const { Cell::new(Handle { spare: std::ptr::null(), seat: 0 }) };
}

/// Runs `f` with `spare` as the calling thread's spare buffers (seat 0).
pub fn lend<T>(spare: &Spare, f: impl FnOnce() -> T) -> T {
    with_handle(Handle { spare, seat: 0 }, f)
}

/// Runs `f` with `handle`'s buffers as the calling thread's: a worker of a parallel
/// region takes those of its seat in the call that posted it.
pub fn with_handle<T>(handle: Handle, f: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|c| c.replace(handle));
    let out = f();
    CURRENT.with(|c| c.set(previous));
    out
}

/// The spare buffers of the running call and the seat they are taken for.
#[derive(Clone, Copy)]
pub struct Handle {
    spare: *const Spare,
    seat: usize,
}

// SAFETY: the Spare's seats are Mutexes, and it outlives the call (the instance lends it for the
// call only, and a kernel's threads finish within the call).
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

impl Handle {
    /// The calling thread's (none outside an instance's call: buffers are then freed).
    pub fn current() -> Handle {
        CURRENT.with(|c| c.get())
    }

    /// The same buffers, for the region's seat `seat`.
    pub fn seat(self, seat: usize) -> Handle {
        Handle { seat, ..self }
    }

    /// The lending instance's buffers, if any.
    fn spare(&self) -> Option<&Spare> {
        // SAFETY: see `Handle`'s Send: the pointer is null or to the lending instance's
        // Spare, alive for the call.
        unsafe { self.spare.as_ref() }
    }

    /// A buffer of `len` floats, whatever it held before (zeros when new).
    pub fn take(self, len: usize) -> Buffer {
        let found = self.spare().and_then(|s| best_fit(&mut s.free(self.seat), len));
        let mut data = found.unwrap_or_default();
        if data.len() < len {
            // Grown, never shrunk: a buffer serves calls of different sizes in turn, and
            // growing it back after a truncation would write zeros again every time.
            data.resize(len, 0.0);
            if let Some(spare) = self.spare() {
                ready_other_seats(spare, self.seat, len);
            }
        }
        Buffer { data, len, home: self }
    }
}

/// Gives every seat but `seat` a free buffer of at least `len` floats (growing its
/// largest, or a new one), unless it has one.
fn ready_other_seats(spare: &Spare, seat: usize, len: usize) {
    for other in (0..spare.seats.len()).filter(|&s| s != seat % spare.seats.len()) {
        let mut free = spare.free(other);
        if free.iter().any(|b| b.len() >= len) {
            continue;
        }
        match free.iter_mut().max_by_key(|b| b.len()) {
            Some(largest) => largest.resize(len, 0.0),
            None => free.push(vec![0.0; len]),
        }
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
        if let Some(spare) = self.home.spare() {
            spare.free(self.home.seat).push(std::mem::take(&mut self.data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_to_the_lending_instance_and_are_freed_outside_one() {
        let spare = Spare::new(1);
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
        assert_eq!(spare.free(0).len(), 1);
        let c = Handle::current().take(10);
        assert_eq!(&c[..], &[0.0; 10]);
        drop(c);
        assert_eq!(spare.free(0).len(), 1, "not given to an instance outside its call");
    }

    #[test]
    fn a_buffer_one_seat_needed_is_ready_on_every_seat() {
        let spare = Spare::new(3);
        lend(&spare, || {
            let worker = Handle::current().seat(2);
            drop(worker.take(100));
            // Seats 0 and 1 never ran a chunk: they have one already, and take it without
            // allocating (the same storage comes back).
            for seat in [0, 1] {
                let b = Handle::current().seat(seat).take(80);
                let storage = b.data.as_ptr();
                drop(b);
                assert_eq!(spare.free(seat).len(), 1);
                assert_eq!(spare.free(seat)[0].as_ptr(), storage, "seat {seat}");
            }
            // Growing one seat's buffer grows the others' largest, not a second one.
            drop(Handle::current().seat(1).take(500));
            assert!((0..3).all(|seat| spare.free(seat).len() == 1 && spare.free(seat)[0].len() == 500));
        });
    }
}
