//! `aotc.Error`: every failure of a call, a load or a buffer access, carrying the
//! library's message (`str(e)`), its status code (`e.code`) and the code's name
//! (`e.status`, as in aotc.h).

use aotc_runtime::Error as RtError;
use pyo3::prelude::*;

pyo3::create_exception!(aotc, Error, pyo3::exceptions::PyRuntimeError, "A failure reported by aotc (or its compiled library): str(e) is the library's message, e.code its AotcStatus and e.status the status's name.");

/// The Python exception for a runtime error.
pub fn to_py(py: Python<'_>, e: RtError) -> PyErr {
    raise(py, e.code, e.message)
}

/// An `aotc.Error` with status `code` and `message`.
pub fn raise(py: Python<'_>, code: i32, message: impl Into<String>) -> PyErr {
    let err = PyErr::new::<Error, _>(message.into());
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail short of memory
    // exhaustion; the error then still carries its message.
    let _ = value.setattr("code", code);
    let _ = value.setattr("status", aotc_abi::status::name(code));
    err
}
