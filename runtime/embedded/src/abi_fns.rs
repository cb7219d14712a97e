//! The exported C functions of `aotc.h`. Each one checks its pointers, runs inside
//! [`guard`] and reports failure as a status code plus a thread-local message.

use crate::error::{err, Error, Result};
use crate::instance::Instance;
use crate::model::Outputs;
use crate::program::{program, ValueInfoStore};
use crate::weights::Source;
use aotc_abi::{status, AotcModel, AotcTensor, AotcValueInfo, ABI_VERSION};
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::last_error::set as set_error;

/// Runs `f`, turning an error or a panic into a status code and the last-error message.
fn guard(f: impl FnOnce() -> Result<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => status::OK,
        Ok(Err(e)) => {
            set_error(&e.message);
            e.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_error(&format!("internal error: {what}"));
            status::INTERNAL
        }
    }
}

fn model_ref<'a>(m: *const AotcModel) -> Result<&'a Instance> {
    // SAFETY: a non-null handle comes from aotc_model_create and stays valid until destroy.
    unsafe { (m as *const Instance).as_ref() }
        .ok_or_else(|| Error { code: status::INVALID_ARGUMENT, message: "model is a null pointer".into() })
}

fn model_mut<'a>(m: *mut AotcModel) -> Result<&'a mut Instance> {
    // SAFETY: as model_ref; the caller does not share an instance across threads during a call.
    unsafe { (m as *mut Instance).as_mut() }
        .ok_or_else(|| Error { code: status::INVALID_ARGUMENT, message: "model is a null pointer".into() })
}

fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return err(status::INVALID_ARGUMENT, format!("{what} is a null pointer"));
    }
    // SAFETY: a non-null C string argument is NUL-terminated by contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error { code: status::INVALID_ARGUMENT, message: format!("{what} is not UTF-8") })
}

#[no_mangle]
pub extern "C" fn aotc_abi_version() -> u32 {
    ABI_VERSION
}

#[no_mangle]
pub extern "C" fn aotc_last_error() -> *const c_char {
    crate::last_error::get()
}

/// # Safety
/// Pointers must be null or valid as `aotc.h` describes (`out: one writable AotcModel*; device: a C string`).
#[no_mangle]
pub unsafe extern "C" fn aotc_model_create(device: *const c_char, out: *mut *mut AotcModel) -> i32 {
    // SAFETY: the caller's pointers, forwarded.
    unsafe { aotc_model_create_threads(device, 0, out) }
}

/// # Safety
/// `device` is a C string or null; `out` is writable or null (both checked).
#[no_mangle]
pub unsafe extern "C" fn aotc_model_create_threads(
    device: *const c_char,
    num_threads: i64,
    out: *mut *mut AotcModel,
) -> i32 {
    guard(|| {
        if out.is_null() {
            return err(status::INVALID_ARGUMENT, "out is a null pointer");
        }
        let model = Instance::new(c_str(device, "device")?, num_threads, Source::Default)?;
        // SAFETY: out was checked non-null.
        unsafe { *out = Box::into_raw(Box::new(model)) as *mut AotcModel };
        Ok(())
    })
}

/// The bytes `data[..len]` of a caller's weights buffer.
fn byte_slice<'a>(data: *const c_void, len: u64) -> Result<&'a [u8]> {
    let len = usize::try_from(len).ok().filter(|&n| isize::try_from(n).is_ok()).ok_or_else(|| Error {
        code: status::INVALID_ARGUMENT,
        message: format!("len {len} does not fit the address space"),
    })?;
    if data.is_null() {
        return err(status::INVALID_ARGUMENT, format!("data is a null pointer, with len {len}"));
    }
    // SAFETY: the caller passes `len` readable bytes at `data` (checked non-null), unchanged
    // during the call.
    Ok(unsafe { std::slice::from_raw_parts(data.cast(), len) })
}

/// Creates an instance, writing it to `out` (checked non-null).
fn create(
    device: *const c_char,
    num_threads: i64,
    weights: impl FnOnce() -> Result<Source<'static>>,
    out: *mut *mut AotcModel,
) -> Result<()> {
    if out.is_null() {
        return err(status::INVALID_ARGUMENT, "out is a null pointer");
    }
    let model = Instance::new(c_str(device, "device")?, num_threads, weights()?)?;
    // SAFETY: out was checked non-null.
    unsafe { *out = Box::into_raw(Box::new(model)) as *mut AotcModel };
    Ok(())
}

