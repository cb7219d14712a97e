//! One model instance: its state, scratch memory, and the checks and bookkeeping of a call.

use crate::memory::{strided_copy, AlignedBuf, Direction};
use aotc_abi::layout::{contiguous_strides, is_contiguous};
use aotc_abi::manifest::{ConstValue, InputSpec, Manifest, Slot};
use aotc_abi::sym::SymExpr;
use aotc_abi::{status, AotcTensor, AotcValueInfo, DType, DL_CPU};
use std::ffi::CString;
use std::sync::OnceLock;

extern "C" {
    #[link_name = "__aotc_manifest"]
    static MANIFEST_BYTES: u8;
    #[link_name = "__aotc_manifest_len"]
    static MANIFEST_LEN: u64;
    #[link_name = "__aotc_weights"]
    static WEIGHTS: u8;
    fn __aotc_graph_run(slots: *const *mut u8, dims: *const i64);
}

/// An error with its ABI status code.
pub struct Error {
    pub code: i32,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

pub fn err<T>(code: i32, message: impl Into<String>) -> Result<T> {
    Err(Error { code, message: message.into() })
}

/// The manifest and the C strings derived from it, shared by all instances.
pub struct Program {
    pub manifest: Manifest,
    pub manifest_json: CString,
    pub in_spec: CString,
    pub out_spec: CString,
    pub inputs: Vec<ValueInfoStore>,
    pub outputs: Vec<ValueInfoStore>,
    pub buffers: Vec<ValueInfoStore>,
}

/// Owns what an `AotcValueInfo` points to.
pub struct ValueInfoStore {
    name: CString,
    kind: i32,
    dtype: DType,
    sizes: Vec<i64>,
    dim_min: Vec<i64>,
    dim_max: Vec<i64>,
}

impl ValueInfoStore {
    fn new(name: &str, kind: i32, dtype: DType, sizes: &[SymExpr], m: &Manifest) -> ValueInfoStore {
        let range = |e: &SymExpr| match (e.as_int(), e) {
            (Some(v), _) => (v, v, v),
            (None, SymExpr::Sym(s)) => {
                let r = &m.symbols[*s as usize];
                (-1, r.min, r.max.unwrap_or(-1))
            }
            (None, _) => (-1, 0, -1),
        };
        let (sizes, (dim_min, dim_max)): (Vec<i64>, (Vec<i64>, Vec<i64>)) =
            sizes.iter().map(range).map(|(s, lo, hi)| (s, (lo, hi))).unzip();
        let name = CString::new(name.replace('\0', "")).unwrap_or_default();
        ValueInfoStore { name, kind, dtype, sizes, dim_min, dim_max }
    }

    pub fn info(&self) -> AotcValueInfo {
        AotcValueInfo {
            name: self.name.as_ptr(),
            kind: self.kind,
            dtype: self.dtype.to_dlpack(),
            ndim: self.sizes.len() as i32,
            sizes: self.sizes.as_ptr(),
            dim_min: self.dim_min.as_ptr(),
            dim_max: self.dim_max.as_ptr(),
        }
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// Parses the embedded manifest once per process.
pub fn program() -> Result<&'static Program> {
    static PROGRAM: OnceLock<std::result::Result<Program, String>> = OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            // SAFETY: the compiler emits __aotc_manifest with __aotc_manifest_len bytes.
            let bytes = unsafe { std::slice::from_raw_parts(&MANIFEST_BYTES as *const u8, MANIFEST_LEN as usize) };
            let m: Manifest = serde_json::from_slice(bytes).map_err(|e| format!("embedded manifest is corrupt: {e}"))?;
            if m.abi_version != aotc_abi::ABI_VERSION {
                return Err(format!("manifest ABI {} != support library ABI {}", m.abi_version, aotc_abi::ABI_VERSION));
            }
            let inputs = m.inputs.iter().map(|i| match i {
                InputSpec::Tensor(t) => ValueInfoStore::new(&t.name, aotc_abi::value_kind::TENSOR, t.dtype, &t.sizes, &m),
                InputSpec::Constant { name, value } => {
                    let (kind, dtype) = match value {
                        ConstValue::Int(_) => (aotc_abi::value_kind::INT, DType::I64),
                        ConstValue::Bool(_) => (aotc_abi::value_kind::BOOL, DType::Bool),
                        _ => (aotc_abi::value_kind::FLOAT, DType::F64),
                    };
                    ValueInfoStore::new(name, kind, dtype, &[], &m)
                }
            }).collect();
            let outputs = m.outputs.iter().map(|t| ValueInfoStore::new(&t.name, aotc_abi::value_kind::TENSOR, t.dtype, &t.sizes, &m)).collect();
            let buffers = m.buffers.iter().map(|b| {
                let sizes: Vec<SymExpr> = b.sizes.iter().map(|&s| SymExpr::Int(s)).collect();
                ValueInfoStore::new(&b.name, aotc_abi::value_kind::TENSOR, b.dtype, &sizes, &m)
            }).collect();
            Ok(Program {
                manifest_json: CString::new(bytes.to_vec()).map_err(|_| "manifest holds a NUL byte".to_string())?,
                in_spec: cstring(&m.in_spec),
                out_spec: cstring(&m.out_spec),
                inputs,
                outputs,
                buffers,
                manifest: m,
            })
        })
        .as_ref()
        .map_err(|e| Error { code: status::INTERNAL, message: e.clone() })
}

