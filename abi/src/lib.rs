//! The stable C ABI of an aotc-compiled shared library.
//!
//! **API Boundary:** everything `#[repr(C)]` here, the symbol names in [`symbols`] and
//! `include/aotc.h` must change together, and only with a bump of [`ABI_VERSION`].
//!
//! The crate also holds what the compiler and the support code inside every `.so` share:
//! [`DType`], symbolic sizes ([`sym::SymExpr`]), the embedded [`manifest::Manifest`] and
//! the placement of scratch buffers in one allocation ([`arena`]), and the weights table
//! with its external file format ([`weights`], [`weights_file`]).

pub mod arena;
pub mod conv;
pub mod cpu;
pub mod cuda;
pub mod dtype;
pub mod file;
pub mod gemm;
pub mod layout;
pub mod manifest;
pub mod peak;
pub mod sym;
pub mod weights;
pub mod weights_file;

pub use dtype::DType;

use std::ffi::{c_char, c_void};

/// Bumped on any incompatible change of the C ABI. `aotc_abi_version()` returns it.
pub const ABI_VERSION: u32 = 1;

/// Status codes returned by every fallible ABI function; `AOTC_OK` is success.
pub mod status {
    pub const OK: i32 = 0;
    /// A null pointer, a bad device string, an out-of-range index, strides or a
    /// byte_offset that reach outside the address space.
    pub const INVALID_ARGUMENT: i32 = 1;
    pub const INPUT_COUNT: i32 = 2;
    pub const DTYPE: i32 = 3;
    pub const RANK: i32 = 4;
    /// A static dimension differs, two inputs disagree on a shared symbolic dimension, or
    /// a run-time guard of the program fails for the sizes bound.
    pub const SHAPE: i32 = 5;
    /// A dynamic dimension lies outside its range constraint.
    pub const RANGE: i32 = 6;
    /// A specialised constant input got another value.
    pub const CONSTANT: i32 = 7;
    pub const DEVICE: i32 = 8;
    pub const NOT_FOUND: i32 = 9;
    pub const OUT_OF_MEMORY: i32 = 10;
    /// A bug of aotc's: a panic caught at the ABI, or an extern kernel called with arguments
    /// it cannot run (the call's outputs are not valid).
    pub const INTERNAL: i32 = 11;
    /// A data-dependent index (gather, embedding, index...) lies outside its dimension.
    pub const INDEX: i32 = 12;
    /// A weights file (or buffer) is missing, unreadable, not an aotc weights file, or
    /// does not match the library: another compilation, a tensor missing, another dtype or
    /// shape, truncated, unaligned. Added within ABI version 1.
    pub const WEIGHTS: i32 = 13;
    /// A check of the program itself failed for this call's values (`torch._check`,
    /// `_assert_async`: one_hot's class range...), where PyTorch raises. Added within ABI
    /// version 1.
    pub const ASSERT: i32 = 14;
    /// The library's code needs a CPU feature this machine lacks (it was compiled with
    /// `aotc compile --cpu` for a newer CPU): refused when an instance is created, instead
    /// of an illegal instruction. Added within ABI version 1.
    pub const CPU: i32 = 15;

    /// The name a status code has in `aotc.h`, for messages.
    pub fn name(code: i32) -> &'static str {
        match code {
            OK => "AOTC_OK",
            INVALID_ARGUMENT => "AOTC_ERR_INVALID_ARGUMENT",
            INPUT_COUNT => "AOTC_ERR_INPUT_COUNT",
            DTYPE => "AOTC_ERR_DTYPE",
            RANK => "AOTC_ERR_RANK",
            SHAPE => "AOTC_ERR_SHAPE",
            RANGE => "AOTC_ERR_RANGE",
            CONSTANT => "AOTC_ERR_CONSTANT",
            DEVICE => "AOTC_ERR_DEVICE",
            NOT_FOUND => "AOTC_ERR_NOT_FOUND",
            OUT_OF_MEMORY => "AOTC_ERR_OUT_OF_MEMORY",
            INDEX => "AOTC_ERR_INDEX",
            WEIGHTS => "AOTC_ERR_WEIGHTS",
            ASSERT => "AOTC_ERR_ASSERT",
            CPU => "AOTC_ERR_CPU",
            _ => "AOTC_ERR_INTERNAL",
        }
    }
}

/// DLPack `DLDevice`. Only `device_type == 1` (kDLCPU) is served by CPU builds.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

pub const DL_CPU: i32 = 1;
/// DLPack's kDLCUDA: memory of a CUDA device (`device_id` its ordinal).
pub const DL_CUDA: i32 = 2;

