//! One input leaf, a Python value, as an aotc descriptor (a DLPack DLTensor) over the
//! caller's own memory: numpy arrays (and anything with `__array_interface__`) and
//! `__dlpack__` producers (torch, JAX, CuPy...) are passed without a copy, strides and
//! all; python scalars become the 0-dim tensors aotc.h asks for.

use crate::error::raise;
use aotc_abi::{status, value_kind, DType};
use aotc_runtime::{AotcTensor, DLDataType, DLDevice, DL_CPU};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyCapsule, PyDict, PyFloat, PyInt, PyTuple};
use std::ffi::c_void;

/// DLPack's `DLManagedTensor` (the legacy, unversioned capsule "dltensor").
#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: AotcTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A leaf ready to be described to the library. Owns the shape, strides and scalar bytes
/// the descriptor points to, and keeps alive the Python object that owns the data.
pub struct Leaf {
    data: *mut c_void,
    byte_offset: u64,
    /// Where the data lives (a scalar's: the CPU).
    pub device: DLDevice,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    /// The bytes of a scalar or str leaf (`data` is null then: the descriptor points here).
    scalar: Option<Box<[u8]>>,
    /// The data may not be written (a read-only numpy array).
    pub readonly: bool,
    /// Came through `__dlpack__` from a torch tensor.
    pub torch: bool,
    /// Keeps the data alive: the array, or the DLPack capsule (unconsumed: its destructor
    /// releases the producer's tensor).
    _owner: Option<Py<PyAny>>,
    /// When the data is a contiguous copy the binding made: the caller's array, to write
    /// a mutated value back into.
    pub copied_from: Option<(Py<PyAny>, Py<PyAny>)>,
}

impl Leaf {
    /// The descriptor: valid while `self` is alive and unchanged (it points to the heap
    /// memory of `shape`, `strides` and `scalar`, which moving `self` does not move).
    pub fn descriptor(&mut self) -> AotcTensor {
        let data = match &mut self.scalar {
            Some(bytes) => bytes.as_mut_ptr().cast(),
            None => self.data,
        };
        AotcTensor {
            data,
            device: self.device,
            ndim: self.shape.len() as i32,
            dtype: self.dtype,
            shape: self.shape.as_mut_ptr(),
            strides: self.strides.as_mut().map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
            byte_offset: self.byte_offset,
        }
    }

    /// Why the program may not write this leaf back (it mutates it in place) where PyTorch
    /// would refuse the in-place write, if it may not; `obj` is the caller's value.
    pub fn unwritable(&self, obj: &Bound<'_, PyAny>) -> PyResult<Option<&'static str>> {
        if self.readonly {
            return Ok(Some("the array is read-only"));
        }
        let shared = |s: &Vec<i64>| s.iter().zip(&self.shape).any(|(&stride, &n)| stride == 0 && n > 1);
        if self.strides.as_ref().is_some_and(shared) {
            return Ok(Some(
                "several of its elements share one memory location (a stride of 0, as expand() or broadcast_to() \
                 make), where torch refuses an in-place write: pass a copy (x.clone(), x.copy())",
            ));
        }
        if self.torch
            && obj.getattr("requires_grad")?.is_truthy()?
            && obj.getattr("is_leaf")?.is_truthy()?
            && obj.py().import("torch")?.call_method0("is_grad_enabled")?.is_truthy()?
        {
            return Ok(Some(
                "it is a leaf tensor that requires grad, which torch refuses to write in place: pass x.detach(), \
                 or call under torch.no_grad()",
            ));
        }
        Ok(None)
    }

    fn scalar(dtype: DType, bytes: [u8; 8]) -> Leaf {
        Leaf::owned(dtype, vec![], Box::new(bytes))
    }

    /// A leaf over bytes of its own, of `dtype` and `shape`.
    fn owned(dtype: DType, shape: Vec<i64>, bytes: Box<[u8]>) -> Leaf {
        Leaf {
            data: std::ptr::null_mut(),
            byte_offset: 0,
            device: DLDevice { device_type: DL_CPU, device_id: 0 },
            dtype: dtype.to_dlpack(),
            shape,
            strides: None,
            scalar: Some(bytes),
            readonly: true,
            torch: false,
            _owner: None,
            copied_from: None,
        }
    }
}

/// What the conversion needs from Python: `numpy.asarray` and `numpy.ascontiguousarray`.
pub struct Numpy {
    pub asarray: Py<PyAny>,
    pub ascontiguousarray: Py<PyAny>,
}

/// Names a leaf in messages ("input 0 ('x')"); formatted only when something fails.
pub struct Label<'a> {
    pub what: &'a str,
    pub index: usize,
    pub name: &'a str,
}