/// # Safety
/// `device` and `weights_path` are C strings or null; `out` is writable or null (checked).
#[no_mangle]
pub unsafe extern "C" fn aotc_model_create_weights(
    device: *const c_char,
    num_threads: i64,
    weights_path: *const c_char,
    out: *mut *mut AotcModel,
) -> i32 {
    guard(|| {
        create(
            device,
            num_threads,
            || match weights_path.is_null() {
                true => Ok(Source::Default),
                false => c_str(weights_path, "weights_path").map(Source::File),
            },
            out,
        )
    })
}

/// # Safety
/// `device` is a C string or null; `data` holds `len` readable bytes or is null; `out` is
/// writable or null (checked). The bytes are copied.
#[no_mangle]
pub unsafe extern "C" fn aotc_model_create_weights_bytes(
    device: *const c_char,
    num_threads: i64,
    data: *const c_void,
    len: u64,
    out: *mut *mut AotcModel,
) -> i32 {
    guard(|| create(device, num_threads, || byte_slice(data, len).map(Source::Bytes), out))
}

/// # Safety
/// `m` comes from aotc_model_create* (or is null) and no other thread uses it during the
/// call; `path` is a C string or null (checked).
#[no_mangle]
pub unsafe extern "C" fn aotc_load_weights(m: *mut AotcModel, path: *const c_char) -> i32 {
    guard(|| {
        let model = model_mut(m)?;
        model.load_weights(Source::File(c_str(path, "path")?))
    })
}

