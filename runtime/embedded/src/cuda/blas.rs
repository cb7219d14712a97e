//! cuBLAS, opened at run time when it is there: a matmul of the plan then runs as one
//! strided-batched GEMM instead of the library's own PTX GEMM. TF32 stays off (cuBLAS's
//! default math mode), as PyTorch's float32 default.
//!
//! Where it is looked for, in order: `$AOTC_CUBLAS` (a path, or `none`: never); a copy the process has loaded
//! already (PyTorch's, from its wheels: `libcublas.so.13` for CUDA 13 builds,
//! `libcublas.so.12` for CUDA 12 ones); then the system's library path, both sonames.

use super::driver::{CuDevicePtr, CuStream};
use super::dynlib::DynLib;
use crate::error::{Error, Result};
use aotc_abi::cuda::{CudaGemm, GemmOperand};
use aotc_abi::{status, DType};
use std::ffi::{c_int, c_longlong, c_void};
use std::sync::OnceLock;

type Handle = *mut c_void;
const OP_N: c_int = 0;
const OP_T: c_int = 1;
const DEFAULT_MATH: c_int = 0;
const R_16F: c_int = 2;
const R_16BF: c_int = 14;
const COMPUTE_32F: c_int = 68;
const GEMM_DEFAULT: c_int = -1;

type Gemm<T> = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const T,
    *const T,
    c_int,
    c_longlong,
    *const T,
    c_int,
    c_longlong,
    *const T,
    *mut T,
    c_int,
    c_longlong,
    c_int,
) -> c_int;
type GemmEx = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    c_longlong,
    *const c_void,
    c_int,
    c_int,
    c_longlong,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_longlong,
    c_int,
    c_int,
    c_int,
) -> c_int;

pub struct Blas {
    _lib: DynLib,
    create: unsafe extern "C" fn(*mut Handle) -> c_int,
    destroy: unsafe extern "C" fn(Handle) -> c_int,
    set_stream: unsafe extern "C" fn(Handle, CuStream) -> c_int,
    set_math_mode: unsafe extern "C" fn(Handle, c_int) -> c_int,
    sgemm: Gemm<f32>,
    dgemm: Gemm<f64>,
    gemm_ex: GemmEx,
}

impl Blas {
    /// The process's cuBLAS, found once; `None` where there is none.
    pub fn find() -> Option<&'static Blas> {
        static BLAS: OnceLock<Option<Blas>> = OnceLock::new();
        BLAS.get_or_init(|| {
            let sonames = ["libcublas.so.13".to_string(), "libcublas.so.12".to_string()];
            let lib = match std::env::var("AOTC_CUBLAS") {
                Ok(none) if none == "none" => return None,
                Ok(path) => DynLib::open(&[path], false),
                Err(_) => DynLib::open(&sonames, true).or_else(|_| DynLib::open(&sonames, false)),
            }
            .ok()?;
            Some(Blas {
                create: lib.get("cublasCreate_v2").ok()?,
                destroy: lib.get("cublasDestroy_v2").ok()?,
                set_stream: lib.get("cublasSetStream_v2").ok()?,
                set_math_mode: lib.get("cublasSetMathMode").ok()?,
                sgemm: lib.get("cublasSgemmStridedBatched").ok()?,
                dgemm: lib.get("cublasDgemmStridedBatched").ok()?,
                gemm_ex: lib.get("cublasGemmStridedBatchedEx").ok()?,
                _lib: lib,
            })
        })
        .as_ref()
    }
}

fn blas_error(what: &str, rc: c_int) -> Error {
    Error { code: status::DEVICE, message: format!("{what} failed: cuBLAS status {rc}") }
}

/// A cuBLAS handle of one instance (created with its context current).
pub struct BlasHandle {
    blas: &'static Blas,
    handle: Handle,
}

impl BlasHandle {
    pub fn new(blas: &'static Blas) -> Result<BlasHandle> {
        let mut handle = std::ptr::null_mut();
        // SAFETY: an out pointer to one handle.
        let rc = unsafe { (blas.create)(&mut handle) };
        if rc != 0 {
            return Err(blas_error("cublasCreate", rc));
        }
        let h = BlasHandle { blas, handle };
        // SAFETY: a live handle; 0 is CUBLAS_DEFAULT_MATH (no TF32).
        let rc = unsafe { (blas.set_math_mode)(handle, DEFAULT_MATH) };
        if rc != 0 {
            return Err(blas_error("cublasSetMathMode", rc));
        }
        Ok(h)
    }
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        let _ = unsafe { (self.blas.destroy)(self.handle) };
    }
}

/// A row-major operand as cuBLAS's column-major one of the transposed product
/// (C^T = B^T A^T): the transpose flag and leading dimension, when its strides allow one
/// (`rows` x `cols` with unit stride along one of them).
fn as_column_major(rows: i64, cols: i64, rs: i64, cs: i64) -> Option<(c_int, c_int)> {
    let ld = |x: i64, min: i64| c_int::try_from(x.max(min).max(1)).ok();
    if cs == 1 && (rs >= cols || rows == 1) {
        // Viewed column-major, the row-major X is X^T, leading dimension rs.
        Some((OP_N, ld(if rows == 1 { cols } else { rs }, cols)?))
    } else if rs == 1 && (cs >= rows || cols == 1) {
        Some((OP_T, ld(if cols == 1 { rows } else { cs }, rows)?))
    } else {
        None
    }
}

