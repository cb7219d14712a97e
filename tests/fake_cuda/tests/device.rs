//! Devices, primary contexts and error names.

mod common;

use aotc_fake_cuda::{Api, Device};
use common::{driver_path, rerun_with, session};
use std::ffi::{c_char, CStr};

fn text(f: unsafe extern "C" fn(i32, *mut *const c_char) -> i32, code: i32) -> (i32, Option<String>) {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: an out pointer to one string pointer.
    let rc = unsafe { f(code, &mut p) };
    // SAFETY: non-null: a static NUL-terminated string.
    (rc, (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()))
}

#[test]
fn error_names_and_strings() {
    let api = Api::load(&driver_path()).unwrap();
    assert_eq!(text(api.get_error_name, 719), (0, Some("CUDA_ERROR_LAUNCH_FAILED".into())));
    assert_eq!(text(api.get_error_string, 719), (0, Some("unspecified launch failure".into())));
    assert_eq!(text(api.get_error_name, 218), (0, Some("CUDA_ERROR_INVALID_PTX".into())));
    assert_eq!(text(api.get_error_name, 0), (0, Some("CUDA_SUCCESS".into())));
    assert_eq!(text(api.get_error_name, 12345), (1, None));
}

#[test]
fn one_device_and_its_primary_context() {
    let s = session();
    let api = s.api();
    let (mut count, mut device, mut context) = (0, -1, std::ptr::null_mut());
    // SAFETY: out pointers to live locals.
    unsafe {
        assert_eq!((api.device_get_count)(&mut count), 0);
        assert_eq!((api.device_get)(&mut device, 0), 0);
        assert_eq!((api.device_get)(&mut device, 1), 101);
        assert_eq!((api.init)(1), 1, "flags must be 0");
        assert_eq!((api.primary_ctx_retain)(&mut context, 0), 0);
        assert_eq!(context, s.device.context(), "the primary context is one token");
        assert_eq!((api.primary_ctx_release)(0), 0);
        assert_eq!((api.ctx_push)(std::ptr::null_mut()), 201);
    }
    assert_eq!((count, device), (1, 0));
}

#[test]
fn no_device() {
    if std::env::var_os("AOTC_FAKE_CUDA_DEVICES").is_none() {
        return rerun_with("no_device", &[("AOTC_FAKE_CUDA_DEVICES", "0")]);
    }
    let api = Api::load(&driver_path()).unwrap();
    let mut count = -1;
    // SAFETY: cuInit takes flags 0; an out pointer to one int.
    unsafe {
        assert_eq!((api.init)(0), 100, "as the real driver on a machine without a GPU");
        assert_eq!((api.device_get_count)(&mut count), 3, "not initialised");
    }
    let error = Device::open(&driver_path()).err().unwrap();
    assert_eq!((error.call, error.code), ("cuInit", 100));
}

#[test]
fn allocations_know_their_device() {
    if std::env::var_os("AOTC_FAKE_CUDA_DEVICES").is_none() {
        return rerun_with("allocations_know_their_device", &[("AOTC_FAKE_CUDA_DEVICES", "2")]);
    }
    let s = session();
    let api = s.api();
    let (mut count, mut context, mut address, mut ordinal) = (0, std::ptr::null_mut(), 0u64, -1i32);
    // SAFETY: out pointers to live locals; device 1's context is pushed over device 0's
    // and popped again.
    unsafe {
        assert_eq!((api.device_get_count)(&mut count), 0);
        assert_eq!((api.primary_ctx_retain)(&mut context, 1), 0);
        assert_ne!(context, s.device.context());
        assert_eq!((api.ctx_push)(context), 0);
        assert_eq!((api.mem_alloc)(&mut address, 8), 0);
        assert_eq!((api.pointer_get_attribute)((&mut ordinal as *mut i32).cast(), 9, address), 0);
        assert_eq!((api.mem_free)(address), 0);
        let mut popped = std::ptr::null_mut();
        assert_eq!((api.ctx_pop)(&mut popped), 0);
        assert_eq!(popped, context);
        assert_eq!((api.primary_ctx_release)(1), 0);
        assert_eq!((api.primary_ctx_release)(1), 201, "released more often than retained");
    }
    assert_eq!((count, ordinal), (2, 1));
}
