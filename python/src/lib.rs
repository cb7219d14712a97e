//! `aotc._native`: the Python binding of the aotc loader (aotc-runtime). The package
//! `aotc` (python/aotc) wraps it; see its docstrings for the Python API.

mod buffers;
mod call;
mod device_array;
mod error;
mod leaf;
mod model;
mod outputs;
mod signature;
mod tree;
mod weights;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<error::Error>())?;
    m.add_class::<model::Model>()?;
    m.add_class::<device_array::DeviceArray>()?;
    m.add("ABI_VERSION", aotc_abi::ABI_VERSION)?;
    Ok(())
}
