//! Device memory: the interpreter's `Memory`, its addresses the device pointers. Every
//! access is checked against the allocations (an error, never a wild access), and a
//! freed address is never handed out again.

use super::{guarded, write_out};
use crate::state::{fail, Failure, Outcome, State};
use crate::status::{self, CuDevicePtr, CuResult, CuStream};
use aotc_ptx_interp::MemoryError;
use std::ffi::{c_int, c_void};

/// The device's memory size: an allocation past it is CUDA_ERROR_OUT_OF_MEMORY (device
/// memory is host memory here, so a runaway size fails cleanly instead of exhausting it).
pub const DEVICE_MEMORY_BYTES: u64 = 4 << 30;

fn invalid(error: MemoryError) -> Failure {
    Failure { code: status::INVALID_VALUE, message: error.to_string() }
}

/// `bytes` bytes of host memory at `host`, for reading.
fn host_bytes<'a>(host: *const c_void, bytes: usize) -> Outcome<&'a [u8]> {
    if host.is_null() {
        return fail(status::INVALID_VALUE, "the host pointer is null");
    }
    // SAFETY: the caller's contract (as with the real driver): `host` points to `bytes`
    // readable bytes, not device memory (which lives inside this library's state).
    Ok(unsafe { std::slice::from_raw_parts(host.cast::<u8>(), bytes) })
}

#[no_mangle]
pub extern "C" fn cuMemAlloc_v2(out: *mut CuDevicePtr, bytes: usize) -> CuResult {
    guarded("cuMemAlloc_v2", |state| {
        let device = state.current_device()?;
        let bytes = bytes as u64;
        if bytes == 0 {
            return fail(status::INVALID_VALUE, "an allocation of 0 bytes");
        }
        if bytes > DEVICE_MEMORY_BYTES - state.live_bytes {
            let message = format!("{bytes} bytes requested, {} of {DEVICE_MEMORY_BYTES} in use", state.live_bytes);
            return fail(status::OUT_OF_MEMORY, message);
        }
        if out.is_null() {
            return fail(status::INVALID_VALUE, "the out pointer is null");
        }
        let address = state
            .memory
            .alloc(bytes, 256)
            .map_err(|e| Failure { code: status::OUT_OF_MEMORY, message: e.to_string() })?;
        state.owners.insert(address, device);
        state.live_bytes += bytes;
        write_out(out, address, "out")
    })
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(address: CuDevicePtr) -> CuResult {
    guarded("cuMemFree_v2", |state| {
        state.current_device()?;
        let bytes = state.memory.free(address).map_err(invalid)?;
        state.owners.remove(&address);
        state.live_bytes -= bytes;
        Ok(())
    })
}

/// `[address, address + bytes)` must lie in one allocation.
fn check_range(state: &State, address: CuDevicePtr, bytes: usize) -> Outcome {
    let inside = state.memory.allocation(address).is_some_and(|(base, len)| bytes as u64 <= base + len - address);
    if !inside {
        return Err(invalid(MemoryError::OutOfBounds { address, len: bytes as u64 }));
    }
    Ok(())
}

/// Copies `bytes` bytes from `host` to device address `dst`.
fn host_to_device(state: &mut State, dst: CuDevicePtr, host: *const c_void, bytes: usize) -> Outcome {
    state.current_device()?;
    if bytes == 0 {
        return Ok(());
    }
    // The host range is formed only for a size the device range can hold.
    check_range(state, dst, bytes)?;
    state.memory.write(dst, host_bytes(host, bytes)?).map_err(invalid)
}

#[no_mangle]
pub extern "C" fn cuMemcpyHtoD_v2(dst: CuDevicePtr, src: *const c_void, bytes: usize) -> CuResult {
    guarded("cuMemcpyHtoD_v2", |state| host_to_device(state, dst, src, bytes))
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CuDevicePtr, bytes: usize) -> CuResult {
    guarded("cuMemcpyDtoH_v2", |state| {
        state.current_device()?;
        if bytes == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return fail(status::INVALID_VALUE, "the host pointer is null");
        }
        let data = state.memory.read(src, bytes as u64).map_err(invalid)?;
        // SAFETY: the caller's contract: `dst` points to `bytes` writable host bytes, apart
        // from `data` (a fresh vector of as many bytes).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.cast::<u8>(), bytes) };
        Ok(())
    })
}

/// Synchronous, as every stream is here.
#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CuDevicePtr,
    src: CuDevicePtr,
    bytes: usize,
    _stream: CuStream,
) -> CuResult {
    guarded("cuMemcpyDtoDAsync_v2", |state| {
        state.current_device()?;
        if bytes == 0 {
            return Ok(());
        }
        let data = state.memory.read(src, bytes as u64).map_err(invalid)?;
        state.memory.write(dst, &data).map_err(invalid)
    })
}

#[no_mangle]
pub extern "C" fn cuMemsetD8Async(dst: CuDevicePtr, value: u8, count: usize, _stream: CuStream) -> CuResult {
    guarded("cuMemsetD8Async", |state| {
        state.current_device()?;
        if count == 0 {
            return Ok(());
        }
        // The range first: the fill is built in host memory, and a wild count must fail
        // as an error, not as a failed host allocation.
        let inside = state.memory.allocation(dst).is_some_and(|(base, len)| count as u64 <= base + len - dst);
        if !inside {
            return Err(invalid(MemoryError::OutOfBounds { address: dst, len: count as u64 }));
        }
        let data = vec![value; count];
        host_to_device(state, dst, data.as_ptr().cast(), count)
    })
}

/// Answers MEMORY_TYPE (DEVICE, as a u32) and DEVICE_ORDINAL (an i32) for an address
/// inside an allocation; any other address (host memory, freed memory, one past an end)
/// is CUDA_ERROR_INVALID_VALUE, as is any other attribute. Needs no current context.
#[no_mangle]
pub extern "C" fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, address: CuDevicePtr) -> CuResult {
    guarded("cuPointerGetAttribute", |state| {
        state.device_count()?;
        let Some((base, _)) = state.memory.allocation(address) else {
            return fail(status::INVALID_VALUE, format!("{address:#x} is not inside a device allocation"));
        };
        match attribute {
            status::POINTER_ATTRIBUTE_MEMORY_TYPE => write_out(data.cast::<u32>(), status::MEMORYTYPE_DEVICE, "data"),
            status::POINTER_ATTRIBUTE_DEVICE_ORDINAL => write_out(data.cast::<i32>(), state.owners[&base], "data"),
            _ => fail(status::INVALID_VALUE, format!("attribute {attribute} is not supported by the fake driver")),
        }
    })
}