fn weights_base() -> *const u8 {
    // SAFETY: taking the address of the linked weights blob; nothing is read here.
    unsafe { &WEIGHTS as *const u8 }
}

pub struct Model {
    program: &'static Program,
    buffers: Vec<AlignedBuf>,
    scratch: Vec<AlignedBuf>,
    /// Contiguous copies of non-contiguous inputs.
    staging: Vec<Option<AlignedBuf>>,
    output_shapes: Vec<Vec<i64>>,
}

/// "input 3 ('x')", formatted only when a message needs it.
struct InputName<'a>(usize, &'a str);

impl std::fmt::Display for InputName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "input {} ('{}')", self.0, self.1)
    }
}

fn dtype_of(t: &AotcTensor) -> String {
    match DType::from_dlpack(t.dtype) {
        Some(d) => d.to_string(),
        None => format!("DLDataType(code={}, bits={}, lanes={})", t.dtype.code, t.dtype.bits, t.dtype.lanes),
    }
}

/// The shape and strides of a caller's tensor, after null checks.
fn shape_and_strides(t: &AotcTensor, what: &dyn std::fmt::Display) -> Result<(Vec<i64>, Option<Vec<i64>>)> {
    if t.ndim < 0 {
        return err(status::INVALID_ARGUMENT, format!("{what}: negative ndim {}", t.ndim));
    }
    let n = t.ndim as usize;
    if n > 0 && t.shape.is_null() {
        return err(status::INVALID_ARGUMENT, format!("{what}: shape is a null pointer"));
    }
    // SAFETY: DLPack contract: shape (and strides when non-null) hold ndim entries.
    let shape = if n == 0 { vec![] } else { unsafe { std::slice::from_raw_parts(t.shape, n).to_vec() } };
    let strides = if t.strides.is_null() || n == 0 { None } else { Some(unsafe { std::slice::from_raw_parts(t.strides, n).to_vec() }) };
    if let Some(d) = shape.iter().position(|&s| s < 0) {
        return err(status::SHAPE, format!("{what}: dimension {d} has negative size {}", shape[d]));
    }
    Ok((shape, strides))
}

fn data_ptr(t: &AotcTensor, what: &dyn std::fmt::Display, numel: i64) -> Result<*mut u8> {
    if t.data.is_null() && numel > 0 {
        return err(status::INVALID_ARGUMENT, format!("{what}: data is a null pointer"));
    }
    Ok((t.data as *mut u8).wrapping_add(t.byte_offset as usize))
}

impl Model {
    pub fn new(device: &str) -> Result<Model> {
        let program = program()?;
        if !(device == "cpu" || device == "cpu:0") {
            return err(status::DEVICE, format!("this library was compiled for device \"cpu\"; got \"{device}\""));
        }
        let m = &program.manifest;
        let mut buffers = Vec::with_capacity(m.buffers.len());
        for b in &m.buffers {
            // SAFETY: the compiler placed byte_len bytes of initial value at init_offset.
            let init = unsafe { std::slice::from_raw_parts(weights_base().add(b.init_offset as usize), b.byte_len()) };
            buffers.push(AlignedBuf::from_bytes(init).ok_or(Error { code: status::OUT_OF_MEMORY, message: format!("cannot allocate buffer '{}'", b.name) })?);
        }
        let staging = (0..m.inputs.len()).map(|_| None).collect();
        let scratch = m.slots.iter().map(|_| AlignedBuf::new(0).expect("empty buffers need no memory")).collect();
        Ok(Model { program, buffers, scratch, staging, output_shapes: vec![vec![]; m.outputs.len()] })
    }

