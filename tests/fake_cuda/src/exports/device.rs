//! Initialisation, devices, primary contexts, error names, and the fake's own helpers.

use super::{guarded, write_out};
use crate::state::{fail, lock};
use crate::status::{self, CuContext, CuDevice, CuResult};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, CString};
use std::panic::catch_unwind;

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> CuResult {
    guarded("cuInit", |state| {
        if flags != 0 {
            return fail(status::INVALID_VALUE, format!("flags {flags} (must be 0)"));
        }
        state.init()
    })
}

#[no_mangle]
pub extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    guarded("cuDeviceGetCount", |state| write_out(count, state.device_count()?, "count"))
}

#[no_mangle]
pub extern "C" fn cuDeviceGet(device: *mut CuDevice, ordinal: c_int) -> CuResult {
    guarded("cuDeviceGet", |state| {
        state.check_device(ordinal)?;
        write_out(device, ordinal, "device")
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRetain(context: *mut CuContext, device: CuDevice) -> CuResult {
    guarded("cuDevicePrimaryCtxRetain", |state| {
        if context.is_null() {
            return fail(status::INVALID_VALUE, "context is a null pointer");
        }
        let token = state.retain_primary(device)?;
        write_out(context, token, "context")
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: CuDevice) -> CuResult {
    guarded("cuDevicePrimaryCtxRelease_v2", |state| state.release_primary(device))
}

#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(context: CuContext) -> CuResult {
    guarded("cuCtxPushCurrent_v2", |state| state.push_current(context))
}

/// `popped` may be null: the context is popped all the same.
#[no_mangle]
pub extern "C" fn cuCtxPopCurrent_v2(popped: *mut CuContext) -> CuResult {
    guarded("cuCtxPopCurrent_v2", |state| {
        let context = state.pop_current()?;
        if !popped.is_null() {
            write_out(popped, context, "popped")?;
        }
        Ok(())
    })
}

fn error_text(
    error: CuResult,
    out: *mut *const c_char,
    pick: fn((&'static str, &'static str)) -> &'static str,
) -> CuResult {
    match status::describe(error) {
        Some(texts) => {
            // Static NUL-terminated text, valid for the process.
            let text = pick(texts).as_ptr().cast::<c_char>();
            match write_out(out, text, "string") {
                Ok(()) => status::SUCCESS,
                Err(failure) => failure.code,
            }
        }
        None => {
            let _ = write_out(out, std::ptr::null(), "string");
            status::INVALID_VALUE
        }
    }
}

/// Works before `cuInit`, as the real one does.
#[no_mangle]
pub extern "C" fn cuGetErrorName(error: CuResult, name: *mut *const c_char) -> CuResult {
    catch_unwind(|| error_text(error, name, |(n, _)| n)).unwrap_or(status::UNKNOWN)
}

#[no_mangle]
pub extern "C" fn cuGetErrorString(error: CuResult, text: *mut *const c_char) -> CuResult {
    catch_unwind(|| error_text(error, text, |(_, s)| s)).unwrap_or(status::UNKNOWN)
}

thread_local! {
    /// The copy `aotc_fake_cuda_last_error` hands out, alive until its next call here.
    static LAST_ERROR: RefCell<CString> = RefCell::default();
}

/// The message of the last driver call that failed in this process (a failed launch's
/// message names the kernel, line, instruction, thread and address), or null if none has.
/// The text stays valid until the calling thread calls this again.
#[no_mangle]
pub extern "C" fn aotc_fake_cuda_last_error() -> *const c_char {
    catch_unwind(|| {
        let Some(message) = lock().last_error.clone() else {
            return std::ptr::null();
        };
        let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
        LAST_ERROR.with(|copy| {
            *copy.borrow_mut() = text;
            copy.borrow().as_ptr()
        })
    })
    .unwrap_or(std::ptr::null())
}

/// Launches made (failed ones included) and instructions executed (by launches that
/// completed; summed over threads) since the process loaded the fake. Null pointers are
/// skipped.
#[no_mangle]
pub extern "C" fn aotc_fake_cuda_stats(launches: *mut u64, instructions: *mut u64) {
    let _ = catch_unwind(|| {
        let state = lock();
        let _ = write_out(launches, state.launches, "launches");
        let _ = write_out(instructions, state.instructions, "instructions");
    });
}
