//! Device memory through the C API: pointer attributes, frees, checked copies, limits.

mod common;

use aotc_fake_cuda::DEVICE_MEMORY_BYTES;
use common::{session, Session};
use std::ffi::c_void;

/// (code, memory type) and (code, device ordinal) of `address`.
fn attributes(s: &Session, address: u64) -> ((i32, u32), (i32, i32)) {
    let (mut kind, mut ordinal) = (0u32, -1i32);
    // SAFETY: out pointers to one u32 and one i32, as the attributes write.
    unsafe {
        let kind_code = (s.api().pointer_get_attribute)((&mut kind as *mut u32).cast(), 2, address);
        let ordinal_code = (s.api().pointer_get_attribute)((&mut ordinal as *mut i32).cast(), 9, address);
        ((kind_code, kind), (ordinal_code, ordinal))
    }
}

#[test]
fn memory_type_is_device_inside_allocations_only() {
    let s = session();
    let address = s.device.alloc(100).unwrap();
    for inside in [address, address + 99] {
        assert_eq!(attributes(&s, inside), ((0, 2), (0, 0)));
    }
    let host = Box::new(0u64);
    for outside in [address + 100, address - 1, &*host as *const u64 as u64, 0] {
        assert_eq!(attributes(&s, outside), ((1, 0), (1, -1)), "{outside:#x}");
    }
    let mut value = 0u64;
    // SAFETY: an out pointer big enough for any attribute.
    assert_eq!(unsafe { (s.api().pointer_get_attribute)((&mut value as *mut u64).cast(), 1, address) }, 1);
    s.device.free(address).unwrap();
    assert_eq!(attributes(&s, address).0, (1, 0));
}

#[test]
fn double_free_and_foreign_addresses_are_invalid_values() {
    let s = session();
    let address = s.device.alloc(64).unwrap();
    let interior = s.device.free(address + 8).unwrap_err();
    assert_eq!(interior.code, 1);
    assert!(interior.message.contains(&format!("{:#x} is not the start of a live allocation", address + 8)));
    s.device.free(address).unwrap();
    assert_eq!(s.device.free(address).unwrap_err().code, 1);
    assert_eq!(s.device.free(0).unwrap_err().code, 1);
    assert_eq!(s.device.download::<u8>(address, 1).unwrap_err().code, 1, "a read after free");
    let next = s.device.alloc(64).unwrap();
    assert!(next > address, "a freed address came back");
    s.device.free(next).unwrap();
}

#[test]
fn copies_and_sets_are_bounds_checked() {
    let s = session();
    let api = s.api();
    let a = s.device.upload(&[1u32, 2, 3, 4]).unwrap();
    let b = s.device.alloc(16).unwrap();
    let null = std::ptr::null_mut();
    // SAFETY: device addresses only, checked by the driver.
    unsafe {
        assert_eq!((api.memcpy_dtod_async)(b, a + 4, 12, null), 0);
        assert_eq!((api.memset_d8_async)(b + 12, 0xab, 4, null), 0);
        assert_eq!((api.memcpy_dtod_async)(b, a + 8, 12, null), 1, "source past the end");
        assert_eq!((api.memset_d8_async)(b + 12, 0, 5, null), 1);
        assert_eq!((api.memset_d8_async)(b + 4096, 0, 0, null), 0, "nothing to set");
        assert_eq!((api.memset_d8_async)(b, 0, 1 << 62, null), 1, "a wild count");
    }
    assert_eq!(s.device.download::<u32>(b, 4).unwrap(), vec![2, 3, 4, 0xabab_abab]);
    let bytes = [0u8; 17];
    // SAFETY: a live host buffer of 17 bytes.
    assert_eq!(unsafe { (api.memcpy_htod)(b, bytes.as_ptr().cast::<c_void>(), 17) }, 1);
    assert!(s.device.last_error().unwrap().contains("17 bytes at"));
    assert_eq!(s.device.download::<u32>(b, 5).unwrap_err().code, 1);
    s.device.free(a).unwrap();
    s.device.free(b).unwrap();
}

#[test]
fn allocation_limits() {
    let s = session();
    assert_eq!(s.device.alloc(0).unwrap_err().code, 1);
    let error = s.device.alloc(DEVICE_MEMORY_BYTES as usize + 1).unwrap_err();
    assert_eq!(error.code, 2, "{error}");
}

#[test]
fn device_memory_needs_a_current_context() {
    let s = session();
    let api = s.api();
    let address = s.device.alloc(4).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut out = 0u64;
            // SAFETY: an out pointer; this thread has no current context.
            unsafe {
                assert_eq!((api.mem_alloc)(&mut out, 4), 201);
                assert_eq!((api.mem_free)(address), 201);
                assert_eq!((api.stream_synchronize)(std::ptr::null_mut()), 201);
                assert_eq!((api.ctx_pop)(std::ptr::null_mut()), 201);
            }
        });
    });
    s.device.free(address).unwrap();
}
