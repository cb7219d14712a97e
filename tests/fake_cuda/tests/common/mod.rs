//! What the tests share: the built driver (opened once per test binary), a lock that
//! keeps tests from sharing its process-wide state at the same time, and thin wrappers of
//! the raw C calls that return the driver's codes as they are.

#![allow(dead_code)] // Each test binary uses its own part of this module.

use aotc_fake_cuda::{library_path, Api, CuFunction, CuModule, CuResult, Device};
use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

pub const HEADER: &str = ".version 7.8\n.target sm_80\n.address_size 64\n";

pub fn driver_path() -> PathBuf {
    library_path().expect("libaotc_fake_cuda.so is not next to the test binary: cargo build -p aotc-fake-cuda")
}

/// The test's device, with its context current on this thread and the other tests kept
/// out until the returned guard drops.
pub struct Session {
    pub device: &'static Device,
    _serial: MutexGuard<'static, ()>,
}

pub fn session() -> Session {
    static SERIAL: Mutex<()> = Mutex::new(());
    static DEVICE: OnceLock<Device> = OnceLock::new();
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = DEVICE.get_or_init(|| Device::open(&driver_path()).unwrap());
    // SAFETY: the device's retained primary context.
    assert_eq!(unsafe { (device.api().ctx_push)(device.context()) }, 0);
    Session { device, _serial: serial }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: pops the push of session().
        unsafe { (self.device.api().ctx_pop)(std::ptr::null_mut()) };
    }
}

impl Session {
    pub fn api(&self) -> &Api {
        self.device.api()
    }

    /// Loads `ptx`: the module, or the code and the JIT error log.
    pub fn load(&self, ptx: &str, log_bytes: usize) -> Result<CuModule, (CuResult, String)> {
        let text = CString::new(ptx).unwrap();
        let mut log = vec![0xffu8; log_bytes];
        let mut options = [5, 6];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log_bytes as *mut c_void];
        let mut module = std::ptr::null_mut();
        // SAFETY: a NUL-terminated image, two options and their values (a live buffer of
        // the size given).
        let code = unsafe {
            (self.api().module_load_data_ex)(
                &mut module,
                text.as_ptr().cast(),
                2,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if code == 0 {
            assert_eq!((log[0], values[1] as usize), (0, 0), "a successful load leaves an empty log");
            return Ok(module);
        }
        let end = log.iter().position(|&b| b == 0).expect("the log is NUL-terminated");
        assert_eq!(values[1] as usize, end, "the size option comes back as the bytes written");
        Err((code, String::from_utf8(log[..end].to_vec()).unwrap()))
    }

    pub fn function(&self, module: CuModule, name: &str) -> Result<CuFunction, CuResult> {
        let name = CString::new(name).unwrap();
        let mut function = std::ptr::null_mut();
        // SAFETY: an out pointer and a NUL-terminated name.
        match unsafe { (self.api().module_get_function)(&mut function, module, name.as_ptr()) } {
            0 => Ok(function),
            code => Err(code),
        }
    }

    /// Launches `function` on a 1-D grid; `args` point to the argument values.
    pub fn launch(&self, function: CuFunction, grid: u32, block: u32, args: &mut [*mut c_void]) -> CuResult {
        // SAFETY: one pointer per parameter, each to a live value of its type.
        unsafe {
            (self.api().launch_kernel)(
                function,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                std::ptr::null_mut(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    }

    pub fn sync(&self) -> CuResult {
        // SAFETY: the null stream.
        unsafe { (self.api().stream_synchronize)(std::ptr::null_mut()) }
    }
}

/// A pointer to `value`, as `kernelParams` holds them.
pub fn arg<T>(value: &mut T) -> *mut c_void {
    (value as *mut T).cast()
}

/// Runs test `name` of this binary again in a child process with `env` set, and checks
/// that it passes there (for settings the driver reads once, or that must not leak into
/// the other tests).
pub fn rerun_with(name: &str, env: &[(&str, &str)]) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("1 passed"), "{name} with {env:?}:\n{text}");
}
