//! The outputs of a call as Python values. On the CPU: new numpy arrays (torch tensors
//! sharing them when the inputs were torch tensors) that the library writes into
//! (`aotc_run_into`), or, where an output's shape depends on the data, copied once out of
//! the instance's memory. On a GPU the same, in device memory: torch tensors on the
//! model's device when the inputs were torch tensors, else `aotc.DeviceArray`s. Python-
//! scalar outputs come back as python floats, ints and bools.

use crate::device_array;
use crate::error::{raise, to_py};
use crate::leaf;
use crate::model::Model;
use aotc_abi::{status, value_kind, DType};
use aotc_runtime::cuda::Gpu;
use aotc_runtime::{AotcTensor, DLDevice, OutputView, ValueInfo};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyTuple};
use std::sync::Arc;

/// A new C-contiguous numpy array of `shape` and numpy dtype `dtype` made by `np_empty`
/// (numpy.empty), and its data address.
pub fn empty<'py>(
    py: Python<'py>,
    np_empty: &Bound<'py, PyAny>,
    shape: &[i64],
    dtype: &Py<PyAny>,
) -> PyResult<(Bound<'py, PyAny>, usize)> {
    let arr = np_empty.call1((PyTuple::new(py, shape)?, dtype.bind(py)))?;
    if let Some(addr) = dlpack_address(&arr, shape) {
        return Ok((arr, addr));
    }
    let ai = arr.getattr("__array_interface__")?;
    let ai = ai.cast::<PyDict>().map_err(|_| {
        raise(py, status::INTERNAL, "numpy.empty gave an array whose __array_interface__ is not a dict")
    })?;
    let (addr, _readonly): (usize, bool) =
        ai.get_item("data")?.ok_or_else(|| raise(py, status::INTERNAL, "numpy array without data"))?.extract()?;
    let strides = ai.get_item("strides")?;
    if strides.is_some_and(|s| !s.is_none()) {
        return Err(raise(py, status::INTERNAL, "numpy.empty gave a non-contiguous array"));
    }
    Ok((arr, addr))
}

/// The data address of a fresh contiguous array through DLPack (cheaper than
/// __array_interface__); None where numpy cannot export it (ml_dtypes' bfloat16).
fn dlpack_address(arr: &Bound<'_, PyAny>, shape: &[i64]) -> Option<usize> {
    let capsule = arr.call_method0("__dlpack__").ok()?.cast_into::<PyCapsule>().ok()?;
    let t = leaf::read_capsule(&capsule).ok()?;
    if usize::try_from(t.ndim).ok()? != shape.len() {
        return None;
    }
    // The memory belongs to `arr`, which outlives the capsule dropped here.
    Some(t.data as usize + usize::try_from(t.byte_offset).ok()?)
}

/// Copies `data` into the `nbytes`-byte array at `addr`.
fn fill(py: Python<'_>, arr: &Bound<'_, PyAny>, addr: usize, data: &[u8]) -> PyResult<()> {
    let nbytes: usize = arr.getattr("nbytes")?.extract()?;
    if nbytes != data.len() {
        return Err(raise(
            py,
            status::INTERNAL,
            format!("output array holds {nbytes} bytes, the output {}", data.len()),
        ));
    }
    if !data.is_empty() {
        // SAFETY: `addr` is the data of a fresh contiguous array of exactly data.len()
        // bytes (checked above) that nothing else references yet.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
    }
    Ok(())
}

/// A python scalar from a 0-dim output of `dtype` held in `data`.
pub fn scalar(py: Python<'_>, kind: i32, dtype: DType, data: &[u8]) -> PyResult<Py<PyAny>> {
    let bytes = |n: usize| -> PyResult<&[u8]> {
        data.get(..n).ok_or_else(|| raise(py, status::INTERNAL, "scalar output without data"))
    };
    let x: f64 = match dtype {
        DType::F64 => f64::from_le_bytes(bytes(8)?.try_into().expect("8 bytes")),
        DType::F32 => f32::from_le_bytes(bytes(4)?.try_into().expect("4 bytes")) as f64,
        DType::I64 => {
            let i = i64::from_le_bytes(bytes(8)?.try_into().expect("8 bytes"));
            return Ok(match kind {
                value_kind::BOOL => (i != 0).into_pyobject(py)?.to_owned().into_any().unbind(),
                _ => i.into_pyobject(py)?.into_any().unbind(),
            });
        }
        DType::Bool | DType::U8 => return Ok((bytes(1)?[0] != 0).into_pyobject(py)?.to_owned().into_any().unbind()),
        other => return Err(raise(py, status::INTERNAL, format!("scalar output of dtype {}", other.name()))),
    };
    Ok(match kind {
        value_kind::INT => (x as i64).into_pyobject(py)?.into_any().unbind(),
        value_kind::BOOL => (x != 0.0).into_pyobject(py)?.to_owned().into_any().unbind(),
        _ => x.into_pyobject(py)?.into_any().unbind(),
    })
}

