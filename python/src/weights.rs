//! Weights of an instance from Python: `aotc.load(path, weights=...)` and
//! `Model.load_weights(...)`, each taking a weights file's path or its bytes.

use crate::error::to_py;
use crate::model::Model;
use aotc_runtime::Weights;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use std::path::PathBuf;

/// A weights argument: the bytes of a weights file (bytes, bytearray: copied by the
/// library), or its path (str or os.PathLike).
pub enum PyWeights {
    Path(PathBuf),
    Bytes(PyBackedBytes),
}

impl PyWeights {
    pub fn extract(obj: &Bound<'_, PyAny>) -> PyResult<PyWeights> {
        if let Ok(b) = obj.extract::<PyBackedBytes>() {
            return Ok(PyWeights::Bytes(b));
        }
        obj.extract::<PathBuf>().map(PyWeights::Path).map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "weights: expected a path (str, os.PathLike) or bytes, got {}",
                obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })
    }

    pub fn source(&self) -> Weights<'_> {
        match self {
            PyWeights::Path(p) => Weights::File(p.clone()),
            PyWeights::Bytes(b) => Weights::Bytes(b),
        }
    }
}

impl Model {
    /// `Model.load_weights`: see its docstring in model.rs.
    pub(crate) fn load_weights_impl(&self, py: Python<'_>, weights: &Bound<'_, PyAny>) -> PyResult<()> {
        let w = PyWeights::extract(weights)?;
        py.detach(|| {
            let mut m = self.lock();
            match &w {
                PyWeights::Path(p) => m.load_weights(p),
                PyWeights::Bytes(b) => m.load_weights_bytes(b),
            }
        })
        .map_err(|e| to_py(py, e))
    }
}
