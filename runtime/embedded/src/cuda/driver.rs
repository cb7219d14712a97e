//! The CUDA driver API, opened at run time from `libcuda.so.1`: the few functions the
//! library needs, each call checked, a failure an `AOTC_ERR_DEVICE` error naming the call
//! and the driver's error name and text.

use super::dynlib::DynLib;
use crate::error::{Error, Result};
use aotc_abi::status;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuDevicePtr = u64;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;

const CUDA_SUCCESS: CuResult = 0;
pub const JIT_ERROR_LOG_BUFFER: c_int = 5;
pub const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;
pub const POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
pub const POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
pub const MEMORYTYPE_DEVICE: c_uint = 2;

/// The driver's functions (the `_v2` entry points where the API has them).
pub struct Driver {
    _lib: DynLib,
    pub init: unsafe extern "C" fn(c_uint) -> CuResult,
    pub device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    pub device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    pub primary_ctx_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    pub primary_ctx_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    pub ctx_push: unsafe extern "C" fn(CuContext) -> CuResult,
    pub ctx_pop: unsafe extern "C" fn(*mut CuContext) -> CuResult,
    pub module_load_data_ex:
        unsafe extern "C" fn(*mut CuModule, *const c_void, c_uint, *mut c_int, *mut *mut c_void) -> CuResult,
    pub module_get_function: unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult,
    pub module_unload: unsafe extern "C" fn(CuModule) -> CuResult,
    pub mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    pub mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    pub memcpy_htod: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult,
    pub memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    pub memcpy_dtod_async: unsafe extern "C" fn(CuDevicePtr, CuDevicePtr, usize, CuStream) -> CuResult,
    pub memset_d8_async: unsafe extern "C" fn(CuDevicePtr, u8, usize, CuStream) -> CuResult,
    #[allow(clippy::type_complexity)]
    pub launch_kernel: unsafe extern "C" fn(
        CuFunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CuStream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    pub stream_synchronize: unsafe extern "C" fn(CuStream) -> CuResult,
    pub pointer_get_attribute: unsafe extern "C" fn(*mut c_void, c_int, CuDevicePtr) -> CuResult,
    error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

fn device_error(message: String) -> Error {
    Error { code: status::DEVICE, message }
}

impl Driver {
    /// The process's driver, opened and initialised once; an error (no driver, no GPU)
    /// is kept and given to every caller.
    pub fn get() -> Result<&'static Driver> {
        static DRIVER: OnceLock<std::result::Result<Driver, String>> = OnceLock::new();
        DRIVER
            .get_or_init(|| {
                let driver = Driver::open()?;
                // SAFETY: cuInit takes flags 0.
                driver.check(unsafe { (driver.init)(0) }, "cuInit").map_err(|e| e.message)?;
                Ok(driver)
            })
            .as_ref()
            .map_err(|m| device_error(m.clone()))
    }

    fn open() -> std::result::Result<Driver, String> {
        // $AOTC_CUDA_DRIVER names another driver library (a test double, an unusual install).
        let names = match std::env::var("AOTC_CUDA_DRIVER") {
            Ok(path) => vec![path],
            Err(_) => vec!["libcuda.so.1".into(), "libcuda.so".into()],
        };
        let lib = DynLib::open(&names, false)
            .map_err(|why| format!("no CUDA driver on this machine (libcuda.so.1 could not be opened: {why}); install the NVIDIA driver, or load the model on \"cpu\" from a library compiled for it"))?;
        Ok(Driver {
            init: lib.get("cuInit")?,
            device_get_count: lib.get("cuDeviceGetCount")?,
            device_get: lib.get("cuDeviceGet")?,
            primary_ctx_retain: lib.get("cuDevicePrimaryCtxRetain")?,
            primary_ctx_release: lib.get("cuDevicePrimaryCtxRelease_v2")?,
            ctx_push: lib.get("cuCtxPushCurrent_v2")?,
            ctx_pop: lib.get("cuCtxPopCurrent_v2")?,
            module_load_data_ex: lib.get("cuModuleLoadDataEx")?,
            module_get_function: lib.get("cuModuleGetFunction")?,
            module_unload: lib.get("cuModuleUnload")?,
            mem_alloc: lib.get("cuMemAlloc_v2")?,
            mem_free: lib.get("cuMemFree_v2")?,
            memcpy_htod: lib.get("cuMemcpyHtoD_v2")?,
            memcpy_dtoh: lib.get("cuMemcpyDtoH_v2")?,
            memcpy_dtod_async: lib.get("cuMemcpyDtoDAsync_v2")?,
            memset_d8_async: lib.get("cuMemsetD8Async")?,
            launch_kernel: lib.get("cuLaunchKernel")?,
            stream_synchronize: lib.get("cuStreamSynchronize")?,
            pointer_get_attribute: lib.get("cuPointerGetAttribute")?,
            error_name: lib.get("cuGetErrorName")?,
            error_string: lib.get("cuGetErrorString")?,
            _lib: lib,
        })
    }

    /// `Ok` for CUDA_SUCCESS, else an error naming `what` and the driver's error.
    pub fn check(&self, rc: CuResult, what: &str) -> Result<()> {
        if rc == CUDA_SUCCESS {
            return Ok(());
        }
        let text = |f: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult| {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: the driver writes a pointer to a static string, or fails.
            let ok = unsafe { f(rc, &mut p) } == CUDA_SUCCESS && !p.is_null();
            // SAFETY: a static NUL-terminated string from the driver.
            if ok {
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            } else {
                format!("error {rc}")
            }
        };
        Err(device_error(format!("{what} failed: {} ({})", text(self.error_name), text(self.error_string))))
    }
}
