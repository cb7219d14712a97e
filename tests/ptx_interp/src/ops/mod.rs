//! The semantics of the operations, as pure functions on register bit patterns.

pub(crate) mod cvt;
pub(crate) mod float;
pub(crate) mod int;
