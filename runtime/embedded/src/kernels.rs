//! Extern kernels that the generated code calls: matrix multiplication, compiled by rustc
//! with runtime AVX2/FMA dispatch (Cranelift has no 256-bit vectors).

/// Defines `$name(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)`:
/// `C = alpha * A @ B + beta * C` with arbitrary strides (in elements); `beta == 0`
/// ignores C's previous contents, NaN included.
macro_rules! gemm_entry {
    ($name:ident, $t:ty, $kernel:path) => {
        /// # Safety
        /// The pointers must cover the m x k, k x n and m x n matrices their strides describe.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            m: i64, k: i64, n: i64, alpha: $t,
            a: *const $t, rsa: i64, csa: i64,
            b: *const $t, rsb: i64, csb: i64,
            beta: $t, c: *mut $t, rsc: i64, csc: i64,
        ) {
            // SAFETY: forwarded from the caller's contract; the kernel touches exactly those.
            unsafe {
                $kernel(
                    m as usize, k as usize, n as usize, alpha,
                    a, rsa as isize, csa as isize, b, rsb as isize, csb as isize,
                    beta, c, rsc as isize, csc as isize,
                )
            }
        }
    };
}

gemm_entry!(__aotc_sgemm, f32, matrixmultiply::sgemm);
gemm_entry!(__aotc_dgemm, f64, matrixmultiply::dgemm);
