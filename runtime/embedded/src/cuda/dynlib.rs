//! Shared libraries opened at run time (the CUDA driver, cuBLAS): the `.so` never links
//! against them, so a machine without them still loads it and gets a clear error from
//! `aotc_model_create`.

use std::ffi::{c_void, CStr, CString};
use std::sync::Mutex;

/// An open shared library, kept open while this library is loaded (its functions are
/// cached for the process in statics) and closed when it is unloaded ([`close_all`]).
pub struct DynLib {
    handle: *mut c_void,
    pub name: String,
}

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for DynLib {}
// SAFETY: as above; dlsym is thread-safe.
unsafe impl Sync for DynLib {}

/// The handles [`DynLib::open`] gave (as addresses: a raw pointer is not `Send`).
static OPENED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Closes every library this one opened: at unload, with no instance left
/// (`crate::unload`), when nothing can call through the cached functions any more. The
/// driver stays loaded where the process holds it otherwise (PyTorch, another library);
/// what this library added to its count goes.
pub fn close_all() {
    for handle in std::mem::take(&mut *OPENED.lock().unwrap_or_else(|e| e.into_inner())) {
        // SAFETY: a handle dlopen gave, closed once (taken from the list).
        unsafe { libc::dlclose(handle as *mut c_void) };
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next call.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl DynLib {
    /// The first of `names` that opens (`loaded_only`: only one the process has loaded
    /// already, e.g. by PyTorch); the error lists why each failed.
    pub fn open(names: &[String], loaded_only: bool) -> Result<DynLib, String> {
        let mut why = vec![];
        for name in names {
            let Ok(c) = CString::new(name.as_str()) else { continue };
            let flags = libc::RTLD_NOW | libc::RTLD_LOCAL | if loaded_only { libc::RTLD_NOLOAD } else { 0 };
            // SAFETY: a NUL-terminated name; the library's initialisers run (a CUDA
            // library's are its vendor's business).
            let handle = unsafe { libc::dlopen(c.as_ptr(), flags) };
            if !handle.is_null() {
                OPENED.lock().unwrap_or_else(|e| e.into_inner()).push(handle as usize);
                return Ok(DynLib { handle, name: name.clone() });
            }
            why.push(format!("{name}: {}", dlerror()));
        }
        Err(why.join("; "))
    }

    /// The function `name`, as `T` (an `unsafe extern "C" fn` type the caller vouches for).
    pub fn get<T: Copy>(&self, name: &str) -> Result<T, String> {
        assert_eq!(size_of::<T>(), size_of::<*mut c_void>(), "function pointers only");
        let c = CString::new(name).map_err(|_| format!("bad symbol name {name}"))?;
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            return Err(format!("{} has no {name}: {}", self.name, dlerror()));
        }
        // SAFETY: T is a function pointer type of the symbol's signature (the caller's
        // contract), the same size as the address.
        Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }
}
