//! `aotc.DeviceArray`: an output of a model on a GPU when the call's inputs were not
//! torch tensors. It owns one device allocation (freed when the last reference goes,
//! its own or that of a DLPack consumer) and hands it to any framework through DLPack
//! (`__dlpack__`, `__dlpack_device__`: kDLCUDA): `torch.from_dlpack(a)`,
//! `cupy.from_dlpack(a)`, `jax.dlpack.from_dlpack(a)` take it without a copy, and so does
//! a model's next call. `a.numpy()` copies it to the host, explicitly.
//!
//! The data is ready when the call that made it returns (the library waits for its
//! stream), so `__dlpack__` has nothing to synchronise and ignores `stream`.

use crate::error::{raise, to_py};
use crate::leaf::DLManagedTensor;
use crate::outputs;
use aotc_abi::{status, DType, DL_CUDA};
use aotc_runtime::cuda::Gpu;
use aotc_runtime::{AotcTensor, DLDevice, Error};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{ffi, IntoPyObjectExt};
use std::ffi::{c_void, CStr};
use std::sync::Arc;

/// The name of an unconsumed DLPack capsule (a consumer renames it "used_dltensor").
const DLTENSOR: &CStr = c"dltensor";

#[pyclass(module = "aotc._native", name = "DeviceArray", frozen)]
pub struct DeviceArray {
    gpu: Arc<Gpu>,
    ptr: u64,
    shape: Vec<i64>,
    dtype: DType,
    nbytes: usize,
}

impl DeviceArray {
    /// A new, uninitialised contiguous array of `shape` and `dtype` on `gpu`.
    pub fn new(gpu: &Arc<Gpu>, shape: &[i64], dtype: DType) -> Result<DeviceArray, Error> {
        let nbytes = aotc_abi::layout::byte_len(shape, dtype.size())
            .ok_or_else(|| Error::new(status::SHAPE, format!("an array of shape {shape:?} does not fit in memory")))?;
        let ptr = gpu.alloc(nbytes)?;
        Ok(DeviceArray { gpu: gpu.clone(), ptr, shape: shape.to_vec(), dtype, nbytes })
    }

    /// The device address of the data.
    pub fn address(&self) -> usize {
        self.ptr as usize
    }
}

impl Drop for DeviceArray {
    fn drop(&mut self) {
        // SAFETY: allocated by `new` on this Gpu, freed once, here; every DLPack export
        // holds a reference to this array, so no consumer can still use the memory.
        unsafe { self.gpu.free(self.ptr) };
    }
}

/// What a `__dlpack__` capsule points to: the managed tensor (first: the capsule's
/// pointer is this struct's), the shape it points into, and the array it keeps alive.
#[repr(C)]
struct Export {
    managed: DLManagedTensor,
    shape: Vec<i64>,
    owner: Py<DeviceArray>,
}

/// The managed tensor's deleter: drops the [`Export`] (and its reference to the array).
unsafe extern "C" fn delete_export(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the tensor of an Export that `__dlpack__` leaked into its
    // capsule, and its manager_ctx that Export; DLPack calls the deleter once.
    let mut export = Some(unsafe { Box::from_raw((*managed).manager_ctx.cast::<Export>()) });
    // Releasing the array needs the interpreter; while it shuts down, the array is leaked.
    if Python::try_attach(|_| drop(export.take())).is_none() {
        std::mem::forget(export);
    }
}

/// The capsule's destructor: an unconsumed capsule still owns its tensor.
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: Python calls this with the capsule, attached; a capsule still named
    // "dltensor" holds the DLManagedTensor `__dlpack__` made, not yet deleted (a consumer
    // renames the capsule when it takes the tensor over).
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
            if let Some(delete) = (*managed).deleter {
                delete(managed);
            }
        }
    }
}

