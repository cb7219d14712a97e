//! The fake driver's exported functions, resolved from the built cdylib with libloading:
//! what tests call to reach the very state a compiled library's driver calls reach.

use crate::status::{CuContext, CuDevice, CuDevicePtr, CuFunction, CuModule, CuResult, CuStream};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::Path;

/// The C functions, named as in libcuda (without the `cu` prefix and `_v2` suffix).
#[allow(clippy::type_complexity)] // The driver API's signatures, spelled out.
pub struct Api {
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
    pub get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub last_error: unsafe extern "C" fn() -> *const c_char,
    pub stats: unsafe extern "C" fn(*mut u64, *mut u64),
}

impl Api {
    /// Loads the cdylib at `path` (never unloaded: its state lives as long as the process,
    /// like a real driver's) and resolves every function.
    pub fn load(path: &Path) -> Result<Api, String> {
        // SAFETY: the fake's initialisers are Rust statics, run lazily; loading has no
        // other effect.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| format!("{}: {e}", path.display()))?;
        let library: &'static libloading::Library = Box::leak(Box::new(library));
        fn get<T: Copy>(library: &'static libloading::Library, name: &str) -> Result<T, String> {
            // SAFETY: each call below names T as the function's C signature, as exported
            // by src/exports; the library is never unloaded, so the pointer stays valid.
            unsafe { library.get::<T>(name.as_bytes()) }.map(|f| *f).map_err(|e| format!("{name}: {e}"))
        }
        Ok(Api {
            init: get(library, "cuInit")?,
            device_get_count: get(library, "cuDeviceGetCount")?,
            device_get: get(library, "cuDeviceGet")?,
            primary_ctx_retain: get(library, "cuDevicePrimaryCtxRetain")?,
            primary_ctx_release: get(library, "cuDevicePrimaryCtxRelease_v2")?,
            ctx_push: get(library, "cuCtxPushCurrent_v2")?,
            ctx_pop: get(library, "cuCtxPopCurrent_v2")?,
            module_load_data_ex: get(library, "cuModuleLoadDataEx")?,
            module_get_function: get(library, "cuModuleGetFunction")?,
            module_unload: get(library, "cuModuleUnload")?,
            mem_alloc: get(library, "cuMemAlloc_v2")?,
            mem_free: get(library, "cuMemFree_v2")?,
            memcpy_htod: get(library, "cuMemcpyHtoD_v2")?,
            memcpy_dtoh: get(library, "cuMemcpyDtoH_v2")?,
            memcpy_dtod_async: get(library, "cuMemcpyDtoDAsync_v2")?,
            memset_d8_async: get(library, "cuMemsetD8Async")?,
            launch_kernel: get(library, "cuLaunchKernel")?,
            stream_synchronize: get(library, "cuStreamSynchronize")?,
            pointer_get_attribute: get(library, "cuPointerGetAttribute")?,
            get_error_name: get(library, "cuGetErrorName")?,
            get_error_string: get(library, "cuGetErrorString")?,
            last_error: get(library, "aotc_fake_cuda_last_error")?,
            stats: get(library, "aotc_fake_cuda_stats")?,
        })
    }
}
