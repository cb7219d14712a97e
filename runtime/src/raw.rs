//! Calls on caller-described memory: DLPack-style descriptors in, borrowed views of the
//! instance's outputs back. For bindings (Python) that hand over their own arrays, strided
//! or not, without copying them into [`Tensor`](crate::Tensor)s first.

use crate::{sym, Error, Model};
use aotc_abi::{fn_types as ft, status, symbols, AotcTensor, DLDevice, DType, DL_CPU};
use libloading::Library;
use std::ffi::CString;

/// The calls that write outputs into the caller's memory.
pub(crate) struct IntoFns {
    output_shapes: ft::OutputShapes,
    run_into: ft::RunInto,
}

impl IntoFns {
    pub(crate) fn find(lib: &Library) -> Option<IntoFns> {
        Some(IntoFns {
            output_shapes: sym(lib, symbols::OUTPUT_SHAPES).ok()?,
            run_into: sym(lib, symbols::RUN_INTO).ok()?,
        })
    }
}

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

/// An output descriptor's dtype, shape and byte length, checked against its metadata.
pub(crate) fn output_layout(t: &AotcTensor, info: &crate::ValueInfo) -> Result<(DType, Vec<i64>, usize), Error> {
    let bad = |what: &str| Error::new(status::INTERNAL, format!("output '{}': {what}", info.name));
    let dtype = DType::from_dlpack(t.dtype).ok_or_else(|| bad("unknown dtype"))?;
    if usize::try_from(t.ndim) != Ok(info.sizes.len()) {
        return Err(bad(&format!("rank {}, expected {}", t.ndim, info.sizes.len())));
    }
    // SAFETY: on success each output's shape points to ndim sizes the instance owns.
    let shape = if info.sizes.is_empty() {
        vec![]
    } else {
        unsafe { std::slice::from_raw_parts(t.shape, info.sizes.len()).to_vec() }
    };
    let n = aotc_abi::layout::byte_len(&shape, dtype.size()).ok_or_else(|| bad(&format!("invalid shape {shape:?}")))?;
    Ok((dtype, shape, n))
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
        if let crate::Device::Cuda(_) = self.device {
            return Err(Error::new(
                status::DEVICE,
                "run_raw reads outputs as host memory: on a CUDA instance use run_descriptors",
            ));
        }
        // SAFETY: the caller's contract.
        let outs = unsafe { self.run_descriptors(inputs) }?;
        outs.iter()
            .zip(&self.outputs)
            .map(|(t, info)| {
                let (dtype, shape, n) = output_layout(t, info)?;
                // SAFETY: on success each output of a CPU instance points to n bytes of
                // contiguous data owned by the instance, valid until its next call (the
                // borrow of self ensures that).
                let data: &[u8] =
                    if n == 0 { &[] } else { unsafe { std::slice::from_raw_parts(t.data as *const u8, n) } };
                Ok(OutputView { dtype, shape, data })
            })
            .collect()
    }

    /// Runs one call as [`Model::run_raw`] does and returns the outputs' descriptors as the
    /// library filled them: the instance's memory (device memory on a CUDA instance),
    /// valid until its next call.
    ///
    /// # Safety
    /// As [`Model::run_raw`] (device memory of the instance's GPU for CUDA tensors).
    pub unsafe fn run_descriptors(&mut self, inputs: &[AotcTensor]) -> Result<Vec<AotcTensor>, Error> {
        let mut outs = vec![empty_descriptor(); self.outputs.len()];
        // SAFETY: the caller's contract.
        unsafe { self.run_descriptors_into(inputs, &mut outs) }?;
        Ok(outs)
    }

    /// [`Model::run_descriptors`] filling the caller's `outputs` (one per output): a call
    /// that allocates nothing in steady state.
    ///
    /// # Safety
    /// As [`Model::run_raw`].
    pub unsafe fn run_descriptors_into(
        &mut self,
        inputs: &[AotcTensor],
        outputs: &mut [AotcTensor],
    ) -> Result<(), Error> {
        let n_in = i64::try_from(inputs.len()).map_err(|_| Error::new(status::INPUT_COUNT, "too many inputs"))?;
        // SAFETY: `inputs` and `outputs` are arrays of the stated lengths; the caller
        // vouches for the memory the input descriptors point to.
        let rc =
            unsafe { (self.fns.run)(self.handle, inputs.as_ptr(), n_in, outputs.as_mut_ptr(), outputs.len() as i64) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(())
    }

    fn run_into_fns(&self) -> Result<&IntoFns, Error> {
        self.fns.into.as_ref().ok_or_else(|| Error::new(status::INVALID_ARGUMENT, "this library was compiled before aotc could write outputs into the caller's memory (it lacks aotc_run_into): compile it again"))
    }

    /// Whether the library has [`Model::run_into_raw`] (libraries compiled before lack it).
    pub fn can_run_into(&self) -> bool {
        self.fns.into.is_some()
    }

    /// The shape of each output of a call on `inputs` (as [`Model::run_raw`] takes them),
    /// without running it; a dimension that depends on the data is -1.
    ///
    /// # Safety
    /// As [`Model::run_raw`]'s inputs (only read here).
    pub unsafe fn output_shapes_raw(&self, inputs: &[AotcTensor]) -> Result<Vec<Vec<i64>>, Error> {
        let fns = self.run_into_fns()?;
        let n_in = i64::try_from(inputs.len()).map_err(|_| Error::new(status::INPUT_COUNT, "too many inputs"))?;
        let ranks: Vec<usize> = self.outputs.iter().map(|o| o.sizes.len()).collect();
        let mut dims = vec![0i64; ranks.iter().sum()];
        // SAFETY: `inputs` holds n_in descriptors the caller vouches for; dims has room for
        // every output's dimensions.
        let rc =
            unsafe { (fns.output_shapes)(self.handle, inputs.as_ptr(), n_in, dims.as_mut_ptr(), dims.len() as i64) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        let mut rest = dims.as_slice();
        Ok(ranks
            .iter()
            .map(|&r| {
                let (shape, tail) = rest.split_at(r);
                rest = tail;
                shape.to_vec()
            })
            .collect())
    }

    /// Runs one call as [`Model::run_raw`] does, writing output `i` into the memory
    /// `outputs[i]` describes (its dtype, the shape the call computes, any strides).
    ///
    /// # Safety
    /// As [`Model::run_raw`]; and each output descriptor must describe writable memory as
    /// `aotc.h` requires, valid and used by no one else until this returns.
    pub unsafe fn run_into_raw(&mut self, inputs: &[AotcTensor], outputs: &[AotcTensor]) -> Result<(), Error> {
        let fns = self.run_into_fns()?;
        let n_in = i64::try_from(inputs.len()).map_err(|_| Error::new(status::INPUT_COUNT, "too many inputs"))?;
        // SAFETY: arrays of the stated lengths; the caller vouches for the memory.
        let rc = unsafe { (fns.run_into)(self.handle, inputs.as_ptr(), n_in, outputs.as_ptr(), outputs.len() as i64) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(())
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
