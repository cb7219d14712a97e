//! Support code linked into every compiled `.so` as a static library.
//!
//! It implements the C ABI of `aotc.h` around the code the compiler generated:
//! the generated object provides the driver `__aotc_graph_run`, the manifest and the
//! weights; this crate checks each caller's descriptor before reading through it
//! ([`descriptor`]), checks inputs against the manifest and binds symbolic dimensions
//! ([`inputs`]), checks the program's guards ([`guards`]), owns each instance's state and
//! scratch memory (keeping it apart from inputs that alias it) and applies mutations
//! after a call ([`model`]); scratch whose values matter only between kernels shares one
//! allocation per instance, laid out by lifetime ([`arena`]).
//! Its weights are linked in, or a file mapped read-only and shared by instances, or a
//! caller's bytes ([`weights`], [`mapping`]); an instance may swap them.
//! It also provides the extern kernels the generated code calls (GEMM, convolution,
//! [`fft`]), the worker threads that large kernels are split across ([`pool`]) and the
//! kernel timings of a profile ([`profile`]), and the buffers an instance keeps for its
//! kernels from call to call ([`spare`]).
//!
//! **Architecture Invariant:** no panic or unwind leaves an ABI function: every entry is
//! wrapped in [`guard`], which turns a panic into `AOTC_ERR_INTERNAL` plus a message.

mod abi_fns;
mod activation;
mod arena;
mod concat;
mod conv;
mod cuda;
mod descriptor;
mod error;
mod fft;
mod gelu;
pub mod gemm;
mod guards;
mod inputs;
mod instance;
mod isa;
mod kernels;
mod last_error;
mod mapping;
mod memory;
mod model;
mod outputs;
mod pool;
mod profile;
mod program;
mod rows;
mod simd;
mod spare;
mod unload;
mod weights;

pub use abi_fns::*;
pub use conv::{__aotc_conv2d_f32, __aotc_max_pool2d_f32};
pub use fft::*;
pub use gelu::__aotc_gelu_f32;
pub use kernels::*;
pub use pool::__aotc_parallel;
pub use profile::__aotc_profile_mark;
pub use rows::{__aotc_layer_norm_f32, __aotc_softmax_f32};