/// DLPack `DLDataType`: code 0 int, 1 uint, 2 float, 4 bfloat, 6 bool; bits; lanes (1).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// DLPack `DLTensor`, field for field. `strides` (in elements) may be null for a
/// contiguous tensor; a 0-dim tensor carries a python scalar input.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AotcTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// What an input, output or buffer is (`aotc.h`'s AOTC_KIND_*). Python scalars are 0-dim
/// CPU tensors of float64 / int64 / bool.
pub mod value_kind {
    pub const TENSOR: i32 = 0;
    /// A python float: an input export specialised (pass a 0-dim float64 tensor holding
    /// the exported value), or a SymFloat output (a 0-dim float64).
    pub const FLOAT: i32 = 1;
    /// A python int: an input export specialised or kept dynamic (a SymInt input, whose
    /// value binds its symbol; pass a 0-dim int64 tensor), or a SymInt output.
    pub const INT: i32 = 2;
    /// A python bool: an input export specialised (pass a 0-dim bool tensor), or a
    /// SymBool output.
    pub const BOOL: i32 = 3;
    /// A python str export specialised (an input only): pass its UTF-8 bytes as a 1-D
    /// uint8 CPU tensor; they must be the exported string's.
    pub const STR: i32 = 4;
    /// None export specialised (an input only): pass any 0-dim CPU tensor, which is not
    /// read.
    pub const NONE: i32 = 5;
}

/// Metadata of one input, output or buffer; all pointers are owned by the model instance.
/// `sizes[i] == -1` marks a dynamic dimension whose range is `[dim_min[i], dim_max[i]]`
/// (`dim_max[i] == -1`: unbounded).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AotcValueInfo {
    pub name: *const c_char,
    pub kind: i32,
    pub dtype: DLDataType,
    pub ndim: i32,
    pub sizes: *const i64,
    pub dim_min: *const i64,
    pub dim_max: *const i64,
}

/// Opaque model instance.
#[repr(C)]
pub struct AotcModel {
    _private: [u8; 0],
}

/// The cores this process may use.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The thread count of an instance (`aotc_model_create_threads`): `requested` when
/// positive, else $AOTC_NUM_THREADS, else the available cores; at most 1024.
pub fn thread_count(requested: i64) -> Result<usize, String> {
    if requested > 0 {
        return Ok(usize::try_from(requested).unwrap_or(usize::MAX).min(1024));
    }
    match std::env::var("AOTC_NUM_THREADS") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n.min(1024)),
            _ => Err(format!("AOTC_NUM_THREADS must be a positive integer, got \"{v}\"")),
        },
        Err(_) => Ok(available_cores()),
    }
}

/// The exported symbols, in the order of `aotc.h`. A compiled `.so` exports exactly these.
pub mod symbols {
    pub const ABI_VERSION: &str = "aotc_abi_version";
    pub const LAST_ERROR: &str = "aotc_last_error";
    pub const MODEL_CREATE: &str = "aotc_model_create";
    pub const MODEL_CREATE_THREADS: &str = "aotc_model_create_threads";
    pub const MODEL_DESTROY: &str = "aotc_model_destroy";
    pub const METADATA_JSON: &str = "aotc_metadata_json";
    pub const IN_SPEC: &str = "aotc_in_spec";
    pub const OUT_SPEC: &str = "aotc_out_spec";
    pub const INPUT_COUNT: &str = "aotc_input_count";
    pub const INPUT_INFO: &str = "aotc_input_info";
    pub const OUTPUT_COUNT: &str = "aotc_output_count";
    pub const OUTPUT_INFO: &str = "aotc_output_info";
    pub const BUFFER_COUNT: &str = "aotc_buffer_count";
    pub const BUFFER_INFO: &str = "aotc_buffer_info";
    pub const BUFFER_READ: &str = "aotc_buffer_read";
    pub const BUFFER_WRITE: &str = "aotc_buffer_write";
    pub const RUN: &str = "aotc_run";
    /// Profiling: added within ABI version 1, so a library compiled before lacks them.
    pub const KERNEL_COUNT: &str = "aotc_kernel_count";
    pub const PROFILE_ENABLE: &str = "aotc_profile_enable";
    pub const PROFILE_READ: &str = "aotc_profile_read";
    /// Weights from a file or bytes, and swapping them: added within ABI version 1, so a
    /// library compiled before lacks them.
    pub const MODEL_CREATE_WEIGHTS: &str = "aotc_model_create_weights";
    pub const MODEL_CREATE_WEIGHTS_BYTES: &str = "aotc_model_create_weights_bytes";
    pub const LOAD_WEIGHTS: &str = "aotc_load_weights";
    pub const LOAD_WEIGHTS_BYTES: &str = "aotc_load_weights_bytes";
    /// Outputs into the caller's memory: added within ABI version 1, so a library compiled
    /// before lacks them.
    pub const OUTPUT_SHAPES: &str = "aotc_output_shapes";
    pub const RUN_INTO: &str = "aotc_run_into";
    /// The CUDA stream of an instance's calls: added within ABI version 1.
    pub const SET_STREAM: &str = "aotc_set_stream";

