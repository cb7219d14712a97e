//! aotc-runtime: loads an aotc-compiled `.so` and runs it, the way
//! `torch._export.aot_load` does.
//!
//! ```no_run
//! use aotc_runtime::{Device, Model, Tensor, Value};
//! let mut model = Model::load("model.so", Device::Cpu)?;
//! let x = Tensor::from_f32(&[4, 16], &[0.0; 64]);
//! let outputs = model.run(&mut [Value::Tensor(x)])?;
//! # Ok::<(), aotc_runtime::Error>(())
//! ```
//! [`Model::call`] takes python-like `(args, kwargs)` trees instead and rebuilds the output
//! tree with the program's call spec ([`pytree`]).

pub mod cuda;
pub mod pytree;
mod raw;
mod tensor;
mod weights;

pub use aotc_abi::DType;
pub use aotc_abi::{AotcTensor, DLDataType, DLDevice, DL_CPU};
pub use raw::OutputView;
pub use tensor::Tensor;
pub use weights::Weights;

use aotc_abi::{fn_types as ft, status, symbols, AotcModel, AotcValueInfo};
use libloading::Library;
use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(i32),
}

impl Device {
    /// Parses "cpu", "cuda" or "cuda:N".
    pub fn parse(s: &str) -> Result<Device, Error> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s.strip_prefix("cuda:").and_then(|n| n.parse().ok()).map(Device::Cuda).ok_or_else(|| {
                Error::new(status::INVALID_ARGUMENT, format!("unknown device '{s}' (expected cpu, cuda or cuda:N)"))
            }),
        }
    }

    fn as_str(self) -> String {
        match self {
            Device::Cpu => "cpu".into(),
            Device::Cuda(i) => format!("cuda:{i}"),
        }
    }
}

/// A failure: the library's status code (see `aotc.h`) and its message.
#[derive(Debug, Clone)]
pub struct Error {
    pub code: i32,
    pub message: String,
}

impl Error {
    pub fn new(code: i32, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, status::name(self.code))
    }
}

impl std::error::Error for Error {}

/// An input value: a tensor, or a python scalar (one export specialised, or a dynamic
/// python int: a SymInt input), or a str or None export specialised.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Tensor(Tensor),
    Float(f64),
    Int(i64),
    Bool(bool),
    Str(String),
    None,
}

/// Metadata of an input, output or buffer. `sizes[i] == -1` marks a dynamic dimension
/// with range `dim_min[i]..=dim_max[i]` (`dim_max == -1`: unbounded).
#[derive(Clone, Debug)]
pub struct ValueInfo {
    pub name: String,
    pub kind: i32,
    pub dtype: Option<DType>,
    pub sizes: Vec<i64>,
    pub dim_min: Vec<i64>,
    pub dim_max: Vec<i64>,
}

/// Kernel timings of an instance ([`Model::profile_read`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Calls that succeeded since profiling was turned on.
    pub calls: u64,
    /// Their total time inside the library, in nanoseconds.
    pub call_ns: f64,
    /// Each kernel's total time, in nanoseconds, in the order of the manifest's `kernels`.
    pub kernel_ns: Vec<f64>,
}

struct Fns {
    last_error: ft::LastError,
    destroy: ft::ModelDestroy,
    run: ft::Run,
    buffer_read: ft::BufferRead,
    buffer_write: ft::BufferWrite,
    /// `None` for a library compiled before profiling existed.
    profile: Option<ProfileFns>,
    /// `None` for a library compiled before weights could be loaded.
    weights: Option<weights::WeightsFns>,
    /// `None` for a library compiled before outputs could go into the caller's memory.
    into: Option<raw::IntoFns>,
}

struct ProfileFns {
    kernel_count: ft::Count,
    enable: ft::ProfileEnable,
    read: ft::ProfileRead,
}

