//! What the library leaves in the process once its last instance is gone: nothing.
//!
//! Its worker threads are joined with the last instance that used them ([`crate::pool`]),
//! the thread-locals it sets on its callers' threads have no destructor
//! ([`crate::last_error`]), it creates no pthread key, and the memory it keeps for all
//! instances (the parsed [`crate::program`], the table of shared weights mappings in
//! [`crate::mapping`], its holds on the CUDA driver and cuBLAS) is freed when the library
//! is unloaded, by a
//! call registered with `__cxa_atexit` against this library: glibc makes it when
//! `dlclose` unmaps the library (and at process exit).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// Instances alive.
static LIVE: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    /// This library's handle for `__cxa_atexit` (every shared object has its own,
    /// defined by the C runtime's `crtbeginS.o`).
    static __dso_handle: u8;
    fn __cxa_atexit(f: unsafe extern "C" fn(*mut c_void), arg: *mut c_void, dso: *const c_void) -> c_int;
}

/// An instance's share of the library: counted while it lives.
pub struct Live(());

impl Live {
    pub fn new() -> Live {
        LIVE.fetch_add(1, Ordering::AcqRel);
        Live(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Has the library's shared memory freed when it is unloaded (once; idempotent).
pub fn free_at_unload() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: `at_unload` lives in this library, and the registration is against this
        // library's own handle, so glibc calls it before unmapping the code.
        unsafe { __cxa_atexit(at_unload, std::ptr::null_mut(), (&raw const __dso_handle).cast()) };
    });
}

unsafe extern "C" fn at_unload(_: *mut c_void) {
    // At process exit instances may still be alive (and in use on other threads): what
    // they hold stays. When dlclose unloads the library none is (the caller destroyed
    // them all first), and no thread may be inside one of its functions.
    if LIVE.load(Ordering::Acquire) == 0 {
        // SAFETY: no instance holds the program, and references handed out without an
        // instance (aotc_metadata_json) are valid only while the library is loaded.
        unsafe { crate::program::release() };
        crate::mapping::release();
        crate::cuda::release();
    }
}