    pub const ALL: &[&str] = &[
        ABI_VERSION,
        LAST_ERROR,
        MODEL_CREATE,
        MODEL_CREATE_THREADS,
        MODEL_DESTROY,
        METADATA_JSON,
        IN_SPEC,
        OUT_SPEC,
        INPUT_COUNT,
        INPUT_INFO,
        OUTPUT_COUNT,
        OUTPUT_INFO,
        BUFFER_COUNT,
        BUFFER_INFO,
        BUFFER_READ,
        BUFFER_WRITE,
        RUN,
        KERNEL_COUNT,
        PROFILE_ENABLE,
        PROFILE_READ,
        MODEL_CREATE_WEIGHTS,
        MODEL_CREATE_WEIGHTS_BYTES,
        LOAD_WEIGHTS,
        LOAD_WEIGHTS_BYTES,
        OUTPUT_SHAPES,
        RUN_INTO,
        SET_STREAM,
    ];
}

/// Symbols shared by the generated object and the embedded support library; hidden from
/// the `.so`'s dynamic symbol table by the version script.
pub mod internal_symbols {
    /// `void __aotc_graph_run(void **slots, const int64_t *dims, int64_t stage, void
    /// *profile)`: the generated driver; runs the kernels of one stage, and when `profile`
    /// is not null calls [`PROFILE_MARK`] after each.
    pub const GRAPH_RUN: &str = "__aotc_graph_run";
    /// `void __aotc_profile_mark(void *profile, int64_t kernel)`: kernel `kernel` (its
    /// index in the program) has just finished.
    pub const PROFILE_MARK: &str = "__aotc_profile_mark";
    /// `void __aotc_parallel(kernel, void **slots, const int64_t *dims, int64_t extent,
    /// int64_t work)`: runs `kernel(slots, dims, begin, end)` over `[0, extent)` of its
    /// outer loop, split across the call's threads when `extent * work` is large enough.
    pub const PARALLEL: &str = "__aotc_parallel";
    /// Below this much work (outer extent times the work of one iteration) a kernel
    /// runs on one thread: waking a worker costs more than it saves.
    pub const MIN_PARALLEL_WORK: i64 = 1 << 16;
    /// The manifest as JSON bytes, and its length (a u64).
    pub const MANIFEST: &str = "__aotc_manifest";
    pub const MANIFEST_LEN: &str = "__aotc_manifest_len";
    /// All weights and initial buffer values, 64-byte aligned each (one zero byte when
    /// they live in a file: the manifest's `weights.external`).
    pub const WEIGHTS: &str = "__aotc_weights";
    /// `void __aotc_softmax_f32(float *out, const float *x, int64_t rows, int64_t len,
    /// int64_t mode)`: softmax of each contiguous row, in one of `crate::softmax`'s modes.
    pub const SOFTMAX: &str = "__aotc_softmax_f32";
    /// `void __aotc_layer_norm_f32(float *out, const float *x, const float *weight, const
    /// float *bias, int64_t rows, int64_t len, int64_t has_weight, int64_t has_bias,
    /// int64_t eps_f64_bits)`: layer norm of each contiguous row.
    pub const LAYER_NORM: &str = "__aotc_layer_norm_f32";
    /// `void __aotc_gelu_f32(float *out, const float *x, int64_t n)`: GELU (erf form) of
    /// n contiguous values.
    pub const GELU: &str = "__aotc_gelu_f32";
}

/// nonzero's scan in the support library, which the generated code calls (hidden from the
/// `.so`'s dynamic symbol table like every internal symbol):
/// `void __aotc_nonzero(int64_t *out, const uint8_t *mask, const int64_t *sizes, int64_t
/// ndim, int64_t rows)` (an IR `Extern` call): the row-major coordinates of the first
/// `rows` nonzero elements of the bool `mask` of shape `sizes`.
pub mod nonzero {
    pub const SYMBOL: &str = "__aotc_nonzero";
}

/// `void __aotc_concat(uint8_t *out, const uint8_t *const *parts, int64_t count, const
/// int64_t *sizes, int64_t len)` (an IR `Extern` call): torch.cat of contiguous tensors
/// as byte copies. `sizes` is `[outer, bytes_0, ..., bytes_{count-1}]`: part k is `outer`
/// blocks of `bytes_k` bytes (its dimensions from the concatenated one on, times the
/// element size), and `out` is `outer` blocks of their sum, part after part.
/// `void __aotc_concat(uint8_t *out, const uint8_t *const *parts, int64_t count,
/// const int64_t *sizes, int64_t len)`: torch.cat as byte copies. `sizes` is `[outer,
/// bytes_0.., offset_0.., stride_0..]` (`len = 1 + 3 count`): part k is `outer` blocks of
/// `bytes_k` bytes, block `o` at `parts[k] + offset_k + o * stride_k` (a view: a channel
/// slice of a batch, say), and block `o` of `out` is block `o` of every part, in order.
pub mod concat {
    pub const SYMBOL: &str = "__aotc_concat";
}

