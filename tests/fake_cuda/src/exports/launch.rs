//! Launches, run at once on the interpreter (every stream is synchronous), with its race
//! check on unless `AOTC_FAKE_CUDA_RACECHECK=0`. A kernel's execution error fails its
//! launch with CUDA_ERROR_LAUNCH_FAILED and, as an asynchronous failure would, the next
//! `cuStreamSynchronize` of any stream.

use super::guarded;
use crate::state::{fail, Failure, Outcome, State};
use crate::status::{self, CuFunction, CuResult, CuStream};
use aotc_ptx_interp::{Arg, ErrorKind, Launch};
use std::ffi::{c_uint, c_void};

fn race_check_on() -> bool {
    std::env::var("AOTC_FAKE_CUDA_RACECHECK").map_or(true, |v| v != "0")
}

/// Argument `index` of type `ty` (an entry's `.param` type), read with that type's width
/// from the value `params[index]` points to.
fn read_arg(params: *mut *mut c_void, index: usize, name: &str, ty: &str) -> Outcome<Arg> {
    // SAFETY: the caller's contract: one pointer per declared parameter.
    let value = unsafe { params.add(index).read_unaligned() };
    if value.is_null() {
        return fail(status::INVALID_VALUE, format!("kernelParams[{index}] (`{name}`) is null"));
    }
    // SAFETY: the caller's contract: each pointer addresses a value of its parameter's type.
    let arg = unsafe {
        match ty {
            "u32" | "b32" => Arg::U32(value.cast::<u32>().read_unaligned()),
            "s32" => Arg::S32(value.cast::<i32>().read_unaligned()),
            "f32" => Arg::F32(value.cast::<f32>().read_unaligned()),
            "u64" | "b64" => Arg::U64(value.cast::<u64>().read_unaligned()),
            "s64" => Arg::S64(value.cast::<i64>().read_unaligned()),
            "f64" => Arg::F64(value.cast::<f64>().read_unaligned()),
            _ => return fail(status::INVALID_VALUE, format!("parameter `{name}` has type .{ty}")),
        }
    };
    Ok(arg)
}

struct Geometry {
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
}

fn launch(
    state: &mut State,
    function: CuFunction,
    geometry: Geometry,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Outcome {
    state.current_device()?;
    let Some(function) = state.functions.get(&(function as usize)) else {
        return fail(status::INVALID_HANDLE, format!("{function:p} is not a function of a loaded module"));
    };
    if geometry.shared_bytes != 0 {
        let message = format!(
            "{} bytes of dynamic shared memory: the interpreter runs static .shared only",
            geometry.shared_bytes
        );
        return fail(status::INVALID_VALUE, message);
    }
    if !extra.is_null() {
        return fail(status::INVALID_VALUE, "`extra` is not supported: pass the arguments in kernelParams");
    }
    let module = &state.modules[&function.module];
    let entry = function.entry.as_str();
    let Some(declared) = module.params(entry) else {
        return fail(status::INVALID_HANDLE, format!("the module has no entry `{entry}`"));
    };
    if params.is_null() && !declared.is_empty() {
        return fail(status::INVALID_VALUE, format!("kernelParams is null, `{entry}` takes {}", declared.len()));
    }
    let args = declared
        .iter()
        .enumerate()
        .map(|(i, (name, ty))| read_arg(params, i, name, ty))
        .collect::<Outcome<Vec<Arg>>>()?;
    let mut config = Launch::new(geometry.grid, geometry.block);
    if race_check_on() {
        config = config.with_race_check();
    }
    state.launches += 1;
    match module.launch(&mut state.memory, entry, &config, &args) {
        Ok(stats) => {
            state.instructions += stats.instructions;
            Ok(())
        }
        // A bad configuration is refused before anything runs, as the real driver does.
        Err(error) if matches!(error.kind, ErrorKind::Launch(_)) => fail(status::INVALID_VALUE, error.to_string()),
        Err(error) => {
            let message = error.to_string();
            state.pending_failure = Some(message.clone());
            Err(Failure { code: status::LAUNCH_FAILED, message })
        }
    }
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // The driver API's signature.
pub extern "C" fn cuLaunchKernel(
    function: CuFunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    _stream: CuStream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    let geometry = Geometry { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared_bytes };
    guarded("cuLaunchKernel", |state| launch(state, function, geometry, params, extra))
}

/// Reports (once) the execution error of an earlier launch; otherwise there is nothing to
/// wait for.
#[no_mangle]
pub extern "C" fn cuStreamSynchronize(_stream: CuStream) -> CuResult {
    guarded("cuStreamSynchronize", |state| {
        state.current_device()?;
        match state.pending_failure.take() {
            Some(message) => fail(status::LAUNCH_FAILED, format!("an earlier launch failed: {message}")),
            None => Ok(()),
        }
    })
}