/// The arrays a call writes its outputs into: one per output, of the `shapes` the call
/// computes, each with its data address (device memory on a GPU).
pub fn allocate(py: Python<'_>, model: &Model, shapes: &[Vec<i64>], torch: bool) -> PyResult<Vec<(Py<PyAny>, usize)>> {
    if let Some(gpu) = &model.gpu {
        return shapes
            .iter()
            .zip(&model.outputs)
            .map(|(shape, info)| allocate_on_device(py, model, gpu, shape, info, torch))
            .collect();
    }
    let dtypes = if torch { &model.support.out_torch } else { &model.support.out_numpy };
    shapes
        .iter()
        .zip(&model.outputs)
        .zip(dtypes)
        .map(|((shape, info), dtype)| {
            let dtype = dtype.as_ref().ok_or_else(|| {
                raise(py, status::DTYPE, format!("output '{}': no array type for {:?}", info.name, info.dtype))
            })?;
            let (arr, addr) = empty(py, model.support.empty.bind(py), shape, dtype)?;
            Ok((arr.unbind(), addr))
        })
        .collect()
}

fn known_dtype(py: Python<'_>, info: &ValueInfo) -> PyResult<DType> {
    info.dtype.ok_or_else(|| raise(py, status::INTERNAL, format!("output '{}' of unknown dtype", info.name)))
}

/// Device memory for output `info` of `shape`: a torch tensor on the model's device (the
/// inputs were torch tensors), else an aotc.DeviceArray (also for a python-scalar output,
/// read back by [`finish`]); and its address.
fn allocate_on_device(
    py: Python<'_>,
    model: &Model,
    gpu: &Arc<Gpu>,
    shape: &[i64],
    info: &ValueInfo,
    torch: bool,
) -> PyResult<(Py<PyAny>, usize)> {
    let dtype = known_dtype(py, info)?;
    if torch && info.kind == value_kind::TENSOR {
        let device = format!("cuda:{}", gpu.ordinal);
        let (tensor, addr): (Py<PyAny>, usize) =
            model.support.torch_empty.bind(py).call1((PyTuple::new(py, shape)?, dtype.name(), device))?.extract()?;
        return Ok((tensor, addr));
    }
    device_array::allocate(py, gpu, shape, dtype)
}

