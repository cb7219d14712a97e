//! Running a library compiled for CUDA: the driver opened at run time, the device's
//! primary context (so device pointers interoperate with PyTorch's), the program's PTX
//! module and its launch plan (`aotc_abi::cuda`).

mod blas;
mod driver;
mod dynlib;
mod instance;
mod memory;

pub use dynlib::close_all as release;
pub use instance::CudaModel;

use crate::error::{err, Result};
use aotc_abi::status;
use driver::{CuContext, CuDevice, Driver};

/// Parses "cuda" / "cuda:N" into the device ordinal; `None` for other strings.
pub fn ordinal(device: &str) -> Option<i32> {
    match device {
        "cuda" => Some(0),
        _ => device.strip_prefix("cuda:")?.parse().ok().filter(|&n: &i32| n >= 0),
    }
}

/// One GPU, its primary context retained while this lives.
pub struct Gpu {
    pub driver: &'static Driver,
    pub device: CuDevice,
    pub ordinal: i32,
    pub context: CuContext,
}

impl Gpu {
    pub fn open(ordinal: i32) -> Result<Gpu> {
        let driver = Driver::get()?;
        let mut count = 0;
        // SAFETY: an out pointer to one int.
        driver.check(unsafe { (driver.device_get_count)(&mut count) }, "cuDeviceGetCount")?;
        if ordinal >= count {
            return err(status::DEVICE, format!("cuda:{ordinal}: this machine has {count} CUDA device(s)"));
        }
        let mut device = 0;
        // SAFETY: an out pointer to one device handle; the ordinal is in range.
        driver.check(unsafe { (driver.device_get)(&mut device, ordinal) }, "cuDeviceGet")?;
        let mut context = std::ptr::null_mut();
        // SAFETY: an out pointer to one context handle; a valid device.
        driver.check(unsafe { (driver.primary_ctx_retain)(&mut context, device) }, "cuDevicePrimaryCtxRetain")?;
        Ok(Gpu { driver, device, ordinal, context })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: retained in open, released once.
        let _ = unsafe { (self.driver.primary_ctx_release)(self.device) };
    }
}