#[pymethods]
impl DeviceArray {
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The element type's name ("float32", "bfloat16"...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    /// "cuda:N".
    #[getter]
    fn device(&self) -> String {
        format!("cuda:{}", self.gpu.ordinal)
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The device address of the data (contiguous, row-major).
    #[getter]
    fn data_ptr(&self) -> u64 {
        self.ptr
    }

    /// DLPack: (kDLCUDA = 2, the device's ordinal).
    fn __dlpack_device__(&self) -> (i32, i32) {
        (DL_CUDA, self.gpu.ordinal)
    }

    /// DLPack: a "dltensor" capsule over the array's memory (no copy), which keeps the
    /// array alive until the consumer is done with it. `stream` is not needed: the data
    /// is ready. Refuses (BufferError) a copy or another device.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // The legacy capsule suits every consumer, whatever version it could take.
        let _ = (stream, max_version);
        let this = slf.get();
        let here = (DL_CUDA, this.gpu.ordinal);
        if dl_device.is_some_and(|d| d != here) {
            return Err(PyBufferError::new_err(format!(
                "aotc.DeviceArray on cuda:{} cannot be exported to device {dl_device:?}",
                here.1
            )));
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err("aotc.DeviceArray exports its memory as is: it does not copy"));
        }
        let export = Box::into_raw(Box::new(Export {
            managed: DLManagedTensor {
                dl_tensor: AotcTensor {
                    data: this.ptr as *mut c_void,
                    device: DLDevice { device_type: DL_CUDA, device_id: this.gpu.ordinal },
                    ndim: this.shape.len() as i32,
                    dtype: this.dtype.to_dlpack(),
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_export),
            },
            shape: this.shape.clone(),
            owner: slf.clone().unbind(),
        }));
        // SAFETY: `export` is a fresh, valid Box pointer; the shape's heap memory does not
        // move with it.
        unsafe {
            (*export).managed.dl_tensor.shape = (*export).shape.as_mut_ptr();
            (*export).managed.manager_ctx = export.cast();
        }
        // SAFETY: the pointer and the static name outlive the capsule; the destructor
        // frees the Export unless a consumer took it over.
        let capsule = unsafe { ffi::PyCapsule_New(export.cast(), DLTENSOR.as_ptr(), Some(capsule_destructor)) };
        if capsule.is_null() {
            // SAFETY: no capsule owns the Export: this is its only owner.
            drop(unsafe { Box::from_raw(export) });
            return Err(PyErr::fetch(slf.py()));
        }
        // SAFETY: PyCapsule_New returned a new reference.
        Ok(unsafe { Bound::from_owned_ptr(slf.py(), capsule) })
    }

    /// A new numpy array holding a copy of the data (numpy lacks bfloat16 without
    /// ml_dtypes: such an array cannot be copied this way).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let np_dtype = py.import("aotc._arrays")?.call_method1("dtype", (self.dtype.name(), false))?;
        if np_dtype.is_none() {
            return Err(raise(
                py,
                status::DTYPE,
                format!("numpy lacks {}: install ml_dtypes (pip install ml_dtypes)", self.dtype.name()),
            ));
        }
        let empty = py.import("numpy")?.getattr("empty")?;
        let (arr, addr) = outputs::empty(py, &empty, &self.shape, &np_dtype.unbind())?;
        let (gpu, src, len) = (&self.gpu, self.ptr, self.nbytes);
        py.detach(|| {
            // SAFETY: `addr` is the data of the fresh contiguous array `arr` (alive here) of
            // the same shape and dtype, so `len` bytes; nothing else references it yet.
            let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            // SAFETY: the array's allocation holds `len` bytes.
            unsafe { gpu.download(src, dst) }
        })
        .map_err(|e| to_py(py, e))?;
        Ok(arr)
    }

    fn __repr__(&self) -> String {
        format!(
            "aotc.DeviceArray(shape={:?}, dtype={}, device='cuda:{}')",
            self.shape,
            self.dtype.name(),
            self.gpu.ordinal
        )
    }
}

/// A new device array of `shape` and `dtype` as a Python object, and its data address.
pub fn allocate(py: Python<'_>, gpu: &Arc<Gpu>, shape: &[i64], dtype: DType) -> PyResult<(Py<PyAny>, usize)> {
    let array = DeviceArray::new(gpu, shape, dtype).map_err(|e| to_py(py, e))?;
    let addr = array.address();
    Ok((array.into_py_any(py)?, addr))
}
