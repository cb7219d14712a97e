//! Loading PTX: parse errors in the JIT error log, entries looked up by name.

mod common;

use common::{session, HEADER};
use std::ffi::c_void;

const BAD: &str =
    ".visible .entry broken(.param .u64 out)\n{\n    .reg .b32 %r<2>;\n    frobnicate.u32 %r1, 7;\n    ret;\n}\n";

#[test]
fn bad_ptx_puts_the_parse_error_in_the_jit_log() {
    let s = session();
    let (code, log) = s.load(&format!("{HEADER}{BAD}"), 4096).unwrap_err();
    assert_eq!(code, 218);
    assert!(log.starts_with("line 7: ") && log.contains("frobnicate"), "{log}");
    assert!(s.device.last_error().unwrap().contains(&log));
    // A small log gets the start of the message, NUL-terminated.
    let (code, short) = s.load(&format!("{HEADER}{BAD}"), 8).unwrap_err();
    assert_eq!((code, short.as_str()), (218, &log[..7]));
}

#[test]
fn entries_are_found_by_name_and_images_must_be_text() {
    let s = session();
    let ptx = format!("{HEADER}.visible .entry empty()\n{{\n    ret;\n}}\n");
    let module = s.load(&ptx, 64).unwrap();
    assert!(s.function(module, "empty").is_ok());
    assert_eq!(s.function(module, "missing"), Err(500));
    assert_eq!(s.function(std::ptr::null_mut(), "empty"), Err(400));
    let image = b"\x7fELF\xff\xfe\0";
    let mut out = std::ptr::null_mut();
    // SAFETY: a NUL-terminated image and no options.
    let code = unsafe {
        (s.api().module_load_data_ex)(
            &mut out,
            image.as_ptr().cast::<c_void>(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(code, 200);
}