pub struct Model {
    fns: Fns,
    handle: *mut AotcModel,
    inputs: Vec<ValueInfo>,
    outputs: Vec<ValueInfo>,
    buffers: Vec<ValueInfo>,
    in_spec: String,
    out_spec: String,
    metadata: String,
    /// Per input: the program writes it back (mutates it in place).
    mutated: Vec<bool>,
    device: Device,
    /// For a CUDA instance: the driver that copies host tensors of [`Model::run`].
    cuda: Option<Arc<cuda::Gpu>>,
    // Dropped last: the functions above point into it.
    _lib: Library,
}

fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, Error> {
    // SAFETY: T is the function type aotc.h declares for `name`.
    unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s) }
        .map_err(|e| Error::new(status::INVALID_ARGUMENT, format!("not an aotc library (missing {name}): {e}")))
}

fn owned(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the library returns NUL-terminated strings it owns.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Refuses, before dlopen, a file that is no shared library, saying what it is instead
/// (dlopen would only say "invalid ELF header").
fn check_library_file(path: &Path) -> Result<(), Error> {
    use std::io::Read;
    let mut head = Vec::with_capacity(64);
    aotc_abi::file::open_regular(path)
        .and_then(|f| f.take(64).read_to_end(&mut head))
        .map_err(|e| Error::new(status::INVALID_ARGUMENT, format!("{}: {e}", path.display())))?;
    let p = path.display();
    let message = if head.starts_with(b"\x7fELF") {
        return Ok(());
    } else if head.is_empty() {
        format!("{p} is empty, not a compiled library")
    } else if head.starts_with(b"PK") {
        format!("{p} is a zip archive (a .pt2?), not a compiled library: compile it first with `aotc compile {p} -o model.so`")
    } else if head.trim_ascii_start().starts_with(b"{") {
        format!(
            "{p} is JSON (a model.json?), not a compiled library: compile it first with `aotc compile {p} -o model.so`"
        )
    } else {
        format!("{p} is not a compiled library (it has no ELF header): load a shared library made by `aotc compile MODEL.pt2 -o model.so`")
    };
    Err(Error::new(status::INVALID_ARGUMENT, message))
}

impl Model {
    /// Loads the library at `path` (a bare file name is the file in the current
    /// directory) and creates an instance on `device` with the default number of threads
    /// ($AOTC_NUM_THREADS, else the available cores).
    pub fn load(path: impl AsRef<Path>, device: Device) -> Result<Model, Error> {
        Self::load_with_threads(path, device, 0)
    }

    /// [`Model::load`] with calls running on up to `threads` threads (0: the default).
    pub fn load_with_threads(path: impl AsRef<Path>, device: Device, threads: usize) -> Result<Model, Error> {
        Self::load_with(path, device, threads, Weights::Default)
    }

    /// [`Model::load_with_threads`] with the instance's weights taken from `weights`: the
    /// library's own ([`Weights::Default`]: linked in, or the file its compilation wrote
    /// beside it), another weights file of the same structure, or its bytes.
    pub fn load_with(path: impl AsRef<Path>, device: Device, threads: usize, weights: Weights) -> Result<Model, Error> {
        let lib = open_library(path.as_ref())?;
        let fns = Fns {
            last_error: sym(&lib, symbols::LAST_ERROR)?,
            destroy: sym(&lib, symbols::MODEL_DESTROY)?,
            run: sym(&lib, symbols::RUN)?,
            buffer_read: sym(&lib, symbols::BUFFER_READ)?,
            buffer_write: sym(&lib, symbols::BUFFER_WRITE)?,
            profile: (|| {
                Some(ProfileFns {
                    kernel_count: sym(&lib, symbols::KERNEL_COUNT).ok()?,
                    enable: sym(&lib, symbols::PROFILE_ENABLE).ok()?,
                    read: sym(&lib, symbols::PROFILE_READ).ok()?,
                })
            })(),
            weights: weights::WeightsFns::find(&lib),
            into: raw::IntoFns::find(&lib),
        };
        let dev = CString::new(device.as_str()).expect("no NUL in device names");
        let threads = i64::try_from(threads).unwrap_or(i64::MAX);
        let (rc, handle) = weights::create(&lib, &fns, &dev, threads, &weights)?;
        if rc != status::OK {
            // SAFETY: last_error returns a valid C string.
            return Err(Error::new(rc, owned(unsafe { (fns.last_error)() })));
        }
        let mut model = Model {
            fns,
            handle,
            inputs: vec![],
            outputs: vec![],
            buffers: vec![],
            in_spec: String::new(),
            out_spec: String::new(),
            metadata: String::new(),
            mutated: vec![],
            device,
            cuda: None,
            _lib: lib,
        };
        if let Device::Cuda(n) = device {
            model.cuda = Some(Arc::new(cuda::Gpu::open(n)?));
        }
        model.inputs = model.infos(symbols::INPUT_COUNT, symbols::INPUT_INFO)?;
        model.outputs = model.infos(symbols::OUTPUT_COUNT, symbols::OUTPUT_INFO)?;
        model.buffers = model.infos(symbols::BUFFER_COUNT, symbols::BUFFER_INFO)?;
        let spec = |name| -> Result<String, Error> {
            let f: ft::ModelStr = sym(&model._lib, name)?;
            // SAFETY: valid handle.
            Ok(owned(unsafe { f(model.handle) }))
        };
        model.in_spec = spec(symbols::IN_SPEC)?;
        model.out_spec = spec(symbols::OUT_SPEC)?;
        let meta: unsafe extern "C" fn() -> *const c_char = sym(&model._lib, symbols::METADATA_JSON)?;
        // SAFETY: no arguments; returns a library-owned string.
        model.metadata = owned(unsafe { meta() });
        model.mutated = mutated_inputs(&model.metadata, model.inputs.len());
        scalar_kinds(&model.metadata, &mut model.inputs);
        Ok(model)
    }

    fn last_error(&self, code: i32) -> Error {
        // SAFETY: last_error returns a valid C string.
        Error::new(code, owned(unsafe { (self.fns.last_error)() }))
    }

    fn infos(&self, count: &str, info_name: &str) -> Result<Vec<ValueInfo>, Error> {
        let count: ft::Count = sym(&self._lib, count)?;
        let info: ft::Info = sym(&self._lib, info_name)?;
        // SAFETY: valid handle.
        let n = unsafe { count(self.handle) };
        (0..n.max(0))
            .map(|i| {
                let mut v = std::mem::MaybeUninit::<AotcValueInfo>::uninit();
                // SAFETY: valid handle and out pointer.
                let rc = unsafe { info(self.handle, i, v.as_mut_ptr()) };
                if rc != status::OK {
                    return Err(self.last_error(rc));
                }
                // SAFETY: filled on success.
                let v = unsafe { v.assume_init() };
                let ndim = usize::try_from(v.ndim)
                    .map_err(|_| Error::new(status::INTERNAL, format!("{info_name} {i}: negative ndim {}", v.ndim)))?;
                // SAFETY: on success the arrays hold ndim entries owned by the model.
                let arr = |p: *const i64| {
                    if ndim == 0 {
                        vec![]
                    } else {
                        unsafe { std::slice::from_raw_parts(p, ndim).to_vec() }
                    }
                };
                Ok(ValueInfo {
                    name: owned(v.name),
                    kind: v.kind,
                    dtype: DType::from_dlpack(v.dtype),
                    sizes: arr(v.sizes),
                    dim_min: arr(v.dim_min),
                    dim_max: arr(v.dim_max),
                })
            })
            .collect()
    }

    pub fn inputs(&self) -> &[ValueInfo] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[ValueInfo] {
        &self.outputs
    }

    pub fn buffers(&self) -> &[ValueInfo] {
        &self.buffers
    }

    pub fn in_spec(&self) -> &str {
        &self.in_spec
    }

    pub fn out_spec(&self) -> &str {
        &self.out_spec
    }

    /// Per input (in flat order): whether the program writes it back (mutates it).
    pub fn mutated_inputs(&self) -> &[bool] {
        &self.mutated
    }

    /// The manifest the compiler embedded (JSON).
    pub fn metadata_json(&self) -> &str {
        &self.metadata
    }

    /// Runs one call on flat inputs (the leaves of in_spec). Tensors the program mutates
    /// are updated in place; buffers keep their new values for the next call. On a CUDA
    /// instance the loader copies the tensors to the device and the outputs (and inputs)
    /// back: the C ABI takes device memory only ([`Model::run_raw`]).
    pub fn run(&mut self, inputs: &mut [Value]) -> Result<Vec<Tensor>, Error> {
        if let Device::Cuda(_) = self.device {
            return self.run_on_device(inputs);
        }
        let described = Described::new(inputs)?;
        // SAFETY: each descriptor points at a checked tensor (or an 8-byte scalar) and its
        // shape, owned by `inputs` and `described`, alive until run_raw returns.
        let outs = unsafe { self.run_raw(&described.raw) }?;
        Ok(outs.into_iter().map(|o| Tensor { dtype: o.dtype, shape: o.shape, data: o.data.to_vec() }).collect())
    }

    /// The shape of each output of a call on `inputs`, without running it; a dimension
    /// that depends on the data (nonzero's row count) is -1.
    pub fn output_shapes(&self, inputs: &mut [Value]) -> Result<Vec<Vec<i64>>, Error> {
        let described = Described::new(inputs)?;
        // SAFETY: as in `run`; the library only reads the inputs here.
        unsafe { self.output_shapes_raw(&described.raw) }
    }

    /// [`Model::run`] writing the outputs into `outputs` (one per output, of its dtype and
    /// the shape this call computes, e.g. from [`Model::output_shapes`]) instead of
    /// returning new tensors: the kernels write into their memory, no copy made.
    pub fn run_into(&mut self, inputs: &mut [Value], outputs: &mut [Tensor]) -> Result<(), Error> {
        let described = Described::new(inputs)?;
        let raw_outputs = outputs
            .iter_mut()
            .enumerate()
            .map(|(o, t)| {
                t.check_len(&format!("output {o}"))?;
                Ok(t.as_raw())
            })
            .collect::<Result<Vec<AotcTensor>, Error>>()?;
        // SAFETY: as in `run`; each output descriptor points at a tensor whose data holds
        // exactly its shape's bytes (checked), borrowed mutably until this returns.
        unsafe { self.run_into_raw(&described.raw, &raw_outputs) }
    }

    /// aot_load-style call: flattens `(args, kwargs)` with in_spec, runs, and rebuilds the
    /// outputs with out_spec. Mutated input tensors are updated inside `args`/`kwargs`.
    pub fn call(&mut self, args: &mut pytree::PyValue, kwargs: &mut pytree::PyValue) -> Result<pytree::PyValue, Error> {
        let spec = pytree::TreeSpec::parse(&self.in_spec)
            .map_err(|e| Error::new(status::INVALID_ARGUMENT, format!("in_spec: {e}")))?;
        let mut call = pytree::PyValue::Tuple(vec![std::mem::take(args), std::mem::take(kwargs)]);
        let result = (|| {
            let mut leaves = pytree::flatten(&call, &spec).map_err(|e| Error::new(status::INPUT_COUNT, e))?;
            let outs = self.run(&mut leaves)?;
            pytree::write_back(&mut call, &spec, &leaves);
            let out_spec = pytree::TreeSpec::parse(&self.out_spec)
                .map_err(|e| Error::new(status::INTERNAL, format!("out_spec: {e}")))?;
            // A python-scalar output (a SymInt...) comes back as the python value.
            let leaves = outs
                .into_iter()
                .zip(&self.outputs)
                .map(|(t, info)| match t.scalar(info.kind) {
                    Some(Value::Int(v)) => pytree::PyValue::Int(v),
                    Some(Value::Float(v)) => pytree::PyValue::Float(v),
                    Some(Value::Bool(v)) => pytree::PyValue::Bool(v),
                    _ => pytree::PyValue::Tensor(t),
                })
                .collect();
            pytree::unflatten_values(&out_spec, leaves).map_err(|e| Error::new(status::INTERNAL, e))
        })();
        if let pytree::PyValue::Tuple(mut parts) = call {
            *kwargs = parts.pop().unwrap_or_default();
            *args = parts.pop().unwrap_or_default();
        }
        result
    }

    fn buffer_info(&self, name: &str) -> Result<&ValueInfo, Error> {
        self.buffers
            .iter()
            .find(|b| b.name == name)
            .ok_or_else(|| Error::new(status::NOT_FOUND, format!("no buffer named '{name}'")))
    }

    /// The current value of a buffer (model state).
    pub fn read_buffer(&self, name: &str) -> Result<Tensor, Error> {
        let info = self.buffer_info(name)?;
        let dtype = info.dtype.ok_or_else(|| Error::new(status::INTERNAL, "buffer of unknown dtype"))?;
        let mut t = Tensor::zeros(dtype, &info.sizes);
        let c = CString::new(name).map_err(|_| Error::new(status::INVALID_ARGUMENT, "name holds a NUL byte"))?;
        let raw = t.as_raw();
        // SAFETY: raw describes t's memory, which matches the buffer's shape.
        let rc = unsafe { (self.fns.buffer_read)(self.handle, c.as_ptr(), &raw) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(t)
    }

    /// Overwrites a buffer (model state) for the next calls.
    pub fn write_buffer(&mut self, name: &str, value: &Tensor) -> Result<(), Error> {
        let c = CString::new(name).map_err(|_| Error::new(status::INVALID_ARGUMENT, "name holds a NUL byte"))?;
        value.check_len(&format!("buffer '{name}'"))?;
        let mut v = value.clone();
        let raw = v.as_raw();
        // SAFETY: raw describes v's memory; the library copies from it.
        let rc = unsafe { (self.fns.buffer_write)(self.handle, c.as_ptr(), &raw) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(())
    }
}

/// A call's inputs copied to a CUDA instance's device ([`Model::stage`]), freed on drop.
pub struct Staged {
    raw: Vec<AotcTensor>,
    /// Per input: its device copy (tensors only).
    on_device: Vec<Option<u64>>,
    staging: cuda::Staging,
    _described: Described,
}

impl Staged {
    /// The inputs' descriptors: device memory for tensors, host scalars otherwise.
    pub fn descriptors(&self) -> &[AotcTensor] {
        &self.raw
    }
}

impl Model {
    /// Copies the tensors of `inputs` to this CUDA instance's device, for
    /// [`Model::run_descriptors`] (what [`Model::run`] does on a CUDA instance).
    pub fn stage(&self, inputs: &mut [Value]) -> Result<Staged, Error> {
        let (Device::Cuda(n), Some(gpu)) = (self.device, &self.cuda) else {
            return Err(Error::new(status::DEVICE, "stage: this instance runs on the CPU"));
        };
        let mut staging = cuda::Staging::new(gpu.clone());
        let described = Described::new(inputs)?;
        let mut raw = described.raw.clone();
        let mut on_device = vec![None; inputs.len()];
        for (i, v) in inputs.iter().enumerate() {
            if let Value::Tensor(t) = v {
                let ptr = staging.upload(&t.data)?;
                raw[i].data = ptr as *mut std::ffi::c_void;
                raw[i].device = DLDevice { device_type: aotc_abi::DL_CUDA, device_id: n };
                on_device[i] = Some(ptr);
            }
        }
        Ok(Staged { raw, on_device, staging, _described: described })
    }

    /// [`Model::run`] on a CUDA instance: host tensors staged on the device, outputs and
    /// mutated inputs copied back.
    fn run_on_device(&mut self, inputs: &mut [Value]) -> Result<Vec<Tensor>, Error> {
        let staged = self.stage(inputs)?;
        // SAFETY: tensor descriptors point at device copies of the tensors' bytes, the
        // rest at host scalars, all alive until `staged` drops.
        let outs = unsafe { self.run_descriptors(staged.descriptors()) }?;
        let outputs = outs
            .iter()
            .zip(&self.outputs)
            .map(|(t, info)| {
                let (dtype, shape, bytes) = raw::output_layout(t, info)?;
                // SAFETY: the library described an output of `bytes` bytes in its device memory.
                let data = unsafe { staged.staging.download(t.data as u64, bytes) }?;
                Ok(Tensor { dtype, shape, data })
            })
            .collect::<Result<Vec<Tensor>, Error>>()?;
        for ((v, ptr), _) in inputs.iter_mut().zip(&staged.on_device).zip(&self.mutated).filter(|(_, &m)| m) {
            if let (Value::Tensor(t), Some(ptr)) = (v, ptr) {
                // SAFETY: the input's device copy, as long as the tensor.
                t.data = unsafe { staged.staging.download(*ptr, t.data.len()) }?;
            }
        }
        Ok(outputs)
    }
}

/// Python ints export kept dynamic (SymInt inputs), which a library describes as 0-dim
/// int64 tensors (`aotc_input_info`'s kind TENSOR): the calls take them as python ints.
fn scalar_kinds(metadata: &str, inputs: &mut [ValueInfo]) {
    let Ok(m) = serde_json::from_str::<aotc_abi::manifest::Manifest>(metadata) else { return };
    for (i, info) in inputs.iter_mut().enumerate() {
        if info.kind == aotc_abi::value_kind::TENSOR {
            info.kind = m.input_kind(i);
        }
    }
}

/// Opens an aotc library of this loader's ABI version.
fn open_library(path: &Path) -> Result<Library, Error> {
    // dlopen looks a name without a '/' up in the library search path, never in the
    // current directory: "model.so" means ./model.so to whoever types it.
    let file = if path.is_relative() { Path::new(".").join(path) } else { path.to_path_buf() };
    check_library_file(path)?;
    // SAFETY: loading runs the library's initialisers; an aotc .so has none beyond libc's.
    let lib = unsafe { Library::new(&file) }
        .map_err(|e| Error::new(status::INVALID_ARGUMENT, format!("{}: {e}", path.display())))?;
    let version: ft::AbiVersion = sym(&lib, symbols::ABI_VERSION)?;
    // SAFETY: calling a symbol with its declared signature.
    let v = unsafe { version() };
    if v != aotc_abi::ABI_VERSION {
        return Err(Error::new(status::INVALID_ARGUMENT, format!(
            "{}: the library was compiled for aotc ABI version {v}, this loader (aotc-runtime {}) speaks ABI version {}: compile the model again with a matching aotc, or load it with a matching runtime",
            path.display(), env!("CARGO_PKG_VERSION"), aotc_abi::ABI_VERSION
        )));
    }
    Ok(lib)
}

/// The manifest (JSON) of the library at `path`, read without creating an instance: no
/// weights are loaded and the CPU is not checked (`aotc inspect`).
pub fn library_metadata(path: impl AsRef<Path>) -> Result<String, Error> {
    let lib = open_library(path.as_ref())?;
    let meta: unsafe extern "C" fn() -> *const c_char = sym(&lib, symbols::METADATA_JSON)?;
    // SAFETY: the library's static NUL-terminated manifest, alive while `lib` is.
    Ok(owned(unsafe { meta() }))
}

/// The inputs the manifest says the program writes back into.
fn mutated_inputs(metadata: &str, n: usize) -> Vec<bool> {
    let mut out = vec![false; n];
    let json: serde_json::Value = serde_json::from_str(metadata).unwrap_or_default();
    for pair in json.get("input_mutations").and_then(|m| m.as_array()).into_iter().flatten() {
        if let Some(i) = pair.get(1).and_then(|i| i.as_u64()).and_then(|i| usize::try_from(i).ok()) {
            if let Some(m) = out.get_mut(i) {
                *m = true;
            }
        }
    }
    out
}

/// Descriptors of flat inputs, pointing into the values and into shapes and scalar bytes
/// held here.
struct Described {
    raw: Vec<AotcTensor>,
    _shapes: Vec<Vec<i64>>,
    _scalars: Vec<[u8; 8]>,
}

impl Described {
    fn new(inputs: &mut [Value]) -> Result<Described, Error> {
        let mut shapes: Vec<Vec<i64>> = Vec::with_capacity(inputs.len());
        let mut scalars: Vec<[u8; 8]> = Vec::with_capacity(inputs.len());
        for (i, v) in inputs.iter().enumerate() {
            let (shape, scalar) = match v {
                Value::Tensor(t) => {
                    t.check_len(&format!("input {i}"))?;
                    (t.shape.clone(), [0; 8])
                }
                Value::Float(f) => (vec![], f.to_le_bytes()),
                Value::Int(i) => (vec![], i.to_le_bytes()),
                Value::Bool(b) => (vec![], [*b as u8, 0, 0, 0, 0, 0, 0, 0]),
                Value::Str(s) => (vec![s.len() as i64], [0; 8]),
                Value::None => (vec![], [0; 8]),
            };
            shapes.push(shape);
            scalars.push(scalar);
        }
        let cpu = DLDevice { device_type: DL_CPU, device_id: 0 };
        // The descriptors point into the vectors' heap memory, which moving them keeps.
        let raw = inputs
            .iter_mut()
            .zip(shapes.iter_mut())
            .zip(scalars.iter_mut())
            .map(|((v, shape), scalar)| {
                let (data, dtype) = match v {
                    Value::Tensor(t) => (t.data.as_mut_ptr(), t.dtype),
                    Value::Float(_) => (scalar.as_mut_ptr(), DType::F64),
                    Value::Int(_) => (scalar.as_mut_ptr(), DType::I64),
                    Value::Bool(_) => (scalar.as_mut_ptr(), DType::Bool),
                    // The library only reads a constant input.
                    Value::Str(s) => (s.as_ptr().cast_mut(), DType::U8),
                    Value::None => (scalar.as_mut_ptr(), DType::U8),
                };
                AotcTensor {
                    data: data.cast(),
                    device: cpu,
                    ndim: shape.len() as i32,
                    dtype: dtype.to_dlpack(),
                    shape: shape.as_mut_ptr(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                }
            })
            .collect();
        Ok(Described { raw, _shapes: shapes, _scalars: scalars })
    }
}

/// Profiling: see `aotc.h`.
impl Model {
    fn profile_fns(&self) -> Result<&ProfileFns, Error> {
        self.fns.profile.as_ref().ok_or_else(|| {
            Error::new(
                status::INVALID_ARGUMENT,
                "this library was compiled before aotc could profile (it lacks aotc_profile_enable): compile it again",
            )
        })
    }

    /// The number of kernels of the program (the manifest's `kernels` describes each).
    pub fn kernel_count(&self) -> Result<usize, Error> {
        // SAFETY: valid handle.
        let n = unsafe { (self.profile_fns()?.kernel_count)(self.handle) };
        usize::try_from(n).map_err(|_| Error::new(status::INTERNAL, format!("the library reports {n} kernels")))
    }

    /// Starts timing each kernel of the following calls, from zero (`true`), or stops.
    pub fn profile_enable(&mut self, on: bool) -> Result<(), Error> {
        // SAFETY: valid handle.
        let rc = unsafe { (self.profile_fns()?.enable)(self.handle, on as i32) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(())
    }

    /// The totals since profiling was last turned on.
    pub fn profile_read(&self) -> Result<Profile, Error> {
        let fns = self.profile_fns()?;
        let mut p = Profile { calls: 0, call_ns: 0.0, kernel_ns: vec![0.0; self.kernel_count()?] };
        let mut calls = 0i64;
        // SAFETY: valid handle; kernel_ns holds as many doubles as the library has kernels.
        let rc = unsafe {
            (fns.read)(self.handle, &mut calls, &mut p.call_ns, p.kernel_ns.as_mut_ptr(), p.kernel_ns.len() as i64)
        };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        p.calls = calls.max(0) as u64;
        Ok(p)
    }
}

// SAFETY: aotc.h lets an instance be used from any thread, one thread at a time; `&mut self`
// on every call that changes it (run, buffer writes, profiling) gives that. The library's
// functions and the loaded `Library` are themselves thread-safe.
unsafe impl Send for Model {}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: the handle came from aotc_model_create and is destroyed once.
        unsafe { (self.fns.destroy)(self.handle) }
    }
}
