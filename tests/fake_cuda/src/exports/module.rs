//! Modules: PTX parsed by the interpreter (its subset, SUBSET.md, is what "compiles"), a
//! parse error written into the JIT error log as a real driver writes ptxas's.

use super::{guarded, write_out};
use crate::state::{fail, Failure, Function, Outcome};
use crate::status::{self, CuFunction, CuModule, CuResult};
use aotc_ptx_interp::Module;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// The caller's JIT error log: a buffer and its size in bytes, and where the size goes
/// back (the option value, which the driver overwrites with the bytes it filled).
struct ErrorLog {
    buffer: *mut u8,
    size: usize,
    size_slot: *mut *mut c_void,
}

impl ErrorLog {
    /// Finds options 5 and 6 among `count` (option, value) pairs; others are ignored.
    fn from_options(count: c_uint, options: *const c_int, values: *mut *mut c_void) -> Outcome<Option<ErrorLog>> {
        if count == 0 {
            return Ok(None);
        }
        if options.is_null() || values.is_null() {
            return fail(status::INVALID_VALUE, format!("{count} JIT options with a null array"));
        }
        let (mut buffer, mut size) = (None, None);
        for i in 0..count as usize {
            // SAFETY: the caller's contract: `count` options and as many values.
            let (option, slot) = unsafe { (options.add(i).read_unaligned(), values.add(i)) };
            // SAFETY: as above; option values are pointer-sized.
            let value = unsafe { slot.read_unaligned() };
            match option {
                status::JIT_ERROR_LOG_BUFFER => buffer = Some(value.cast::<u8>()),
                status::JIT_ERROR_LOG_BUFFER_SIZE_BYTES => size = Some((value as usize, slot)),
                _ => {}
            }
        }
        Ok(match (buffer, size) {
            (Some(buffer), Some((size, size_slot))) if !buffer.is_null() && size > 0 => {
                Some(ErrorLog { buffer, size, size_slot })
            }
            _ => None,
        })
    }

    /// Writes `text` (cut to the buffer, NUL-terminated) and its length back.
    fn write(&self, text: &str) {
        let len = text.len().min(self.size - 1);
        // SAFETY: the caller gave a buffer of `size` writable bytes; len + 1 <= size; the
        // size slot is the option value the caller passed (a writable pointer-sized cell).
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), self.buffer, len);
            self.buffer.add(len).write(0);
            self.size_slot.write_unaligned(len as *mut c_void);
        }
    }
}

#[no_mangle]
pub extern "C" fn cuModuleLoadDataEx(
    out: *mut CuModule,
    image: *const c_void,
    option_count: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CuResult {
    guarded("cuModuleLoadDataEx", |state| {
        state.current_device()?;
        if image.is_null() || out.is_null() {
            return fail(status::INVALID_VALUE, "a null image or out pointer");
        }
        let log = ErrorLog::from_options(option_count, options, values)?;
        // SAFETY: the caller's contract: a PTX image is NUL-terminated text.
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
        let Ok(ptx) = text.to_str() else {
            return fail(status::INVALID_IMAGE, "the image is not PTX text (not UTF-8)");
        };
        let module = Module::parse(ptx).map_err(|e| {
            let message = e.to_string();
            if let Some(log) = &log {
                log.write(&message);
            }
            Failure { code: status::INVALID_PTX, message }
        })?;
        if let Some(log) = &log {
            log.write("");
        }
        let handle = state.new_handle();
        state.modules.insert(handle, module);
        write_out(out, handle as CuModule, "out")
    })
}

#[no_mangle]
pub extern "C" fn cuModuleGetFunction(out: *mut CuFunction, module: CuModule, name: *const c_char) -> CuResult {
    guarded("cuModuleGetFunction", |state| {
        state.current_device()?;
        if name.is_null() {
            return fail(status::INVALID_VALUE, "a null name");
        }
        // SAFETY: the caller's contract: a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let Some(loaded) = state.modules.get(&(module as usize)) else {
            return fail(status::INVALID_HANDLE, format!("{module:p} is not a loaded module"));
        };
        if !loaded.entries().any(|entry| entry == name) {
            return fail(status::NOT_FOUND, format!("the module has no entry `{name}`"));
        }
        let handle = state.new_handle();
        state.functions.insert(handle, Function { module: module as usize, entry: name });
        write_out(out, handle as CuFunction, "out")
    })
}

/// Its functions' handles become invalid with it.
#[no_mangle]
pub extern "C" fn cuModuleUnload(module: CuModule) -> CuResult {
    guarded("cuModuleUnload", |state| {
        state.current_device()?;
        let module = module as usize;
        if state.modules.remove(&module).is_none() {
            return fail(status::INVALID_HANDLE, format!("{module:#x} is not a loaded module"));
        }
        state.functions.retain(|_, f| f.module != module);
        Ok(())
    })
}