/// The descriptor of the contiguous array at `addr` on `device` that output `info` of
/// `shape` is written into (`shape` is where the descriptor's shape points).
pub fn descriptor(addr: usize, device: DLDevice, info: &ValueInfo, shape: &mut [i64]) -> AotcTensor {
    AotcTensor {
        data: addr as *mut std::ffi::c_void,
        device,
        ndim: shape.len() as i32,
        dtype: info.dtype.unwrap_or(DType::F32).to_dlpack(),
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

/// A python-scalar output of `dtype` from `addr` in device memory.
fn scalar_on_device(py: Python<'_>, gpu: &Gpu, addr: u64, kind: i32, dtype: DType) -> PyResult<Py<PyAny>> {
    let mut bytes = [0u8; 8];
    let bytes = bytes
        .get_mut(..dtype.size())
        .ok_or_else(|| raise(py, status::INTERNAL, format!("a scalar output of dtype {}", dtype.name())))?;
    // SAFETY: `addr` holds the 0-dim output, one element of `dtype`, on this device.
    unsafe { gpu.download(addr, bytes) }.map_err(|e| to_py(py, e))?;
    scalar(py, kind, dtype, bytes)
}

/// The outputs of a call from the arrays it wrote them into ([`allocate`]), in order.
pub fn finish(py: Python<'_>, model: &Model, arrays: Vec<(Py<PyAny>, usize)>, torch: bool) -> PyResult<Vec<Py<PyAny>>> {
    arrays
        .into_iter()
        .zip(&model.outputs)
        .map(|((arr, addr), info)| {
            let dtype = known_dtype(py, info)?;
            match (&model.gpu, info.kind) {
                // A numpy array the torch tensor is to share.
                (None, value_kind::TENSOR) if torch => {
                    Ok(model.support.to_torch.bind(py).call1((arr, dtype.name()))?.unbind())
                }
                (_, value_kind::TENSOR) => Ok(arr),
                (Some(gpu), kind) => scalar_on_device(py, gpu, addr as u64, kind, dtype),
                (None, kind) => {
                    // SAFETY: the call wrote the 0-dim output, one element of `dtype`, at addr,
                    // the data of `arr`, alive here.
                    let data = unsafe { std::slice::from_raw_parts(addr as *const u8, dtype.size()) };
                    scalar(py, kind, dtype, data)
                }
            }
        })
        .collect()
}

/// The outputs of the call that produced `views`, in order, copied.
pub fn convert(py: Python<'_>, model: &Model, views: &[OutputView<'_>], torch: bool) -> PyResult<Vec<Py<PyAny>>> {
    let dtypes = if torch { &model.support.out_torch } else { &model.support.out_numpy };
    views
        .iter()
        .zip(&model.outputs)
        .zip(dtypes)
        .map(|((v, info), dtype)| {
            if info.kind != value_kind::TENSOR {
                return scalar(py, info.kind, v.dtype, v.data);
            }
            if info.dtype != Some(v.dtype) {
                return Err(raise(
                    py,
                    status::INTERNAL,
                    format!(
                        "output '{}' came back as {}, its metadata says {:?}",
                        info.name,
                        v.dtype.name(),
                        info.dtype
                    ),
                ));
            }
            let dtype = dtype.as_ref().ok_or_else(|| {
                raise(py, status::DTYPE, format!("output '{}': no array type for {}", info.name, v.dtype.name()))
            })?;
            let (arr, addr) = empty(py, model.support.empty.bind(py), &v.shape, dtype)?;
            fill(py, &arr, addr, v.data)?;
            if torch {
                return Ok(model.support.to_torch.bind(py).call1((arr, v.dtype.name()))?.unbind());
            }
            Ok(arr.unbind())
        })
        .collect()
}

/// The outputs of a call on a GPU that left them in the instance's memory (`outputs`, as
/// the library described them), in order, copied into memory of their own.
pub fn convert_on_device(
    py: Python<'_>,
    model: &Model,
    gpu: &Arc<Gpu>,
    outputs: &[AotcTensor],
    torch: bool,
) -> PyResult<Vec<Py<PyAny>>> {
    outputs
        .iter()
        .zip(&model.outputs)
        .map(|(t, info)| {
            let dtype = known_dtype(py, info)?;
            if DType::from_dlpack(t.dtype) != Some(dtype) || usize::try_from(t.ndim) != Ok(info.sizes.len()) {
                return Err(raise(
                    py,
                    status::INTERNAL,
                    format!("output '{}' came back with another dtype or rank than its metadata's", info.name),
                ));
            }
            let src = t.data as u64 + t.byte_offset;
            if info.kind != value_kind::TENSOR {
                return scalar_on_device(py, gpu, src, info.kind, dtype);
            }
            // SAFETY: on success the library's output descriptors point to ndim sizes it owns.
            let shape = if info.sizes.is_empty() {
                vec![]
            } else {
                unsafe { std::slice::from_raw_parts(t.shape, info.sizes.len()).to_vec() }
            };
            let bytes = aotc_abi::layout::byte_len(&shape, dtype.size()).ok_or_else(|| {
                raise(py, status::INTERNAL, format!("output '{}': invalid shape {shape:?}", info.name))
            })?;
            let (arr, addr) = allocate_on_device(py, model, gpu, &shape, info, torch)?;
            // SAFETY: the instance's output holds `bytes` contiguous bytes on this device until
            // its next call (the caller holds the instance); `addr` is a fresh allocation of
            // as many, which nothing else uses yet.
            unsafe { gpu.copy(addr as u64, src, bytes) }.map_err(|e| to_py(py, e))?;
            Ok(arr)
        })
        .collect()
}