    pub fn program(&self) -> &'static Program {
        self.program
    }

    fn buffer_index(&self, name: &str) -> Result<usize> {
        let m = &self.program.manifest;
        m.buffers.iter().position(|b| b.name == name).ok_or_else(|| Error {
            code: status::NOT_FOUND,
            message: format!("no buffer named '{name}'; the model has: [{}]", m.buffers.iter().map(|b| b.name.as_str()).collect::<Vec<_>>().join(", ")),
        })
    }

    /// Checks `t` against buffer `name`'s dtype and shape; returns its index, strides and data.
    fn check_buffer_tensor(&self, name: &str, t: &AotcTensor) -> Result<(usize, Vec<i64>, *mut u8)> {
        let i = self.buffer_index(name)?;
        let b = &self.program.manifest.buffers[i];
        let what = format!("buffer '{name}'");
        if t.device.device_type != DL_CPU {
            return err(status::DEVICE, format!("{what}: tensor is on device type {}, expected CPU", t.device.device_type));
        }
        if DType::from_dlpack(t.dtype) != Some(b.dtype) {
            return err(status::DTYPE, format!("{what}: expected dtype {}, got {}", b.dtype, dtype_of(t)));
        }
        let (shape, strides) = shape_and_strides(t, &what)?;
        if shape != b.sizes {
            return err(status::SHAPE, format!("{what}: expected shape {:?}, got {:?}", b.sizes, shape));
        }
        let strides = strides.unwrap_or_else(|| contiguous_strides(&shape));
        Ok((i, strides, data_ptr(t, &what, shape.iter().product())?))
    }

    pub fn read_buffer(&self, name: &str, dst: &AotcTensor) -> Result<()> {
        let (i, strides, data) = self.check_buffer_tensor(name, dst)?;
        let b = &self.program.manifest.buffers[i];
        // SAFETY: the state buffer holds the contiguous value; dst was checked to match it.
        unsafe { strided_copy(self.buffers[i].as_ptr(), data, &b.sizes, &strides, b.dtype.size(), Direction::ContiguousToStrided) }
        Ok(())
    }

    pub fn write_buffer(&mut self, name: &str, src: &AotcTensor) -> Result<()> {
        let (i, strides, data) = self.check_buffer_tensor(name, src)?;
        let b = &self.program.manifest.buffers[i];
        // SAFETY: as in read_buffer, the other way round.
        unsafe { strided_copy(self.buffers[i].as_ptr(), data, &b.sizes, &strides, b.dtype.size(), Direction::StridedToContiguous) }
        Ok(())
    }

    /// Checks the inputs and binds every symbol from their shapes; also returns each
    /// input's shape and strides (None: contiguous), read once per call.
    #[allow(clippy::type_complexity)]
    fn bind_inputs(&self, inputs: &[AotcTensor]) -> Result<(Vec<Option<i64>>, Vec<(Vec<i64>, Option<Vec<i64>>)>)> {
        let m = &self.program.manifest;
        if inputs.len() != m.inputs.len() {
            let names: Vec<&str> = m.inputs.iter().map(|i| i.name()).collect();
            return err(status::INPUT_COUNT, format!("expected {} inputs ({}), got {}", m.inputs.len(), names.join(", "), inputs.len()));
        }
        let mut syms: Vec<Option<i64>> = vec![None; m.symbols.len()];
        // (input, dimension) that bound each symbol, for messages about inconsistent sizes.
        let mut bound_by: Vec<(usize, usize)> = vec![(0, 0); m.symbols.len()];
        let mut shapes = Vec::with_capacity(inputs.len());
        for (i, (spec, t)) in m.inputs.iter().zip(inputs).enumerate() {
            let what = InputName(i, spec.name());
            if t.device.device_type != DL_CPU {
                return err(status::DEVICE, format!("{what}: tensor is on device type {}, expected CPU (1)", t.device.device_type));
            }
            let (shape, strides) = shape_and_strides(t, &what)?;
            match spec {
                InputSpec::Constant { value, .. } => check_constant(&what, value, t, &shape)?,
                InputSpec::Tensor(ts) => {
                    if DType::from_dlpack(t.dtype) != Some(ts.dtype) {
                        return err(status::DTYPE, format!("{what}: expected dtype {}, got {}", ts.dtype, dtype_of(t)));
                    }
                    if shape.len() != ts.sizes.len() {
                        return err(status::RANK, format!("{what}: expected rank {} (shape [{}]), got rank {} (shape {:?})",
                            ts.sizes.len(), join(&ts.sizes, m), shape.len(), shape));
                    }
                    for (d, (e, &n)) in ts.sizes.iter().zip(&shape).enumerate() {
                        if let SymExpr::Sym(s) = e {
                            let s = *s as usize;
                            let r = &m.symbols[s];
                            match syms[s] {
                                None => {
                                    if n < r.min || r.max.is_some_and(|hi| n > hi) {
                                        let hi = r.max.map(|h| h.to_string()).unwrap_or("inf".into());
                                        return err(status::RANGE, format!("{what}: dimension {d} is {n}, outside the range [{}, {hi}] of dynamic dimension {}", r.min, r.name));
                                    }
                                    syms[s] = Some(n);
                                    bound_by[s] = (i, d);
                                }
                                Some(v) if v != n => {
                                    let (bi, bd) = bound_by[s];
                                    return err(status::SHAPE, format!("{what}: dimension {d} is {n}, but {} dimension {bd} set the shared dynamic dimension {} to {v}", InputName(bi, m.inputs[bi].name()), r.name));
                                }
                                Some(_) => {}
                            }
                        }
                    }
                }
            }
            shapes.push((shape, strides));
        }
        // Static and derived dimensions, once every symbol is bound.
        for (i, (spec, (shape, _))) in m.inputs.iter().zip(&shapes).enumerate() {
            if let InputSpec::Tensor(ts) = spec {
                for (d, (e, &n)) in ts.sizes.iter().zip(shape).enumerate() {
                    let want = e.eval(&syms).map_err(|x| Error { code: status::SHAPE, message: format!("input {i} ('{}') dimension {d}: {x}", ts.name) })?;
                    if want != n {
                        return err(status::SHAPE, format!("input {i} ('{}'): dimension {d} is {n}, expected {want} (shape [{}])", ts.name, join(&ts.sizes, m)));
                    }
                }
            }
        }
        Ok((syms, shapes))
    }

    pub fn run(&mut self, inputs: &[AotcTensor], outputs: &mut [AotcTensor]) -> Result<()> {
        let program = self.program;
        let m = &program.manifest;
        if outputs.len() != m.outputs.len() {
            return err(status::INVALID_ARGUMENT, format!("expected room for {} outputs, got {}", m.outputs.len(), outputs.len()));
        }
        let (syms, layouts) = self.bind_inputs(inputs)?;
        let eval = |e: &SymExpr, what: &dyn Fn() -> String| e.eval(&syms).map_err(|x| Error { code: status::SHAPE, message: format!("{}: {x}", what()) });
        let dims: Vec<i64> = m.dims.iter().map(|e| eval(e, &|| format!("size {e}"))).collect::<Result<_>>()?;

        // Inputs: use the caller's memory when contiguous, a staged copy otherwise.
        let mut input_ptrs = Vec::with_capacity(inputs.len());
        for (i, ((spec, t), (shape, strides))) in m.inputs.iter().zip(inputs).zip(&layouts).enumerate() {
            let InputSpec::Tensor(ts) = spec else { input_ptrs.push(std::ptr::null_mut()); continue };
            let numel: i64 = shape.iter().product();
            let data = data_ptr(t, &InputName(i, &ts.name), numel)?;
            match strides {
                Some(st) if !is_contiguous(shape, st) => {
                    let bytes = numel as usize * ts.dtype.size();
                    let buf = reuse(&mut self.staging[i], bytes)?;
                    // SAFETY: buf has room for numel elements; t's strides describe its memory.
                    unsafe { strided_copy(buf.as_ptr(), data, shape, st, ts.dtype.size(), Direction::StridedToContiguous) }
                    input_ptrs.push(buf.as_ptr());
                }
                _ => input_ptrs.push(data),
            }
        }

        let mut slots: Vec<*mut u8> = Vec::with_capacity(m.slots.len());
        for (k, slot) in m.slots.iter().enumerate() {
            slots.push(match slot {
                Slot::Weight { offset } => weights_base().wrapping_add(*offset as usize) as *mut u8,
                Slot::Buffer(b) => self.buffers[*b].as_ptr(),
                Slot::Input(i) => input_ptrs[*i],
                Slot::Scratch { bytes } => {
                    let n = eval(bytes, &|| format!("scratch slot {k}"))?;
                    let buf = &mut self.scratch[k];
                    if buf.len() != n as usize {
                        *buf = AlignedBuf::new(n as usize).ok_or(Error { code: status::OUT_OF_MEMORY, message: format!("cannot allocate {n} bytes") })?;
                    }
                    buf.as_ptr()
                }
            });
        }
        // SAFETY: every slot points to memory of the size the compiler planned for the
        // bound symbols, and dims holds every size the generated code reads.
        unsafe { __aotc_graph_run(slots.as_ptr(), dims.as_ptr()) };

        for &(slot, b) in &m.buffer_mutations {
            let len = m.buffers[b].byte_len();
            self.buffers[b].as_mut_slice().copy_from_slice(&self.scratch[slot].as_slice()[..len]);
        }
        for &(slot, i) in &m.input_mutations {
            let InputSpec::Tensor(ts) = &m.inputs[i] else { continue };
            let (shape, strides) = &layouts[i];
            let strides = strides.clone().unwrap_or_else(|| contiguous_strides(shape));
            let data = data_ptr(&inputs[i], &InputName(i, &ts.name), shape.iter().product())?;
            // SAFETY: the slot holds the new contiguous value of the caller's tensor.
            unsafe { strided_copy(self.scratch[slot].as_ptr(), data, shape, &strides, ts.dtype.size(), Direction::ContiguousToStrided) }
        }
        for (o, spec) in m.outputs.iter().enumerate() {
            self.output_shapes[o] = spec.sizes.iter().map(|e| eval(e, &|| format!("output {o}"))).collect::<Result<_>>()?;
            outputs[o] = AotcTensor {
                data: slots[spec.slot] as *mut _,
                device: aotc_abi::DLDevice { device_type: DL_CPU, device_id: 0 },
                ndim: spec.sizes.len() as i32,
                dtype: spec.dtype.to_dlpack(),
                shape: self.output_shapes[o].as_mut_ptr(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            };
        }
        Ok(())
    }
}

