//! A safe handle on the fake driver for tests: device 0's primary context retained, and
//! memory allocated, filled, read and freed through the C functions, so the memory is the
//! same a compiled library opening the same cdylib sees.

use crate::api::Api;
use crate::status::{self, CuContext, CuResult};
use aotc_ptx_interp::Element;
use std::ffi::CStr;
use std::fmt;
use std::path::Path;

/// A failed driver call: which, its code and name, and the driver's last error message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaError {
    pub call: &'static str,
    pub code: CuResult,
    pub message: String,
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed with {}: {}", self.call, self.code, self.message)
    }
}

impl std::error::Error for CudaError {}

/// What the fake has run since the process loaded it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub launches: u64,
    pub instructions: u64,
}

/// Device 0 of the fake driver at a path. Every method makes the device's context current
/// on the calling thread for the call's duration only.
pub struct Device {
    api: Api,
    /// The primary context token (a number: the handle is opaque and never dereferenced).
    context: usize,
}

impl Device {
    /// Loads the fake driver at `path`, initialises it and retains device 0's primary
    /// context. Pass the path the compiled library will open (`$AOTC_CUDA_DRIVER`): the
    /// dynamic loader shares one copy, and so one state, only for the same file.
    pub fn open(path: &Path) -> Result<Device, CudaError> {
        let api =
            Api::load(path).map_err(|message| CudaError { call: "dlopen", code: status::NOT_INITIALIZED, message })?;
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: cuInit takes flags 0; the context out pointer is a live local.
        unsafe {
            check(&api, (api.init)(0), "cuInit")?;
            check(&api, (api.primary_ctx_retain)(&mut context, 0), "cuDevicePrimaryCtxRetain")?;
        }
        Ok(Device { context: context as usize, api })
    }

    /// The driver's C functions, for what this handle does not wrap (modules, launches).
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The primary context, for `cuCtxPushCurrent_v2` around raw calls.
    pub fn context(&self) -> CuContext {
        self.context as CuContext
    }

    /// A zeroed allocation of `bytes` (> 0) bytes: its device address.
    pub fn alloc(&self, bytes: usize) -> Result<u64, CudaError> {
        let mut address = 0;
        // SAFETY: an out pointer to one device address.
        self.current(|api| unsafe { check(api, (api.mem_alloc)(&mut address, bytes), "cuMemAlloc_v2") })?;
        Ok(address)
    }

    /// A new allocation holding `values` (little-endian, as on the device): its address.
    pub fn upload<T: Element>(&self, values: &[T]) -> Result<u64, CudaError> {
        let mut bytes = Vec::with_capacity(values.len() * T::BYTES);
        for &value in values {
            value.append_le(&mut bytes);
        }
        let address = self.alloc(bytes.len())?;
        // SAFETY: the allocation holds bytes.len() bytes; the source is a live vector.
        self.current(|api| unsafe {
            check(api, (api.memcpy_htod)(address, bytes.as_ptr().cast(), bytes.len()), "cuMemcpyHtoD_v2")
        })?;
        Ok(address)
    }

    /// `count` values of type `T` at device address `address`.
    pub fn download<T: Element>(&self, address: u64, count: usize) -> Result<Vec<T>, CudaError> {
        let mut bytes = vec![0u8; count * T::BYTES];
        // SAFETY: the destination is a live vector of the length given; the driver checks
        // the device range.
        self.current(|api| unsafe {
            check(api, (api.memcpy_dtoh)(bytes.as_mut_ptr().cast(), address, bytes.len()), "cuMemcpyDtoH_v2")
        })?;
        Ok(bytes.chunks_exact(T::BYTES).map(T::from_le).collect())
    }

    pub fn free(&self, address: u64) -> Result<(), CudaError> {
        // SAFETY: a plain value argument; the driver checks it.
        self.current(|api| unsafe { check(api, (api.mem_free)(address), "cuMemFree_v2") })
    }

    /// The message of the last failed driver call in the process (any thread's).
    pub fn last_error(&self) -> Option<String> {
        last_error(&self.api)
    }

    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        // SAFETY: two out pointers to live u64s.
        unsafe { (self.api.stats)(&mut stats.launches, &mut stats.instructions) };
        stats
    }

    /// Runs `call` with the context pushed on this thread, popping it after.
    fn current<T>(&self, call: impl FnOnce(&Api) -> Result<T, CudaError>) -> Result<T, CudaError> {
        // SAFETY: a context this handle retained.
        unsafe { check(&self.api, (self.api.ctx_push)(self.context()), "cuCtxPushCurrent_v2")? };
        let result = call(&self.api);
        // SAFETY: pops what was pushed above; the popped handle is not needed.
        unsafe { check(&self.api, (self.api.ctx_pop)(std::ptr::null_mut()), "cuCtxPopCurrent_v2")? };
        result
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: retained in open, released once.
        let _ = unsafe { (self.api.primary_ctx_release)(0) };
    }
}

fn last_error(api: &Api) -> Option<String> {
    // SAFETY: null, or text valid until this thread's next call, copied at once.
    let text = unsafe { (api.last_error)() };
    // SAFETY: non-null: a NUL-terminated string.
    (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned())
}

/// `Ok` for CUDA_SUCCESS; otherwise the error, with the driver's last message.
fn check(api: &Api, code: CuResult, call: &'static str) -> Result<(), CudaError> {
    if code == status::SUCCESS {
        return Ok(());
    }
    Err(CudaError { call, code, message: last_error(api).unwrap_or_default() })
}
