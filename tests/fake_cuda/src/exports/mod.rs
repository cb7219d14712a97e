//! The exported C functions: libcuda's names and signatures (the `_v2` entry points where
//! the API has them), each a thin wrapper that runs its body through `guarded`.

mod device;
mod launch;
mod memory;
mod module;

pub use memory::DEVICE_MEMORY_BYTES;

use crate::state::{fail, lock, Outcome, State};
use crate::status::{self, CuResult};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body` on the locked state: `Ok` is CUDA_SUCCESS, a failure its code (the message
/// kept as the last error, prefixed with `call`), a panic CUDA_ERROR_UNKNOWN. Nothing
/// unwinds into the C caller.
fn guarded(call: &str, body: impl FnOnce(&mut State) -> Outcome) -> CuResult {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut state = lock();
        body(&mut state).map_err(|failure| {
            state.last_error = Some(format!("{call}: {}", failure.message));
            failure.code
        })
    }));
    match outcome {
        Ok(Ok(())) => status::SUCCESS,
        Ok(Err(code)) => code,
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            // A panic inside lock() itself cannot happen twice: the state is plain data.
            let _ = catch_unwind(|| lock().last_error = Some(format!("{call}: internal error: {why}")));
            status::UNKNOWN
        }
    }
}

/// Writes `value` through the caller's out pointer `out`, which must not be null.
fn write_out<T>(out: *mut T, value: T, what: &str) -> Outcome {
    if out.is_null() {
        return fail(status::INVALID_VALUE, format!("{what} is a null pointer"));
    }
    // SAFETY: the caller's contract: a non-null out pointer to one writable T (C APIs do
    // not promise alignment beyond T's own, which write_unaligned does not need).
    unsafe { out.write_unaligned(value) };
    Ok(())
}
