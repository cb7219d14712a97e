//! The CUDA driver as aotc's hosts use it (the library itself opens its own handle): the
//! loader's copies of host tensors for [`Model::run`](crate::Model::run) on a CUDA
//! instance ([`Staging`]), and the Python binding's output memory. Opened as the compiled
//! library opens it, `$AOTC_CUDA_DRIVER` else `libcuda.so.1`, so that both share one
//! driver and its device memory, and used in the device's primary context, as the library
//! and PyTorch do. The C ABI itself never copies between host and device; these copies
//! are the hosts' conveniences.

use crate::Error;
use aotc_abi::status;
use libloading::Library;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::Arc;

type CuResult = c_int;
type Ctx = *mut c_void;

/// The driver functions aotc's hosts call.
struct Driver {
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    retain: unsafe extern "C" fn(*mut Ctx, c_int) -> CuResult,
    release: unsafe extern "C" fn(c_int) -> CuResult,
    push: unsafe extern "C" fn(Ctx) -> CuResult,
    pop: unsafe extern "C" fn(*mut Ctx) -> CuResult,
    alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    free: unsafe extern "C" fn(u64) -> CuResult,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> CuResult,
    dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult,
    dtod_async: unsafe extern "C" fn(u64, u64, usize, *mut c_void) -> CuResult,
    synchronize: unsafe extern "C" fn(*mut c_void) -> CuResult,
    // Dropped last: the functions above point into it.
    _lib: Library,
}

fn device_error(message: String) -> Error {
    Error::new(status::DEVICE, message)
}

fn check(rc: CuResult, what: &str) -> Result<(), Error> {
    if rc == 0 {
        Ok(())
    } else {
        Err(device_error(format!("{what} failed: CUDA error {rc}")))
    }
}

impl Driver {
    fn open() -> Result<Driver, Error> {
        let path = std::env::var("AOTC_CUDA_DRIVER").unwrap_or_else(|_| "libcuda.so.1".into());
        // SAFETY: loading the CUDA driver runs its initialisers, as any CUDA program does
        // (the library of the model has loaded it already: this returns the same copy).
        let lib = unsafe { Library::new(&path) }.map_err(|e| device_error(format!("no CUDA driver ({path}): {e}")))?;
        fn get<T: Copy>(lib: &Library, name: &str) -> Result<T, Error> {
            // SAFETY: T is the driver API's function type for `name`.
            unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s) }
                .map_err(|e| device_error(format!("the CUDA driver lacks {name}: {e}")))
        }
        let init: unsafe extern "C" fn(c_uint) -> CuResult = get(&lib, "cuInit")?;
        // SAFETY: flags 0; initialising an initialised driver is a no-op.
        check(unsafe { init(0) }, "cuInit")?;
        Ok(Driver {
            device_get: get(&lib, "cuDeviceGet")?,
            retain: get(&lib, "cuDevicePrimaryCtxRetain")?,
            release: get(&lib, "cuDevicePrimaryCtxRelease_v2")?,
            push: get(&lib, "cuCtxPushCurrent_v2")?,
            pop: get(&lib, "cuCtxPopCurrent_v2")?,
            alloc: get(&lib, "cuMemAlloc_v2")?,
            free: get(&lib, "cuMemFree_v2")?,
            htod: get(&lib, "cuMemcpyHtoD_v2")?,
            dtoh: get(&lib, "cuMemcpyDtoH_v2")?,
            dtod_async: get(&lib, "cuMemcpyDtoDAsync_v2")?,
            synchronize: get(&lib, "cuStreamSynchronize")?,
            _lib: lib,
        })
    }
}

/// One GPU: the driver and the device's primary context, retained while this lives.
pub struct Gpu {
    driver: Driver,
    device: c_int,
    context: Ctx,
    pub ordinal: i32,
}