fn reuse(slot: &mut Option<AlignedBuf>, bytes: usize) -> Result<&mut AlignedBuf> {
    if slot.as_ref().map(|b| b.len()) != Some(bytes) {
        *slot = Some(AlignedBuf::new(bytes).ok_or(Error { code: status::OUT_OF_MEMORY, message: format!("cannot allocate {bytes} bytes") })?);
    }
    Ok(slot.as_mut().expect("just set"))
}

fn join(sizes: &[SymExpr], m: &Manifest) -> String {
    sizes.iter().map(|e| match e {
        SymExpr::Sym(s) => m.symbols[*s as usize].name.clone(),
        other => other.to_string(),
    }).collect::<Vec<_>>().join(", ")
}

fn check_constant(what: &dyn std::fmt::Display, value: &ConstValue, t: &AotcTensor, shape: &[i64]) -> Result<()> {
    if !shape.is_empty() {
        return err(status::RANK, format!("{what}: a specialised constant ({value:?}) is passed as a 0-dim tensor, got rank {}", shape.len()));
    }
    let data = data_ptr(t, what, 1)?;
    // SAFETY: a 0-dim tensor holds one element of its dtype at data.
    let got: Option<f64> = unsafe {
        match DType::from_dlpack(t.dtype) {
            Some(DType::F64) => Some((data as *const f64).read_unaligned()),
            Some(DType::F32) => Some((data as *const f32).read_unaligned() as f64),
            Some(DType::I64) => Some((data as *const i64).read_unaligned() as f64),
            Some(DType::I32) => Some((data as *const i32).read_unaligned() as f64),
            Some(DType::Bool) => Some((data.read() != 0) as i64 as f64),
            _ => None,
        }
    };
    let want = match value {
        ConstValue::Float(v) => Some(*v),
        ConstValue::Int(v) => Some(*v as f64),
        ConstValue::Bool(v) => Some(*v as i64 as f64),
        _ => None,
    };
    match (want, got) {
        (Some(w), Some(g)) if w == g => Ok(()),
        (Some(w), Some(g)) => err(status::CONSTANT, format!("{what}: export specialised this input to {w}; got {g}")),
        (Some(_), None) => err(status::DTYPE, format!("{what}: a scalar must be a float64/int64/bool 0-dim tensor, got {}", dtype_of(t))),
        (None, _) => Ok(()),
    }
}
