//! Calls on caller-described memory: DLPack-style descriptors in, borrowed views of the
//! instance's outputs back. For bindings (Python) that hand over their own arrays, strided
//! or not, without copying them into [`Tensor`](crate::Tensor)s first.

use crate::{Error, Model};
use aotc_abi::{status, AotcTensor, DLDevice, DType, DL_CPU};
use std::ffi::CString;

/// One output of the last call, borrowed from the instance: valid until its next call.
#[derive(Debug)]
pub struct OutputView<'a> {
    pub dtype: DType,
    pub shape: Vec<i64>,
    /// The contiguous elements (`shape`'s element count times the dtype's size).
    pub data: &'a [u8],
}

fn empty_descriptor() -> AotcTensor {
    AotcTensor {
        data: std::ptr::null_mut(),
        device: DLDevice { device_type: DL_CPU, device_id: 0 },
        ndim: 0,
        dtype: DType::F32.to_dlpack(),
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

fn c_name(name: &str) -> Result<CString, Error> {
    CString::new(name).map_err(|_| Error::new(status::INVALID_ARGUMENT, "name holds a NUL byte"))
}

impl Model {
    /// Runs one call on the flat inputs `inputs` (the leaves of in_spec, each a DLPack
    /// descriptor; strides may be null or any, the library copies what is not contiguous).
    /// Mutated inputs are written back through their descriptors. Returns views of the
    /// outputs, which the instance owns until its next call.
    ///
    /// # Safety
    /// Each descriptor must be valid for the library to read as `aotc.h` describes:
    /// `shape` (and `strides` unless null) holding `ndim` entries, and `data` +
    /// `byte_offset` holding every byte the shape and strides reach, writable where the
    /// program mutates that input. The memory must stay valid, and no other thread may
    /// write it, until this returns.
    pub unsafe fn run_raw(&mut self, inputs: &[AotcTensor]) -> Result<Vec<OutputView<'_>>, Error> {
        let mut outs = vec![empty_descriptor(); self.outputs.len()];
        let n_in = i64::try_from(inputs.len()).map_err(|_| Error::new(status::INPUT_COUNT, "too many inputs"))?;
        // SAFETY: `inputs` and `outs` are arrays of the stated lengths; the caller vouches
        // for the memory the input descriptors point to.
        let rc = unsafe { (self.fns.run)(self.handle, inputs.as_ptr(), n_in, outs.as_mut_ptr(), outs.len() as i64) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        outs.iter().zip(&self.outputs).map(|(t, info)| {
            let bad = |what: &str| Error::new(status::INTERNAL, format!("output '{}': {what}", info.name));
            let dtype = DType::from_dlpack(t.dtype).ok_or_else(|| bad("unknown dtype"))?;
            if usize::try_from(t.ndim) != Ok(info.sizes.len()) {
                return Err(bad(&format!("rank {}, expected {}", t.ndim, info.sizes.len())));
            }
            // SAFETY: on success each output points to ndim sizes and contiguous data owned
            // by the instance, valid until its next call (the borrow of self ensures that).
            let shape = if info.sizes.is_empty() { vec![] } else { unsafe { std::slice::from_raw_parts(t.shape, info.sizes.len()).to_vec() } };
            let n = aotc_abi::layout::byte_len(&shape, dtype.size()).ok_or_else(|| bad(&format!("invalid shape {shape:?}")))?;
            // SAFETY: as above: n bytes of contiguous data.
            let data: &[u8] = if n == 0 { &[] } else { unsafe { std::slice::from_raw_parts(t.data as *const u8, n) } };
            Ok(OutputView { dtype, shape, data })
        }).collect()
    }

    /// Copies buffer `name` into the memory `dst` describes (same dtype and shape, any
    /// strides).
    ///
    /// # Safety
    /// `dst` must describe writable memory as `aotc.h` requires of a descriptor, valid
    /// and written by no one else until this returns.
    pub unsafe fn read_buffer_raw(&self, name: &str, dst: &AotcTensor) -> Result<(), Error> {
        let c = c_name(name)?;
        // SAFETY: valid handle and name; the caller vouches for dst.
        let rc = unsafe { (self.fns.buffer_read)(self.handle, c.as_ptr(), dst) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(())
    }

    /// Overwrites buffer `name` from the memory `src` describes (same dtype and shape,
    /// any strides).
    ///
    /// # Safety
    /// `src` must describe readable memory as `aotc.h` requires of a descriptor, valid
    /// until this returns.
    pub unsafe fn write_buffer_raw(&mut self, name: &str, src: &AotcTensor) -> Result<(), Error> {
        let c = c_name(name)?;
        // SAFETY: valid handle and name; the caller vouches for src.
        let rc = unsafe { (self.fns.buffer_write)(self.handle, c.as_ptr(), src) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(())
    }
}
