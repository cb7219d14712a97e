//! Host tensors in and out of a CUDA model, for [`Model::run`](crate::Model::run): the
//! loader copies them to the device and back through the driver (opened here as the
//! library opens it: `$AOTC_CUDA_DRIVER`, else `libcuda.so.1`), in the device's primary
//! context. The C ABI itself never copies between host and device; this convenience is the
//! loader's, for callers whose tensors live on the host (the CLI, tests, quick use).

use crate::Error;
use aotc_abi::status;
use libloading::Library;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::Arc;

type CuResult = c_int;
type Ctx = *mut c_void;

/// The driver functions the copies need.
pub struct Driver {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    retain: unsafe extern "C" fn(*mut Ctx, c_int) -> CuResult,
    release: unsafe extern "C" fn(c_int) -> CuResult,
    push: unsafe extern "C" fn(Ctx) -> CuResult,
    pop: unsafe extern "C" fn(*mut Ctx) -> CuResult,
    alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    free: unsafe extern "C" fn(u64) -> CuResult,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> CuResult,
    dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult,
    _lib: Library,
}

fn device_error(message: String) -> Error {
    Error::new(status::DEVICE, message)
}

impl Driver {
    pub fn open() -> Result<Driver, Error> {
        let path = std::env::var("AOTC_CUDA_DRIVER").unwrap_or_else(|_| "libcuda.so.1".into());
        // SAFETY: loading the CUDA driver runs its initialisers, as any CUDA program does.
        let lib = unsafe { Library::new(&path) }.map_err(|e| device_error(format!("no CUDA driver ({path}): {e}")))?;
        fn get<T: Copy>(lib: &Library, name: &str) -> Result<T, Error> {
            // SAFETY: T is the driver API's type for `name`.
            unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s) }
                .map_err(|e| device_error(format!("the CUDA driver lacks {name}: {e}")))
        }
        let d = Driver {
            init: get(&lib, "cuInit")?,
            device_get: get(&lib, "cuDeviceGet")?,
            retain: get(&lib, "cuDevicePrimaryCtxRetain")?,
            release: get(&lib, "cuDevicePrimaryCtxRelease_v2")?,
            push: get(&lib, "cuCtxPushCurrent_v2")?,
            pop: get(&lib, "cuCtxPopCurrent_v2")?,
            alloc: get(&lib, "cuMemAlloc_v2")?,
            free: get(&lib, "cuMemFree_v2")?,
            htod: get(&lib, "cuMemcpyHtoD_v2")?,
            dtoh: get(&lib, "cuMemcpyDtoH_v2")?,
            _lib: lib,
        };
        // SAFETY: flags 0.
        d.check(unsafe { (d.init)(0) }, "cuInit")?;
        Ok(d)
    }

    fn check(&self, rc: CuResult, what: &str) -> Result<(), Error> {
        if rc == 0 {
            Ok(())
        } else {
            Err(device_error(format!("{what} failed: CUDA error {rc}")))
        }
    }
}

/// Device memory of one GPU for one call's copies, freed on drop.
pub struct Staging {
    driver: Arc<Driver>,
    device: c_int,
    context: Ctx,
    allocations: Vec<u64>,
}

impl Staging {
    pub fn new(driver: Arc<Driver>, ordinal: i32) -> Result<Staging, Error> {
        let mut device = 0;
        // SAFETY: out pointers to one value each.
        driver.check(unsafe { (driver.device_get)(&mut device, ordinal) }, "cuDeviceGet")?;
        let mut context = std::ptr::null_mut();
        driver.check(unsafe { (driver.retain)(&mut context, device) }, "cuDevicePrimaryCtxRetain")?;
        Ok(Staging { driver, device, context, allocations: vec![] })
    }

    /// Runs `f` with the device's context current.
    fn current<T>(&self, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        // SAFETY: a retained context, popped below.
        self.driver.check(unsafe { (self.driver.push)(self.context) }, "cuCtxPushCurrent")?;
        let out = f();
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops what was pushed.
        unsafe { (self.driver.pop)(&mut popped) };
        out
    }

    /// A device copy of `bytes` (an allocation of at least one byte); its address.
    pub fn upload(&mut self, bytes: &[u8]) -> Result<u64, Error> {
        let d = self.driver.clone();
        let ptr = self.current(|| {
            let mut ptr = 0;
            // SAFETY: an out pointer; then a copy of bytes.len() bytes into the new allocation.
            d.check(unsafe { (d.alloc)(&mut ptr, bytes.len().max(1)) }, "cuMemAlloc")?;
            if !bytes.is_empty() {
                d.check(unsafe { (d.htod)(ptr, bytes.as_ptr().cast(), bytes.len()) }, "cuMemcpyHtoD")?;
            }
            Ok(ptr)
        })?;
        self.allocations.push(ptr);
        Ok(ptr)
    }

    /// `len` bytes at device address `src`.
    pub fn download(&self, src: u64, len: usize) -> Result<Vec<u8>, Error> {
        let d = &self.driver;
        let mut out = vec![0u8; len];
        if len > 0 {
            // SAFETY: `src` holds len bytes on the device (the caller's contract), `out` len.
            self.current(|| d.check(unsafe { (d.dtoh)(out.as_mut_ptr().cast(), src, len) }, "cuMemcpyDtoH"))?;
        }
        Ok(out)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let d = self.driver.clone();
        let allocations = std::mem::take(&mut self.allocations);
        let _ = self.current(|| {
            for a in allocations {
                // SAFETY: allocated by upload, freed once.
                unsafe { (d.free)(a) };
            }
            Ok(())
        });
        // SAFETY: retained in new.
        unsafe { (d.release)(self.device) };
    }
}
