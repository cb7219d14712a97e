//! Extern kernels (calls into the CPU support library) in PTX, with the support library's
//! semantics: the FFT ([`super::fft`]) and nonzero's scan ([`super::nonzero`]), the two
//! that CUDA lowering leaves. Any other extern has no PTX form.

use super::kernel::{Kx, R};
use super::{fft, nonzero, Work};
use crate::ir::ExternCall;

/// Whether `call` has a PTX form.
pub fn has_ptx_form(call: &ExternCall) -> bool {
    matches!(call.name, aotc_abi::fft::SYMBOL | nonzero::SYMBOL)
}

/// The body of `call`'s entry, and its work.
pub fn emit(kx: &mut Kx, call: &ExternCall) -> R<Work> {
    match call.name {
        aotc_abi::fft::SYMBOL => fft::fft(kx, call),
        nonzero::SYMBOL => nonzero::nonzero(kx, call),
        other => Err(format!("the extern call {other} has no PTX form")),
    }
}
