//! Extern kernels that the generated code calls: matrix multiplication, compiled by rustc
//! with runtime AVX2/FMA dispatch (Cranelift has no 256-bit vectors).

/// `C = alpha * A @ B + beta * C` for f32, with arbitrary strides (in elements).
/// `beta == 0` ignores C's previous contents, NaN included.
///
/// # Safety
/// The pointers must cover the m x k, k x n and m x n matrices their strides describe.
#[no_mangle]
pub unsafe extern "C" fn __aotc_sgemm(
    m: i64, k: i64, n: i64, alpha: f32,
    a: *const f32, rsa: i64, csa: i64,
    b: *const f32, rsb: i64, csb: i64,
    beta: f32, c: *mut f32, rsc: i64, csc: i64,
) {
    // SAFETY: forwarded from the caller's contract; matrixmultiply reads/writes exactly those.
    unsafe {
        matrixmultiply::sgemm(
            m as usize, k as usize, n as usize, alpha,
            a, rsa as isize, csa as isize, b, rsb as isize, csb as isize,
            beta, c, rsc as isize, csc as isize,
        )
    }
}

/// The f64 twin of [`__aotc_sgemm`].
///
/// # Safety
/// As [`__aotc_sgemm`].
#[no_mangle]
pub unsafe extern "C" fn __aotc_dgemm(
    m: i64, k: i64, n: i64, alpha: f64,
    a: *const f64, rsa: i64, csa: i64,
    b: *const f64, rsb: i64, csb: i64,
    beta: f64, c: *mut f64, rsc: i64, csc: i64,
) {
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        matrixmultiply::dgemm(
            m as usize, k as usize, n as usize, alpha,
            a, rsa as isize, csa as isize, b, rsb as isize, csb as isize,
            beta, c, rsc as isize, csc as isize,
        )
    }
}
