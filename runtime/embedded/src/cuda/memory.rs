//! Device memory the instance owns, and the context made current around driver calls.

use super::driver::{CuContext, CuDevicePtr, Driver};
use crate::error::Result;

/// Makes `context` current on this thread until dropped (the caller's own current
/// context, e.g. PyTorch's, comes back then).
pub struct Current<'a> {
    driver: &'a Driver,
}

impl<'a> Current<'a> {
    pub fn push(driver: &'a Driver, context: CuContext) -> Result<Current<'a>> {
        // SAFETY: a retained primary context.
        driver.check(unsafe { (driver.ctx_push)(context) }, "cuCtxPushCurrent")?;
        Ok(Current { driver })
    }
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops the context push made current.
        let _ = unsafe { (self.driver.ctx_pop)(&mut popped) };
    }
}

/// One device allocation (none while `len` is 0), freed on drop. The instance's context
/// must be current when it is allocated, grown or dropped.
pub struct DeviceBuf {
    driver: &'static Driver,
    pub ptr: CuDevicePtr,
    pub len: usize,
}

impl DeviceBuf {
    pub fn empty(driver: &'static Driver) -> DeviceBuf {
        DeviceBuf { driver, ptr: 0, len: 0 }
    }

    /// At least `len` bytes (reallocated, contents lost, when smaller); its address.
    pub fn ensure(&mut self, len: usize) -> Result<CuDevicePtr> {
        if len > self.len {
            self.release();
            let mut ptr = 0;
            // SAFETY: an out pointer to one device address.
            self.driver
                .check(unsafe { (self.driver.mem_alloc)(&mut ptr, len) }, &format!("cuMemAlloc of {len} bytes"))?;
            (self.ptr, self.len) = (ptr, len);
        }
        Ok(self.ptr)
    }

    /// A new allocation holding `bytes`.
    pub fn upload(driver: &'static Driver, bytes: &[u8]) -> Result<DeviceBuf> {
        let mut b = DeviceBuf::empty(driver);
        if !bytes.is_empty() {
            let ptr = b.ensure(bytes.len())?;
            // SAFETY: ptr holds bytes.len() device bytes; the source is a live slice.
            driver.check(unsafe { (driver.memcpy_htod)(ptr, bytes.as_ptr().cast(), bytes.len()) }, "cuMemcpyHtoD")?;
        }
        Ok(b)
    }

    fn release(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated by cuMemAlloc and freed once.
            let _ = unsafe { (self.driver.mem_free)(self.ptr) };
            (self.ptr, self.len) = (0, 0);
        }
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        self.release();
    }
}
