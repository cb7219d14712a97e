//! Weights of an instance: where [`Model::load_with`] takes them from, and swapping them
//! ([`Model::load_weights`]) through the `aotc.h` weights calls.

use crate::{sym, Error, Fns, Model};
use aotc_abi::{fn_types as ft, status, symbols, AotcModel};
use libloading::Library;
use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};

/// Where an instance's weights come from.
#[derive(Clone, Debug, Default)]
pub enum Weights<'a> {
    /// The library's own: linked into it, or the weights file its compilation wrote beside
    /// it (`aotc compile --external-weights`), which must be that compilation's.
    #[default]
    Default,
    /// A weights file of the library's structure (the same tensors, dtypes and shapes,
    /// written by `aotc compile --external-weights`), mapped read-only and shared by the
    /// instances of this process that use it.
    File(PathBuf),
    /// The bytes of such a file; the library copies them.
    Bytes(&'a [u8]),
}

pub(crate) struct WeightsFns {
    create: ft::ModelCreateWeights,
    create_bytes: ft::ModelCreateWeightsBytes,
    load: ft::LoadWeights,
    load_bytes: ft::LoadWeightsBytes,
}

impl WeightsFns {
    pub(crate) fn find(lib: &Library) -> Option<WeightsFns> {
        Some(WeightsFns {
            create: sym(lib, symbols::MODEL_CREATE_WEIGHTS).ok()?,
            create_bytes: sym(lib, symbols::MODEL_CREATE_WEIGHTS_BYTES).ok()?,
            load: sym(lib, symbols::LOAD_WEIGHTS).ok()?,
            load_bytes: sym(lib, symbols::LOAD_WEIGHTS_BYTES).ok()?,
        })
    }
}

fn missing() -> Error {
    Error::new(
        status::INVALID_ARGUMENT,
        "this library was compiled before aotc could load weights (it lacks aotc_load_weights): compile it again",
    )
}

fn c_path(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::new(status::INVALID_ARGUMENT, format!("{}: the path holds a NUL byte", path.display())))
}

/// Creates an instance: the status and the handle (null unless OK).
pub(crate) fn create(
    lib: &Library,
    fns: &Fns,
    device: &CString,
    threads: i64,
    weights: &Weights,
) -> Result<(i32, *mut AotcModel), Error> {
    let mut handle = std::ptr::null_mut();
    let rc = match (weights, &fns.weights) {
        (Weights::Default, _) => {
            let create: ft::ModelCreateThreads = sym(lib, symbols::MODEL_CREATE_THREADS)?;
            // SAFETY: valid C string and out pointer.
            unsafe { create(device.as_ptr(), threads, &mut handle) }
        }
        (_, None) => return Err(missing()),
        (Weights::File(path), Some(w)) => {
            let path = c_path(path)?;
            // SAFETY: valid C strings and out pointer.
            unsafe { (w.create)(device.as_ptr(), threads, path.as_ptr(), &mut handle) }
        }
        (Weights::Bytes(bytes), Some(w)) => {
            // SAFETY: bytes is readable for its length during the call; the library copies it.
            unsafe {
                (w.create_bytes)(
                    device.as_ptr(),
                    threads,
                    bytes.as_ptr().cast::<c_void>(),
                    bytes.len() as u64,
                    &mut handle,
                )
            }
        }
    };
    Ok((rc, handle))
}

impl Model {
    fn weights_fns(&self) -> Result<&WeightsFns, Error> {
        self.fns.weights.as_ref().ok_or_else(missing)
    }

    /// Swaps in the weights file at `path` (the library's structure: the same tensors,
    /// dtypes and shapes; the values may differ). Checked first: on error the instance is
    /// unchanged. State buffers restart from the file's initial values.
    pub fn load_weights(&mut self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = c_path(path.as_ref())?;
        // SAFETY: valid handle, used by this thread only (&mut self), and C string.
        let rc = unsafe { (self.weights_fns()?.load)(self.handle, path.as_ptr()) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(())
    }

    /// [`Model::load_weights`] from the bytes of a weights file (copied).
    pub fn load_weights_bytes(&mut self, bytes: &[u8]) -> Result<(), Error> {
        // SAFETY: valid handle, used by this thread only; bytes readable for its length.
        let rc = unsafe { (self.weights_fns()?.load_bytes)(self.handle, bytes.as_ptr().cast(), bytes.len() as u64) };
        if rc != status::OK {
            return Err(self.last_error(rc));
        }
        Ok(())
    }
}