impl std::fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ('{}')", self.what, self.index, self.name)
    }
}

fn bad(py: Python<'_>, what: &dyn std::fmt::Display, msg: impl std::fmt::Display) -> PyErr {
    raise(py, status::INVALID_ARGUMENT, format!("{what}: {msg}"))
}

/// Converts `obj`, the leaf `what` (e.g. "input 0 ('x')") whose kind is `kind`
/// (aotc.h's AOTC_KIND_*).
pub fn convert(np: &Numpy, obj: &Bound<'_, PyAny>, kind: i32, what: &dyn std::fmt::Display) -> PyResult<Leaf> {
    let py = obj.py();
    match kind {
        value_kind::FLOAT => {
            // As torch checks a specialised float: an int (or a bool) is another value type.
            if obj.is_instance_of::<PyInt>() {
                return Err(bad(py, what, format!("expected a python float, got {}", type_name(obj))));
            }
            let v: f64 =
                obj.extract().map_err(|_| bad(py, what, format!("expected a python float, got {}", type_name(obj))))?;
            Ok(Leaf::scalar(DType::F64, v.to_le_bytes()))
        }
        value_kind::INT => {
            if obj.is_instance_of::<PyFloat>() {
                return Err(bad(py, what, "expected a python int, got float"));
            }
            let v: i64 =
                obj.extract().map_err(|_| bad(py, what, format!("expected a python int, got {}", type_name(obj))))?;
            Ok(Leaf::scalar(DType::I64, v.to_le_bytes()))
        }
        value_kind::BOOL => {
            let v: bool =
                obj.extract().map_err(|_| bad(py, what, format!("expected a python bool, got {}", type_name(obj))))?;
            Ok(Leaf::scalar(DType::Bool, [v as u8, 0, 0, 0, 0, 0, 0, 0]))
        }
        // Its UTF-8 bytes, which the library compares with the exported string.
        value_kind::STR => {
            let v: String =
                obj.extract().map_err(|_| bad(py, what, format!("expected a python str, got {}", type_name(obj))))?;
            Ok(Leaf::owned(DType::U8, vec![v.len() as i64], v.into_bytes().into_boxed_slice()))
        }
        value_kind::NONE if obj.is_none() => Ok(Leaf::scalar(DType::U8, [0; 8])),
        value_kind::NONE => {
            Err(bad(py, what, format!("export specialised this input to None, got {}", type_name(obj))))
        }
        _ => tensor(np, obj, what),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

fn tensor(np: &Numpy, obj: &Bound<'_, PyAny>, what: &dyn std::fmt::Display) -> PyResult<Leaf> {
    let py = obj.py();
    if obj.is_instance_of::<PyBool>() || obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>() {
        return Err(bad(py, what, format!("expected a tensor, got a python {}", type_name(obj))));
    }
    // DLPack first: the cheapest way to numpy's memory too (a capsule, no dict). numpy
    // refuses what DLPack cannot say (read-only arrays, bfloat16 from ml_dtypes, byte
    // strides that are not whole elements): those go through __array_interface__.
    let dlpack_error = match dlpack(obj, what) {
        Ok(leaf) => return Ok(leaf),
        Err(e) => e,
    };
    if let Some(ai) = obj.getattr_opt("__array_interface__")? {
        if let Some(leaf) = array_interface(np, obj, &ai, what)? {
            return Ok(leaf);
        }
    } else if obj.hasattr("__dlpack__")? {
        return Err(dlpack_error);
    }
    // Anything else numpy can view or build (objects with __array__, nested lists): a new
    // array, which the caller does not see (torch's aot_load would refuse these).
    let arr = np.asarray.bind(py).call1((obj,))?;
    let ai = arr.getattr("__array_interface__")?;
    array_interface(np, &arr, &ai, what)?
        .ok_or_else(|| bad(py, what, "numpy.asarray gave an array without a data pointer"))
}

/// The element type of a numpy `__array_interface__` typestr (e.g. "<f4").
fn numpy_dtype(obj: &Bound<'_, PyAny>, typestr: &str) -> PyResult<Result<DType, String>> {
    let b = typestr.as_bytes();
    if b.len() < 3 {
        return Ok(Err(format!("unknown typestr '{typestr}'")));
    }
    let size: usize = match typestr[2..].parse() {
        Ok(s) => s,
        Err(_) => return Ok(Err(format!("unknown typestr '{typestr}'"))),
    };
    if b[0] == b'>' && size > 1 && cfg!(target_endian = "little") {
        return Ok(Err(format!(
            "big-endian elements ('{typestr}') are not supported: convert with .astype('<{}')",
            &typestr[1..]
        )));
    }
    let dtype = match (b[1], size) {
        (b'f', 2) => DType::F16,
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        (b'i', 1) => DType::I8,
        (b'i', 2) => DType::I16,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'u', 1) => DType::U8,
        (b'b', 1) => DType::Bool,
        // ml_dtypes.bfloat16 shows as raw 2-byte records.
        (b'V', 2) if obj.getattr("dtype")?.getattr("name")?.extract::<String>()? == "bfloat16" => DType::BF16,
        _ => {
            let name = obj
                .getattr("dtype")
                .and_then(|d| d.str())
                .map(|s| s.to_string())
                .unwrap_or_else(|_| typestr.to_string());
            return Ok(Err(format!(
                "dtype {name} is not one aotc supports (uint8, int8..int64, float16, bfloat16, float32, float64, bool)"
            )));
        }
    };
    Ok(Ok(dtype))
}

/// A leaf over the memory of an object with `__array_interface__` (version 3). None
/// when the interface describes no data pointer (a buffer object): the caller then goes
/// through numpy.
fn array_interface(
    np: &Numpy,
    obj: &Bound<'_, PyAny>,
    ai: &Bound<'_, PyAny>,
    what: &dyn std::fmt::Display,
) -> PyResult<Option<Leaf>> {
    let py = obj.py();
    let ai = ai.cast::<PyDict>().map_err(|_| bad(py, what, "__array_interface__ is not a dict"))?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        ai.get_item(k)?.ok_or_else(|| bad(py, what, format!("__array_interface__ lacks '{k}'")))
    };
    let data = get("data")?;
    let Ok(data) = data.cast::<PyTuple>() else { return Ok(None) };
    let (addr, readonly): (usize, bool) = data.extract()?;
    let shape: Vec<i64> = get("shape")?.extract()?;
    let typestr: String = get("typestr")?.extract()?;
    let dtype = numpy_dtype(obj, &typestr)?.map_err(|e| bad(py, what, e))?;
    let size = dtype.size() as i64;
    let strides = match ai.get_item("strides")? {
        Some(s) if !s.is_none() => {
            let bytes: Vec<i64> = s.extract()?;
            if bytes.iter().any(|b| b % size != 0) {
                // Strides that are not whole elements (a view into records): a contiguous
                // copy, written back after the call if the program mutates it.
                let copy = np.ascontiguousarray.bind(py).call1((obj,))?;
                let ai = copy.getattr("__array_interface__")?;
                let mut leaf = array_interface(np, &copy, &ai, what)?
                    .ok_or_else(|| bad(py, what, "numpy gave an array without a data pointer"))?;
                leaf.readonly = readonly;
                leaf.copied_from = Some((obj.clone().unbind(), copy.unbind()));
                return Ok(Some(leaf));
            }
            Some(bytes.iter().map(|b| b / size).collect())
        }
        _ => None,
    };
    Ok(Some(Leaf {
        data: addr as *mut c_void,
        byte_offset: 0,
        device: DLDevice { device_type: DL_CPU, device_id: 0 },
        dtype: dtype.to_dlpack(),
        shape,
        strides,
        scalar: None,
        readonly,
        torch: false,
        _owner: Some(obj.clone().unbind()),
        copied_from: None,
    }))
}