impl BlasHandle {
    /// Runs `g` for sizes `syms` on slots `slots`; `Ok(false)` when its layout or sizes do
    /// not suit cuBLAS (the caller launches the PTX GEMM then).
    pub fn gemm(&self, g: &CudaGemm, syms: &[Option<i64>], slots: &[CuDevicePtr], stream: CuStream) -> Result<bool> {
        let eval = |e: &aotc_abi::sym::SymExpr| {
            e.eval(syms).map_err(|x| Error { code: status::INTERNAL, message: format!("GEMM size {e}: {x}") })
        };
        let (batch, m, n, k) = (eval(&g.batch)?, eval(&g.m)?, eval(&g.n)?, eval(&g.k)?);
        if batch == 0 || m == 0 || n == 0 {
            return Ok(true);
        }
        let operand = |o: &GemmOperand| -> Result<(i64, i64, i64, i64)> {
            Ok((eval(&o.offset)?, eval(&o.strides[0])?, eval(&o.strides[1])?, eval(&o.strides[2])?))
        };
        let (a_off, a_bs, a_rs, a_cs) = operand(&g.a)?;
        let (b_off, b_bs, b_rs, b_cs) = operand(&g.b)?;
        let (Some((op_a, lda)), Some((op_b, ldb))) =
            (as_column_major(m, k, a_rs, a_cs), as_column_major(k, n, b_rs, b_cs))
        else {
            return Ok(false);
        };
        let int = |x: i64| c_int::try_from(x).ok();
        let (Some(mi), Some(ni), Some(ki), Some(bi)) = (int(m), int(n), int(k), int(batch)) else { return Ok(false) };
        let elem = g.dtype.size() as i64;
        let at = |slot: usize, off: i64| slots[slot].wrapping_add((off * elem) as u64);
        let (a, b, c) = (at(g.a.slot, a_off), at(g.b.slot, b_off), slots[g.out]);
        let beta = if g.accumulate { 1.0 } else { 0.0 };
        // SAFETY: a live handle and a stream of its context.
        let rc = unsafe { (self.blas.set_stream)(self.handle, stream) };
        if rc != 0 {
            return Err(blas_error("cublasSetStream", rc));
        }
        // C^T (n x m, column-major, ld n) = op(B) op(A): cuBLAS's m, n are ours swapped.
        // SAFETY (each call): device pointers into the plan's slots, which hold the
        // operands the compiler planned for these sizes; scalars on the host.
        let rc = match g.dtype {
            DType::F32 => {
                let (alpha, beta) = (g.alpha as f32, beta as f32);
                unsafe {
                    (self.blas.sgemm)(
                        self.handle,
                        op_b,
                        op_a,
                        ni,
                        mi,
                        ki,
                        &alpha,
                        b as *const f32,
                        ldb,
                        b_bs,
                        a as *const f32,
                        lda,
                        a_bs,
                        &beta,
                        c as *mut f32,
                        ni,
                        m * n,
                        bi,
                    )
                }
            }
            DType::F64 => unsafe {
                (self.blas.dgemm)(
                    self.handle,
                    op_b,
                    op_a,
                    ni,
                    mi,
                    ki,
                    &g.alpha,
                    b as *const f64,
                    ldb,
                    b_bs,
                    a as *const f64,
                    lda,
                    a_bs,
                    &beta,
                    c as *mut f64,
                    ni,
                    m * n,
                    bi,
                )
            },
            DType::F16 | DType::BF16 => {
                let ty = if g.dtype == DType::F16 { R_16F } else { R_16BF };
                let (alpha, beta) = (g.alpha as f32, beta as f32);
                unsafe {
                    (self.blas.gemm_ex)(
                        self.handle,
                        op_b,
                        op_a,
                        ni,
                        mi,
                        ki,
                        (&alpha as *const f32).cast(),
                        b as *const c_void,
                        ty,
                        ldb,
                        b_bs,
                        a as *const c_void,
                        ty,
                        lda,
                        a_bs,
                        (&beta as *const f32).cast(),
                        c as *mut c_void,
                        ty,
                        ni,
                        m * n,
                        bi,
                        COMPUTE_32F,
                        GEMM_DEFAULT,
                    )
                }
            }
            _ => return Ok(false),
        };
        if rc != 0 {
            return Err(blas_error("cublas GEMM", rc));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_operands_map_to_column_major_flags() {
        // Contiguous [m, k] A: its column-major view is A^T with ld k.
        assert_eq!(as_column_major(4, 3, 3, 1), Some((OP_N, 3)));
        // A transposed view ([m, k] with strides (1, m)): A itself, ld m, transposed.
        assert_eq!(as_column_major(4, 3, 1, 4), Some((OP_T, 4)));
        // Broadcast rows (stride 0) or gathered strides: not cuBLAS's.
        assert_eq!(as_column_major(4, 3, 0, 1), None);
        assert_eq!(as_column_major(4, 3, 6, 2), None);
        // One row: any row stride.
        assert_eq!(as_column_major(1, 3, 0, 1), Some((OP_N, 3)));
    }
}
