//! The C types of the driver API and the `CUresult` codes the fake returns, with the
//! names and texts `cuGetErrorName` / `cuGetErrorString` give for them.

use std::ffi::{c_int, c_void};

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuDevicePtr = u64;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;

pub const SUCCESS: CuResult = 0;
pub const INVALID_VALUE: CuResult = 1;
pub const OUT_OF_MEMORY: CuResult = 2;
pub const NOT_INITIALIZED: CuResult = 3;
pub const NO_DEVICE: CuResult = 100;
pub const INVALID_DEVICE: CuResult = 101;
pub const INVALID_IMAGE: CuResult = 200;
pub const INVALID_CONTEXT: CuResult = 201;
pub const INVALID_PTX: CuResult = 218;
pub const INVALID_HANDLE: CuResult = 400;
pub const NOT_FOUND: CuResult = 500;
pub const LAUNCH_FAILED: CuResult = 719;
pub const UNKNOWN: CuResult = 999;

/// `cuModuleLoadDataEx` options the fake reads (others are accepted and ignored).
pub const JIT_ERROR_LOG_BUFFER: c_int = 5;
pub const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;
/// `cuPointerGetAttribute` attributes the fake answers.
pub const POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
pub const POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
pub const MEMORYTYPE_DEVICE: u32 = 2;

/// Per code: its name and the driver's description, NUL-terminated for C callers.
#[rustfmt::skip] // One row per code.
const DESCRIPTIONS: &[(CuResult, &str, &str)] = &[
    (SUCCESS, "CUDA_SUCCESS\0", "no error\0"),
    (INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE\0", "invalid argument\0"),
    (OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY\0", "out of memory\0"),
    (NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED\0", "initialization error\0"),
    (NO_DEVICE, "CUDA_ERROR_NO_DEVICE\0", "no CUDA-capable device is detected\0"),
    (INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE\0", "invalid device ordinal\0"),
    (INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE\0", "device kernel image is invalid\0"),
    (INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT\0", "invalid device context\0"),
    (INVALID_PTX, "CUDA_ERROR_INVALID_PTX\0", "a PTX JIT compilation failed\0"),
    (INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE\0", "invalid resource handle\0"),
    (NOT_FOUND, "CUDA_ERROR_NOT_FOUND\0", "named symbol not found\0"),
    (LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED\0", "unspecified launch failure\0"),
    (UNKNOWN, "CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
];

/// The name (`CUDA_ERROR_...`) and description of `code`, NUL-terminated.
pub fn describe(code: CuResult) -> Option<(&'static str, &'static str)> {
    DESCRIPTIONS.iter().find(|d| d.0 == code).map(|d| (d.1, d.2))
}
