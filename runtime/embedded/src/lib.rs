//! Support code linked into every compiled `.so` as a static library.
//!
//! It implements the C ABI of `aotc.h` around the code the compiler generated:
//! the generated object provides the driver `__aotc_graph_run`, the manifest and the
//! weights; this crate checks inputs against the manifest, binds symbolic dimensions,
//! owns each instance's state and scratch memory, and applies mutations after a call.
//! It also provides the extern kernels the generated code calls (GEMM).
//!
//! **Architecture Invariant:** no panic or unwind leaves an ABI function: every entry is
//! wrapped in [`guard`], which turns a panic into `AOTC_ERR_INTERNAL` plus a message.

mod abi_fns;
mod kernels;
mod memory;
mod model;

pub use abi_fns::*;
pub use kernels::*;