// SAFETY: a primary context is a process-wide handle the driver lets any thread make
// current; the driver's functions are thread-safe. Every use pushes the context on the
// calling thread and pops it before returning.
unsafe impl Send for Gpu {}
// SAFETY: as above; no method mutates the Gpu itself.
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Opens the driver and retains device `ordinal`'s primary context.
    pub fn open(ordinal: i32) -> Result<Gpu, Error> {
        let driver = Driver::open()?;
        let mut device = 0;
        // SAFETY: an out pointer to one device handle.
        check(unsafe { (driver.device_get)(&mut device, ordinal) }, &format!("cuDeviceGet({ordinal})"))?;
        let mut context = std::ptr::null_mut();
        // SAFETY: an out pointer to one context handle; a valid device.
        check(unsafe { (driver.retain)(&mut context, device) }, "cuDevicePrimaryCtxRetain")?;
        Ok(Gpu { driver, device, context, ordinal })
    }

    /// Runs `f` with the device's primary context current on this thread.
    fn current<T>(&self, f: impl FnOnce(&Driver) -> Result<T, Error>) -> Result<T, Error> {
        // SAFETY: a context retained in open, popped below.
        check(unsafe { (self.driver.push)(self.context) }, "cuCtxPushCurrent")?;
        let out = f(&self.driver);
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops what was pushed (the thread's own current context comes back).
        unsafe { (self.driver.pop)(&mut popped) };
        out
    }

    /// A new allocation of `bytes` bytes (at least one: each has an address of its own).
    pub fn alloc(&self, bytes: usize) -> Result<u64, Error> {
        self.current(|d| {
            let mut ptr = 0;
            // SAFETY: an out pointer to one device address.
            check(unsafe { (d.alloc)(&mut ptr, bytes.max(1)) }, &format!("cuMemAlloc of {bytes} bytes"))?;
            Ok(ptr)
        })
    }

    /// Frees an allocation of [`Gpu::alloc`].
    ///
    /// # Safety
    /// `ptr` came from `alloc` of this Gpu, is freed once, and nothing uses it after.
    pub unsafe fn free(&self, ptr: u64) {
        // A failure leaves nothing to do: the memory is the driver's again or was never ours.
        let _ = self.current(|d| {
            // SAFETY: the caller's contract.
            check(unsafe { (d.free)(ptr) }, "cuMemFree")
        });
    }

    /// Copies `src` to device address `dst`.
    ///
    /// # Safety
    /// `dst` holds at least `src.len()` bytes of this device's memory, which no one else
    /// uses meanwhile.
    pub unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<(), Error> {
        if src.is_empty() {
            return Ok(());
        }
        self.current(|d| {
            // SAFETY: the caller's contract for dst; src is a live slice of as many bytes.
            check(unsafe { (d.htod)(dst, src.as_ptr().cast(), src.len()) }, "cuMemcpyHtoD")
        })
    }

    /// Copies `dst.len()` bytes from device address `src` to host memory.
    ///
    /// # Safety
    /// `src` holds at least `dst.len()` bytes of this device's memory.
    pub unsafe fn download(&self, src: u64, dst: &mut [u8]) -> Result<(), Error> {
        if dst.is_empty() {
            return Ok(());
        }
        self.current(|d| {
            // SAFETY: the caller's contract for src; dst is a live slice of as many bytes.
            check(unsafe { (d.dtoh)(dst.as_mut_ptr().cast(), src, dst.len()) }, "cuMemcpyDtoH")
        })
    }

    /// Copies `bytes` bytes from device address `src` to `dst`, finished when this returns.
    ///
    /// # Safety
    /// Both hold at least `bytes` bytes of this device's memory and do not overlap; no
    /// one else writes `dst` meanwhile.
    pub unsafe fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), Error> {
        if bytes == 0 {
            return Ok(());
        }
        self.current(|d| {
            // SAFETY: the caller's contract; the legacy default stream (null), waited for.
            check(unsafe { (d.dtod_async)(dst, src, bytes, std::ptr::null_mut()) }, "cuMemcpyDtoDAsync")?;
            // SAFETY: as above.
            check(unsafe { (d.synchronize)(std::ptr::null_mut()) }, "cuStreamSynchronize")
        })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: retained in open, released once.
        unsafe { (self.driver.release)(self.device) };
    }
}

/// Device memory for one call's copies of host tensors, freed on drop.
pub struct Staging {
    gpu: Arc<Gpu>,
    allocations: Vec<u64>,
}

impl Staging {
    pub fn new(gpu: Arc<Gpu>) -> Staging {
        Staging { gpu, allocations: vec![] }
    }

    /// A device copy of `bytes` (an allocation of at least one byte); its address.
    pub fn upload(&mut self, bytes: &[u8]) -> Result<u64, Error> {
        let ptr = self.gpu.alloc(bytes.len())?;
        self.allocations.push(ptr);
        // SAFETY: a new allocation of at least bytes.len() bytes, used by no one else yet.
        unsafe { self.gpu.upload(ptr, bytes) }?;
        Ok(ptr)
    }

    /// `len` bytes at device address `src`.
    ///
    /// # Safety
    /// `src` holds at least `len` bytes of this device's memory.
    pub unsafe fn download(&self, src: u64, len: usize) -> Result<Vec<u8>, Error> {
        let mut out = vec![0u8; len];
        // SAFETY: the caller's contract.
        unsafe { self.gpu.download(src, &mut out) }?;
        Ok(out)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        for ptr in std::mem::take(&mut self.allocations) {
            // SAFETY: allocated by upload, freed once, nothing uses it after the call.
            unsafe { self.gpu.free(ptr) };
        }
    }
}
