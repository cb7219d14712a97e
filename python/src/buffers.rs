//! Reading and writing an instance's buffers (its state across calls) from Python arrays.

use crate::call::Descriptors;
use crate::error::{raise, to_py};
use crate::leaf::{self, Label, Leaf};
use crate::model::Model;
use crate::outputs;
use aotc_abi::{status, value_kind};
use aotc_runtime::{AotcTensor, DLDevice, DL_CPU};
use pyo3::prelude::*;

impl Model {
    fn buffer_index(&self, py: Python<'_>, name: &str) -> PyResult<usize> {
        self.buffers.iter().position(|b| b.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.buffers.iter().map(|b| b.name.as_str()).collect();
            raise(py, status::NOT_FOUND, format!("no buffer named '{name}' (the buffers are {names:?})"))
        })
    }

    /// A new numpy array holding buffer `name`'s current value.
    pub(crate) fn read_buffer_impl<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let i = self.buffer_index(py, name)?;
        let info = &self.buffers[i];
        let dtype =
            info.dtype.ok_or_else(|| raise(py, status::INTERNAL, format!("buffer '{name}' has an unknown dtype")))?;
        let np_dtype = self.support.buffer_numpy[i].as_ref().ok_or_else(|| {
            raise(
                py,
                status::DTYPE,
                format!("buffer '{name}' is {}, which numpy lacks: install ml_dtypes", dtype.name()),
            )
        })?;
        let (arr, addr) = outputs::empty(py, self.support.empty.bind(py), &info.sizes, np_dtype)?;
        let mut shape = info.sizes.clone();
        let dst = Descriptors(vec![AotcTensor {
            data: addr as *mut std::ffi::c_void,
            device: DLDevice { device_type: DL_CPU, device_id: 0 },
            ndim: shape.len() as i32,
            dtype: dtype.to_dlpack(),
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }]);
        let name = name.to_string();
        py.detach(move || {
            let dst = dst;
            // SAFETY: dst describes the fresh contiguous array `arr` (of the buffer's dtype
            // and shape), which this frame keeps alive, and `shape`, alive until here.
            unsafe { self.lock().read_buffer_raw(&name, &dst.0[0]) }
        })
        .map_err(|e| to_py(py, e))?;
        drop(shape);
        Ok(arr)
    }

    /// Overwrites buffer `name` with `value` (any array of its dtype and shape, strided or not).
    pub(crate) fn write_buffer_impl(&self, py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let i = self.buffer_index(py, name)?;
        let label = Label { what: "buffer", index: i, name };
        let mut leaf: Leaf = leaf::convert(&self.support.np, value, value_kind::TENSOR, &label)?;
        let src = Descriptors(vec![leaf.descriptor()]);
        let name = name.to_string();
        py.detach(move || {
            let src = src;
            // SAFETY: src was built from `leaf`, alive until after this returns.
            unsafe { self.lock().write_buffer_raw(&name, &src.0[0]) }
        })
        .map_err(|e| to_py(py, e))?;
        drop(leaf);
        Ok(())
    }
}
