//! The calling thread's last error message (`aotc_last_error`), kept so that it never
//! holds the library loaded and leaves nothing behind when the library is unloaded.
//!
//! A thread-local with a destructor would pin the library: glibc keeps a library mapped
//! while any live thread holds a thread-local destructor registered from it
//! (`__cxa_thread_atexit_impl` counts them per library), so a caller's thread that once
//! saw an error would keep it loaded until that thread exits. Here a message lives in a
//! thread-local buffer of plain bytes (no destructor; glibc frees a thread's block of an
//! unloaded library). A longer message goes to the heap, and its release at thread exit
//! is registered as a call of libc's own `free`, counted against libc: nothing of this
//! library runs or stays pinned at the thread's exit.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};

/// Messages up to this many bytes (most: an input's name, shapes, a dtype) stay in the
/// thread-local buffer.
const INLINE: usize = 512;

thread_local! {
    static SHORT: Cell<[u8; INLINE]> = const { Cell::new([0; INLINE]) };
    // A longer message (NUL-terminated) and its heap buffer's capacity; null before the
    // first one.
    static LONG: Cell<(*mut u8, usize)> = const { Cell::new((std::ptr::null_mut(), 0)) };
    // Which holds the last message.
    static IN_LONG: Cell<bool> = const { Cell::new(false) };
}

extern "C" {
    /// glibc's registration of a thread-exit call (what C++ `thread_local` uses):
    /// `dso_symbol` names the object the call counts against.
    fn __cxa_thread_atexit_impl(
        dtor: unsafe extern "C" fn(*mut c_void),
        obj: *mut c_void,
        dso_symbol: *mut c_void,
    ) -> c_int;
}

/// Makes `message` (NULs dropped) the calling thread's last error.
pub fn set(message: &str) {
    let bytes = || message.bytes().filter(|&b| b != 0);
    let len = bytes().count();
    // A long message on the heap; if no memory is left for it, its start inline.
    let (buf, len) = match (len >= INLINE).then(|| long_buffer(len + 1)).flatten() {
        Some(buf) => (buf, len),
        None => (SHORT.with(|s| s.as_ptr().cast::<u8>()), len.min(INLINE - 1)),
    };
    IN_LONG.with(|l| l.set(len >= INLINE));
    for (i, b) in bytes().take(len).chain([0]).enumerate() {
        // SAFETY: buf holds more than len bytes (see above), and only this thread sees it.
        unsafe { *buf.add(i) = b };
    }
}

/// The calling thread's heap buffer of at least `size` bytes. A larger one replaces a
/// smaller, which stays allocated until the thread exits (at most one per doubling).
fn long_buffer(size: usize) -> Option<*mut u8> {
    let (buf, capacity) = LONG.with(|l| l.get());
    if capacity >= size {
        return Some(buf);
    }
    let grown = size.next_power_of_two();
    // SAFETY: a plain allocation; null is handled.
    let fresh = unsafe { libc::malloc(grown) }.cast::<u8>();
    if fresh.is_null() {
        return None;
    }
    // SAFETY: libc's free, on a pointer from libc's malloc, once, when this thread exits;
    // counted against libc (free's own address), which is never unloaded.
    unsafe { __cxa_thread_atexit_impl(libc::free, fresh.cast(), libc::free as *mut c_void) };
    LONG.with(|l| l.set((fresh, grown)));
    Some(fresh)
}

/// The calling thread's last error message ("" before the first).
pub fn get() -> *const c_char {
    if IN_LONG.with(|l| l.get()) {
        LONG.with(|l| l.get().0.cast())
    } else {
        SHORT.with(|s| s.as_ptr().cast())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: get returns a NUL-terminated string.
        unsafe { CStr::from_ptr(get()) }.to_str().unwrap().to_owned()
    }

    #[test]
    fn messages_replace_each_other_per_thread_whatever_their_length() {
        std::thread::spawn(|| {
            assert_eq!(last(), "");
            set("short");
            assert_eq!(last(), "short");
            for n in [INLINE - 1, INLINE, 5000, 3000, 20000] {
                let long = "x".repeat(n);
                set(&long);
                assert_eq!(last(), long);
            }
            set("a\0b");
            assert_eq!(last(), "ab");
            std::thread::spawn(|| assert_eq!(last(), "", "per thread")).join().unwrap();
        })
        .join()
        .unwrap();
    }
}
