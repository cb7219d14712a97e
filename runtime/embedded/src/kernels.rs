//! Extern kernels that the generated code calls: matrix multiplication ([`crate::gemm`],
//! compiled by rustc with runtime AVX2/FMA dispatch: Cranelift has no 256-bit vectors) and
//! the sequential scan of `nonzero`.

use crate::gemm::{gemm, gemm_packed, Bias, Operands, Packed, Problem};
use crate::guards::refuse_extern_call;
use crate::pool;
use aotc_abi::gemm::Activation;

/// Defines `$name(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)`:
/// `C = alpha * A @ B + beta * C` with arbitrary strides (in elements); `beta == 0`
/// ignores C's previous contents, NaN included.
macro_rules! gemm_entry {
    ($name:ident, $t:ty) => {
        /// # Safety
        /// The pointers must cover the m x k, k x n and m x n matrices their strides describe.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            m: i64,
            k: i64,
            n: i64,
            alpha: $t,
            a: *const $t,
            rsa: i64,
            csa: i64,
            b: *const $t,
            rsb: i64,
            csb: i64,
            beta: $t,
            c: *mut $t,
            rsc: i64,
            csc: i64,
        ) {
            // The generated code never passes a negative size; were one passed, it
            // multiplies nothing rather than a huge matrix.
            let (m, k, n) = (m.max(0) as usize, k.max(0) as usize, n.max(0) as usize);
            let (rsa, csa, rsb, csb, rsc, csc) =
                (rsa as isize, csa as isize, rsb as isize, csb as isize, rsc as isize, csc as isize);
            let p = Problem { m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc };
            // The call's thread budget: 1 inside a parallel region (a matmul split over its
            // batch), so GEMMs never nest regions.
            // SAFETY: forwarded from the caller's contract; the kernel touches exactly those.
            unsafe { gemm(p, pool::threads(), &pool::parallel_for) }
        }
    };
}

gemm_entry!(__aotc_sgemm, f32);
gemm_entry!(__aotc_dgemm, f64);

/// `C = activation(alpha * A @ B + beta * C + bias)` for float32 with B (k x n) in
/// `aotc_abi::gemm`'s packed layout, packed by the compiler from a weight
/// (`aotc_abi::gemm::PACKED_SGEMM_SYMBOL`); `bias` is null or one float per column of C,
/// `activation` an `aotc_abi::gemm::Activation` code (an unknown one applies none).
///
/// # Safety
/// `b` holds `aotc_abi::gemm::packed_len(k, n)` floats, a non-null `bias` n floats; A and C
/// as for `__aotc_sgemm`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn __aotc_sgemm_packed_b(
    m: i64,
    k: i64,
    n: i64,
    alpha: f32,
    a: *const f32,
    rsa: i64,
    csa: i64,
    b: *const f32,
    beta: f32,
    c: *mut f32,
    rsc: i64,
    csc: i64,
    bias: *const f32,
    activation: i64,
) {
    let (m, k, n) = (m.max(0) as usize, k.max(0) as usize, n.max(0) as usize);
    let Some(packed_b) = Packed::new(b, n, aotc_abi::gemm::NR) else {
        return refuse_extern_call("__aotc_sgemm_packed_b");
    };
    let (rsa, csa, rsc, csc) = (rsa as isize, csa as isize, rsc as isize, csc as isize);
    let p = Problem { m, k, n, alpha, a, rsa, csa, b, rsb: 0, csb: 0, beta, c, rsc, csc };
    let bias = if bias.is_null() { Bias::None } else { Bias::Cols(bias) };
    let activation = Activation::from_code(activation).unwrap_or_default();
    let packed = Operands { b: Some(packed_b), bias, activation, ..Operands::default() };
    // SAFETY: forwarded from the caller's contract.
    unsafe { gemm_packed(p, packed, pool::threads(), &pool::parallel_for) }
}

/// `nonzero`: writes the coordinates of the first `rows` nonzero elements of the
/// contiguous bool tensor `mask` (shape `sizes[..ndim]`), in row-major order, as the rows
/// of `out` (`rows` x `ndim` int64). The program computed `rows` as the count of nonzero
/// elements of the same mask; rows it would not fill (none, if so) are zeroed.
///
/// # Safety
/// `sizes` holds `ndim` non-negative sizes, `mask` their product of bytes, and `out`
/// `rows * ndim` int64s.
#[no_mangle]
pub unsafe extern "C" fn __aotc_nonzero(out: *mut i64, mask: *const u8, sizes: *const i64, ndim: i64, rows: i64) {
    let (ndim, rows) = (ndim.max(0) as usize, rows.max(0) as usize);
    // SAFETY: the caller's contract above.
    let (sizes, out) =
        unsafe { (std::slice::from_raw_parts(sizes, ndim), std::slice::from_raw_parts_mut(out, rows * ndim)) };
    let numel = sizes.iter().map(|&n| n.max(0) as usize).product::<usize>();
    // SAFETY: mask holds numel bytes (the caller's contract).
    let mask = unsafe { std::slice::from_raw_parts(mask, numel) };
    let mut coord = vec![0i64; ndim];
    let mut row = 0;
    for &m in mask {
        if row == rows {
            break;
        }
        if m != 0 {
            out[row * ndim..(row + 1) * ndim].copy_from_slice(&coord);
            row += 1;
        }
        // The next coordinate in row-major order.
        for d in (0..ndim).rev() {
            coord[d] += 1;
            if coord[d] < sizes[d] {
                break;
            }
            coord[d] = 0;
        }
    }
    out[row * ndim..].fill(0);
}
