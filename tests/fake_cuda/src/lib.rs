//! A fake CUDA driver: the part of libcuda's API that aotc's CUDA libraries call
//! (`runtime/embedded/src/cuda/driver.rs`), running kernels on the PTX interpreter
//! (`aotc-ptx-interp`), so that CUDA libraries are tested on machines without a GPU.
//!
//! ```text
//!  compiled library ── dlopen($AOTC_CUDA_DRIVER) ──┐
//!                                                 ▼
//!  test ── Device::open(same path) ──► libaotc_fake_cuda.so: exports/ (C functions)
//!                                                 │ one process-wide State (state.rs)
//!                                                 ▼
//!                           aotc-ptx-interp: Memory (device memory), Module::launch
//! ```
//!
//! # Semantics
//!
//! - `AOTC_FAKE_CUDA_DEVICES` devices (default 1), read by the first `cuInit`. With 0,
//!   `cuInit` fails with CUDA_ERROR_NO_DEVICE, as the real driver does on a machine with
//!   the driver but no GPU (so `cuDeviceGetCount` is never reached then).
//! - Contexts are tokens: each device's primary context, retained and released with a
//!   count; a per-thread stack of pushed contexts. Memory, module and launch calls need a
//!   current context (CUDA_ERROR_INVALID_CONTEXT without one), as on a GPU.
//! - Device memory is the interpreter's `Memory`, shared by all devices (unified
//!   addressing), at most `DEVICE_MEMORY_BYTES` live. Copies and sets are checked against
//!   the allocations; a freed, unknown or interior address given to `cuMemFree` is
//!   CUDA_ERROR_INVALID_VALUE, and freed addresses are never reused.
//! - `cuModuleLoadDataEx` parses the PTX (the interpreter's subset, `SUBSET.md`); a parse
//!   error goes into the CU_JIT_ERROR_LOG_BUFFER option's buffer and is
//!   CUDA_ERROR_INVALID_PTX.
//! - `cuLaunchKernel` reads each argument with its `.param` type's width and runs the
//!   grid at once with the race check on (`AOTC_FAKE_CUDA_RACECHECK=0`: off, read per
//!   launch). A bad configuration (block too large, wrong arguments, dynamic shared
//!   memory, `extra`) is CUDA_ERROR_INVALID_VALUE; an execution error (out of bounds,
//!   race, barrier divergence, ...) is CUDA_ERROR_LAUNCH_FAILED from the launch and from
//!   the next `cuStreamSynchronize` (any stream: one pending failure per process).
//! - Every failing call's message is kept: `aotc_fake_cuda_last_error()`. Launches and
//!   instructions are counted: `aotc_fake_cuda_stats(&launches, &instructions)`.
//! - Nothing unwinds into C: each body runs under `catch_unwind` (a panic is
//!   CUDA_ERROR_UNKNOWN). The driver's pointer contracts (host buffers, out pointers,
//!   `kernelParams`) are trusted as a real driver trusts them; null pointers are refused.
//!
//! # Using it from a test
//!
//! The state lives in the cdylib, `target/<profile>/libaotc_fake_cuda.so` (built by
//! `cargo build -p aotc-fake-cuda`, and by `cargo test` of this package). A test that runs
//! a library compiled for CUDA sets `AOTC_CUDA_DRIVER` to that path before the library
//! first opens its driver, opens the same path with [`Device::open`], puts its inputs in
//! device memory with [`Device::upload`], runs the library on "cuda:0" with those
//! addresses, and reads the outputs back with [`Device::download`].
//!
//! The two loads share one state only if they open the same file: the dynamic loader
//! returns the loaded copy for the same path (or another link to the same inode); a
//! copy of the file elsewhere is a second, independent driver whose memory the first
//! does not know. [`library_path`] gives the canonical path for both.
//!
//! The state is per process and shared by its threads: tests of one binary that look at
//! errors, pending failures or statistics should not run concurrently.

mod api;
mod device;
mod exports;
mod state;
mod status;

pub use api::Api;
pub use device::{CudaError, Device, Stats};
pub use exports::DEVICE_MEMORY_BYTES;
pub use status::*;

use std::path::PathBuf;

/// The built cdylib, `libaotc_fake_cuda.so` in `target/<profile>/`, found from the
/// running executable (a test binary in `target/<profile>/deps/`, an example in
/// `target/<profile>/examples/`), if it is there.
pub fn library_path() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(2).map(|dir| dir.join("libaotc_fake_cuda.so")).find(|path| path.is_file())
}