/// # Safety
/// As aotc_load_weights; `data` holds `len` readable bytes or is null (checked). Copied.
#[no_mangle]
pub unsafe extern "C" fn aotc_load_weights_bytes(m: *mut AotcModel, data: *const c_void, len: u64) -> i32 {
    guard(|| {
        let model = model_mut(m)?;
        model.load_weights(Source::Bytes(byte_slice(data, len)?))
    })
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed (this destroys it:
/// nothing uses it afterwards); no other call on it runs at the same time.
#[no_mangle]
pub unsafe extern "C" fn aotc_model_destroy(m: *mut AotcModel) {
    if !m.is_null() {
        // SAFETY: m came from Box::into_raw in aotc_model_create and is destroyed once.
        guard(|| {
            drop(unsafe { Box::from_raw(m as *mut Instance) });
            Ok(())
        });
    }
}

/// The embedded manifest as JSON (null, with the last error set, if it is unreadable).
#[no_mangle]
pub extern "C" fn aotc_metadata_json() -> *const c_char {
    let mut p = std::ptr::null();
    guard(|| {
        p = program()?.manifest_json.as_ptr();
        Ok(())
    });
    p
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn aotc_in_spec(m: *const AotcModel) -> *const c_char {
    let mut p = std::ptr::null();
    guard(|| {
        p = model_ref(m)?.program().in_spec.as_ptr();
        Ok(())
    });
    p
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn aotc_out_spec(m: *const AotcModel) -> *const c_char {
    let mut p = std::ptr::null();
    guard(|| {
        p = model_ref(m)?.program().out_spec.as_ptr();
        Ok(())
    });
    p
}

fn count(m: *const AotcModel, which: fn(&Instance) -> usize) -> i64 {
    let mut n = -1;
    guard(|| {
        n = which(model_ref(m)?) as i64;
        Ok(())
    });
    n
}

fn info(
    m: *const AotcModel,
    i: i64,
    out: *mut AotcValueInfo,
    what: &str,
    which: fn(&Instance) -> &[ValueInfoStore],
) -> i32 {
    guard(|| {
        let list = which(model_ref(m)?);
        if out.is_null() {
            return err(status::INVALID_ARGUMENT, "out is a null pointer");
        }
        let item = usize::try_from(i).ok().and_then(|i| list.get(i)).ok_or_else(|| Error {
            code: status::INVALID_ARGUMENT,
            message: format!("{what} index {i} out of range 0..{}", list.len()),
        })?;
        // SAFETY: out was checked non-null.
        unsafe { *out = item.info() };
        Ok(())
    })
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn aotc_input_count(m: *const AotcModel) -> i64 {
    count(m, |m| m.program().inputs.len())
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed; `out` is null or
/// points to one writable `AotcValueInfo`.
#[no_mangle]
pub unsafe extern "C" fn aotc_input_info(m: *const AotcModel, i: i64, out: *mut AotcValueInfo) -> i32 {
    info(m, i, out, "input", |m| &m.program().inputs)
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn aotc_output_count(m: *const AotcModel) -> i64 {
    count(m, |m| m.program().outputs.len())
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed; `out` is null or
/// points to one writable `AotcValueInfo`.
#[no_mangle]
pub unsafe extern "C" fn aotc_output_info(m: *const AotcModel, i: i64, out: *mut AotcValueInfo) -> i32 {
    info(m, i, out, "output", |m| &m.program().outputs)
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn aotc_buffer_count(m: *const AotcModel) -> i64 {
    count(m, |m| m.program().buffers.len())
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed; `out` is null or
/// points to one writable `AotcValueInfo`.
#[no_mangle]
pub unsafe extern "C" fn aotc_buffer_info(m: *const AotcModel, i: i64, out: *mut AotcValueInfo) -> i32 {
    info(m, i, out, "buffer", |m| &m.program().buffers)
}

/// # Safety
/// Pointers must be null or valid as `aotc.h` describes (`model: from aotc_model_create; name: a C string; dst: a tensor whose memory holds the buffer`).
#[no_mangle]
pub unsafe extern "C" fn aotc_buffer_read(m: *const AotcModel, name: *const c_char, dst: *const AotcTensor) -> i32 {
    guard(|| {
        let model = model_ref(m)?;
        // SAFETY: a non-null tensor pointer points to a valid AotcTensor by contract.
        let dst = unsafe { dst.as_ref() }
            .ok_or_else(|| Error { code: status::INVALID_ARGUMENT, message: "dst is a null pointer".into() })?;
        model.read_buffer(c_str(name, "name")?, dst)
    })
}

/// # Safety
/// Pointers must be null or valid as `aotc.h` describes (`model: from aotc_model_create; name: a C string; src: a tensor whose memory holds the buffer`).
#[no_mangle]
pub unsafe extern "C" fn aotc_buffer_write(m: *mut AotcModel, name: *const c_char, src: *const AotcTensor) -> i32 {
    guard(|| {
        let model = model_mut(m)?;
        // SAFETY: as in aotc_buffer_read.
        let src = unsafe { src.as_ref() }
            .ok_or_else(|| Error { code: status::INVALID_ARGUMENT, message: "src is a null pointer".into() })?;
        model.write_buffer(c_str(name, "name")?, src)
    })
}

/// # Safety
/// Pointers must be null or valid as `aotc.h` describes (`model: from aotc_model_create; inputs/outputs: arrays of n_inputs/n_outputs tensors`).
#[no_mangle]
pub unsafe extern "C" fn aotc_run(
    m: *mut AotcModel,
    inputs: *const AotcTensor,
    n_inputs: i64,
    outputs: *mut AotcTensor,
    n_outputs: i64,
) -> i32 {
    guard(|| {
        let model = model_mut(m)?;
        let (Ok(n_in), Ok(n_out)) = (usize::try_from(n_inputs), usize::try_from(n_outputs)) else {
            return err(
                status::INVALID_ARGUMENT,
                format!("negative count: n_inputs {n_inputs}, n_outputs {n_outputs}"),
            );
        };
        for (array, is_null, n) in [("inputs", inputs.is_null(), n_in), ("outputs", outputs.is_null(), n_out)] {
            if is_null && n > 0 {
                return err(status::INVALID_ARGUMENT, format!("{array} is a null pointer, with {n} entries"));
            }
        }
        // The caller may pass one array as both inputs and outputs, and the outputs are
        // written while the inputs are still in use: overlapping inputs are copied first.
        let (in_bytes, out_bytes) = (n_in * size_of::<AotcTensor>(), n_out * size_of::<AotcTensor>());
        let overlap = n_in > 0
            && n_out > 0
            && (inputs as usize) < outputs as usize + out_bytes
            && (outputs as usize) < inputs as usize + in_bytes;
        // SAFETY: the caller passes arrays of n_inputs and n_outputs tensors; the inputs
        // are borrowed in place only when no output shares their memory.
        let copy;
        let ins = match (n_in, overlap) {
            (0, _) => &[][..],
            (_, false) => unsafe { std::slice::from_raw_parts(inputs, n_in) },
            (_, true) => {
                copy = unsafe { std::slice::from_raw_parts(inputs, n_in) }.to_vec();
                &copy[..]
            }
        };
        // SAFETY: as above; no other reference to the outputs array exists during the call.
        let outs = if n_out == 0 { &mut [][..] } else { unsafe { std::slice::from_raw_parts_mut(outputs, n_out) } };
        model.run(ins, Outputs::Describe(outs))
    })
}

/// The caller's array of `n` tensors at `p` (named `what` in messages), which the
/// library only reads.
fn descriptors<'a>(p: *const AotcTensor, n: i64, what: &str) -> Result<&'a [AotcTensor]> {
    let n = usize::try_from(n)
        .map_err(|_| Error { code: status::INVALID_ARGUMENT, message: format!("negative count: {n} {what}") })?;
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return err(status::INVALID_ARGUMENT, format!("{what} is a null pointer, with {n} entries"));
    }
    // SAFETY: the caller passes an array of n tensors, valid for the call.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// # Safety
/// Pointers must be null or valid as `aotc.h` describes (`inputs`: `n_inputs` tensors;
/// `outputs`: `n_outputs` tensors describing writable memory).
#[no_mangle]
pub unsafe extern "C" fn aotc_run_into(
    m: *mut AotcModel,
    inputs: *const AotcTensor,
    n_inputs: i64,
    outputs: *const AotcTensor,
    n_outputs: i64,
) -> i32 {
    guard(|| {
        let model = model_mut(m)?;
        let ins = descriptors(inputs, n_inputs, "inputs")?;
        let outs = descriptors(outputs, n_outputs, "outputs")?;
        model.run(ins, Outputs::Into(outs))
    })
}

/// # Safety
/// Pointers must be null or valid as `aotc.h` describes (`inputs`: `n_inputs` tensors;
/// `shapes`: `n_dims` writable int64s).
#[no_mangle]
pub unsafe extern "C" fn aotc_output_shapes(
    m: *const AotcModel,
    inputs: *const AotcTensor,
    n_inputs: i64,
    shapes: *mut i64,
    n_dims: i64,
) -> i32 {
    guard(|| {
        let model = model_ref(m)?;
        let ins = descriptors(inputs, n_inputs, "inputs")?;
        let dims: Vec<i64> = model.output_shapes(ins)?.concat();
        if usize::try_from(n_dims).map_or(true, |n| n < dims.len()) {
            return err(
                status::INVALID_ARGUMENT,
                format!("shapes has room for {n_dims} dimensions; the outputs have {}", dims.len()),
            );
        }
        if !dims.is_empty() && shapes.is_null() {
            return err(status::INVALID_ARGUMENT, "shapes is a null pointer");
        }
        // SAFETY: shapes holds n_dims >= dims.len() writable entries (checked above).
        unsafe { std::ptr::copy_nonoverlapping(dims.as_ptr(), shapes, dims.len()) };
        Ok(())
    })
}

/// # Safety
/// `m` comes from aotc_model_create* (or is null); `stream` is a CUstream of the
/// instance's device or null (the legacy default stream), alive while the instance uses it.
#[no_mangle]
pub unsafe extern "C" fn aotc_set_stream(m: *mut AotcModel, stream: *mut c_void) -> i32 {
    guard(|| model_mut(m)?.set_stream(stream))
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn aotc_kernel_count(m: *const AotcModel) -> i64 {
    count(m, |m| m.program().manifest.kernels.len())
}

/// # Safety
/// `m` is null or a handle from aotc_model_create* not yet destroyed; no other call on it
/// runs at the same time.
#[no_mangle]
pub unsafe extern "C" fn aotc_profile_enable(m: *mut AotcModel, on: i32) -> i32 {
    guard(|| {
        model_mut(m)?.profile_mut()?.set(on != 0);
        Ok(())
    })
}

/// # Safety
/// Pointers must be null or valid as `aotc.h` describes (`calls`, `call_ns`: one writable value each; `kernel_ns`: `n_kernels` writable doubles).
#[no_mangle]
pub unsafe extern "C" fn aotc_profile_read(
    m: *const AotcModel,
    calls: *mut i64,
    call_ns: *mut f64,
    kernel_ns: *mut f64,
    n_kernels: i64,
) -> i32 {
    guard(|| {
        let (n_calls, total_ns, kernels) = model_ref(m)?.profile()?.totals();
        if calls.is_null() || call_ns.is_null() {
            return err(
                status::INVALID_ARGUMENT,
                format!("{} is a null pointer", if calls.is_null() { "calls" } else { "call_ns" }),
            );
        }
        if usize::try_from(n_kernels).map_or(true, |n| n < kernels.len()) {
            return err(
                status::INVALID_ARGUMENT,
                format!("kernel_ns has room for {n_kernels} kernels; the program has {}", kernels.len()),
            );
        }
        if kernel_ns.is_null() && !kernels.is_empty() {
            return err(status::INVALID_ARGUMENT, format!("kernel_ns is a null pointer, with {n_kernels} entries"));
        }
        // SAFETY: the pointers were checked non-null; kernel_ns holds n_kernels >= kernels.len() doubles by contract.
        unsafe {
            *calls = i64::try_from(n_calls).unwrap_or(i64::MAX);
            *call_ns = total_ns as f64;
            for (k, &t) in kernels.iter().enumerate() {
                *kernel_ns.add(k) = t as f64;
            }
        }
        Ok(())
    })
}