/// The modes of `internal_symbols::SOFTMAX`, its last argument.
pub mod softmax {
    /// `exp(x - max) / sum`.
    pub const SOFTMAX: i64 = 0;
    /// `x - max - log(sum)`.
    pub const LOG_SOFTMAX: i64 = 1;
    /// As [`SOFTMAX`], but a row of nothing but -inf gives zeros, not NaN: torch's
    /// `_safe_softmax` (attention's, where a mask may hide every position of a row).
    pub const SAFE_SOFTMAX: i64 = 2;
}

/// `void __aotc_fft(float *out, const float *in, int64_t in_offset, int64_t kind,
///                  int64_t norm, int64_t outer, int64_t len_in, int64_t len_out,
///                  int64_t inner)` (an IR `Extern` call) transforms along the middle
/// axis of contiguous `[outer, len_in, inner]` values (from float `in_offset`) into
/// contiguous `[outer, len_out, inner]` ones; complex values are (re, im) float pairs.
pub mod fft {
    pub const SYMBOL: &str = "__aotc_fft";
    /// Complex to complex, `e^(-2 pi i jk / n)`; `len_in == len_out == n`.
    pub const FORWARD: i64 = 0;
    /// Complex to complex, `e^(+2 pi i jk / n)`; `len_in == len_out == n`.
    pub const INVERSE: i64 = 1;
    /// Real to complex, forward: `n = len_in`, keeping `len_out` (`n` or `n / 2 + 1`) outputs.
    pub const REAL_TO_COMPLEX: i64 = 2;
    /// Complex to real, inverse: `n = len_out`, reading the first `n / 2 + 1` inputs
    /// (`len_in` may be larger) as the half spectrum of a Hermitian signal.
    pub const COMPLEX_TO_REAL: i64 = 3;
    /// The scale of the result, torch's normalization codes: 1, 1/sqrt(n), 1/n.
    pub const NORM_NONE: i64 = 0;
    pub const NORM_BY_ROOT_N: i64 = 1;
    pub const NORM_BY_N: i64 = 2;
}

/// C function types of the exported symbols, for loaders.
pub mod fn_types {
    use super::*;
    pub type AbiVersion = unsafe extern "C" fn() -> u32;
    pub type LastError = unsafe extern "C" fn() -> *const c_char;
    pub type ModelCreate = unsafe extern "C" fn(*const c_char, *mut *mut AotcModel) -> i32;
    pub type ModelCreateThreads = unsafe extern "C" fn(*const c_char, i64, *mut *mut AotcModel) -> i32;
    pub type ModelDestroy = unsafe extern "C" fn(*mut AotcModel);
    pub type ModelStr = unsafe extern "C" fn(*const AotcModel) -> *const c_char;
    pub type Count = unsafe extern "C" fn(*const AotcModel) -> i64;
    pub type Info = unsafe extern "C" fn(*const AotcModel, i64, *mut AotcValueInfo) -> i32;
    pub type BufferRead = unsafe extern "C" fn(*const AotcModel, *const c_char, *const AotcTensor) -> i32;
    pub type BufferWrite = unsafe extern "C" fn(*mut AotcModel, *const c_char, *const AotcTensor) -> i32;
    pub type Run = unsafe extern "C" fn(*mut AotcModel, *const AotcTensor, i64, *mut AotcTensor, i64) -> i32;
    pub type OutputShapes = unsafe extern "C" fn(*const AotcModel, *const AotcTensor, i64, *mut i64, i64) -> i32;
    pub type RunInto = unsafe extern "C" fn(*mut AotcModel, *const AotcTensor, i64, *const AotcTensor, i64) -> i32;
    pub type SetStream = unsafe extern "C" fn(*mut AotcModel, *mut c_void) -> i32;
    pub type ProfileEnable = unsafe extern "C" fn(*mut AotcModel, i32) -> i32;
    pub type ProfileRead = unsafe extern "C" fn(*const AotcModel, *mut i64, *mut f64, *mut f64, i64) -> i32;
    pub type ModelCreateWeights = unsafe extern "C" fn(*const c_char, i64, *const c_char, *mut *mut AotcModel) -> i32;
    pub type ModelCreateWeightsBytes =
        unsafe extern "C" fn(*const c_char, i64, *const c_void, u64, *mut *mut AotcModel) -> i32;
    pub type LoadWeights = unsafe extern "C" fn(*mut AotcModel, *const c_char) -> i32;
    pub type LoadWeightsBytes = unsafe extern "C" fn(*mut AotcModel, *const c_void, u64) -> i32;
}