/// The DLTensor of an unconsumed "dltensor" capsule (a copy of the descriptor; its
/// pointers stay valid while the capsule is alive).
pub fn read_capsule(capsule: &Bound<'_, PyCapsule>) -> Result<AotcTensor, String> {
    let ptr = capsule
        .pointer_checked(Some(c"dltensor"))
        .map_err(|_| "__dlpack__ returned a capsule that is not an unconsumed 'dltensor'".to_string())?;
    // SAFETY: a capsule named "dltensor" holds a DLManagedTensor, valid until the capsule
    // is consumed or destroyed; the caller holds the capsule.
    Ok(unsafe { ptr.cast::<DLManagedTensor>().as_ref().dl_tensor })
}

/// `obj` with its negative and conjugate bits resolved (torch's `resolve_neg()`,
/// `resolve_conj()`: a copy), or None when it has neither (or is no torch tensor).
fn resolve_lazy_bits<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    for (bit, resolve) in [("is_neg", "resolve_neg"), ("is_conj", "resolve_conj")] {
        if let Some(is_set) = obj.getattr_opt(bit)? {
            if is_set.call0()?.is_truthy()? {
                return Ok(Some(obj.call_method0(resolve)?));
            }
        }
    }
    Ok(None)
}

/// A leaf over a `__dlpack__` producer's memory. The capsule is read, not consumed: it
/// stays alive in the leaf and releases the tensor when dropped.
fn dlpack(obj: &Bound<'_, PyAny>, what: &dyn std::fmt::Display) -> PyResult<Leaf> {
    let py = obj.py();
    // A torch tensor with its negative (or conjugate) bit set holds -v (conj(v)) in
    // memory, which DLPack exports as it is: the model takes the values the tensor has,
    // resolved into a copy as torch's kernels do (written back if the program mutates it).
    if let Some(resolved) = resolve_lazy_bits(obj)? {
        let mut leaf = dlpack(&resolved, what)?;
        leaf.copied_from = Some((obj.clone().unbind(), resolved.unbind()));
        return Ok(leaf);
    }
    let capsule = match obj.call_method0("__dlpack__") {
        Ok(c) => c,
        // torch refuses to export a tensor that requires grad; its detached view shares
        // the memory.
        Err(e) if obj.hasattr("detach")? => obj.call_method0("detach")?.call_method0("__dlpack__").map_err(|_| e)?,
        Err(e) => return Err(e),
    };
    let capsule = capsule.cast_into::<PyCapsule>().map_err(|_| bad(py, what, "__dlpack__ did not return a capsule"))?;
    let t = read_capsule(&capsule).map_err(|e| bad(py, what, e))?;
    let ndim = usize::try_from(t.ndim).map_err(|_| bad(py, what, format!("DLPack tensor of rank {}", t.ndim)))?;
    let read = |p: *const i64| -> Vec<i64> {
        if ndim == 0 || p.is_null() {
            vec![]
        } else {
            // SAFETY: DLPack's shape (and non-null strides) hold ndim entries.
            unsafe { std::slice::from_raw_parts(p, ndim).to_vec() }
        }
    };
    if ndim > 0 && t.shape.is_null() {
        return Err(bad(py, what, "DLPack tensor without a shape"));
    }
    let shape = read(t.shape);
    let strides = if t.strides.is_null() { None } else { Some(read(t.strides)) };
    let ty = obj.get_type();
    let module = if ty.name().is_ok_and(|n| n == "ndarray") {
        String::new()
    } else {
        ty.module().map(|m| m.to_string()).unwrap_or_default()
    };
    Ok(Leaf {
        data: t.data,
        byte_offset: t.byte_offset,
        device: t.device,
        dtype: t.dtype,
        shape,
        strides,
        scalar: None,
        readonly: false,
        torch: module == "torch" || module.starts_with("torch."),
        _owner: Some(capsule.into_any().unbind()),
        copied_from: None,
    })
}
