//! Winograd's F(4x4, 3x3) (Lavin and Gray, 2015), the part the compiler and the library
//! share: when it applies, the transforms' matrices, and the weight transformed and packed
//! at compile time.
//!
//! Each 4x4 block of output positions (a *tile*) of a 3x3 convolution is
//! `Y = A^T [sum over c of (G g_oc G^T) ⊙ (B^T d_c B)] A`, where `d_c` is the 6x6 input patch
//! under the tile in channel c and `g_oc` the 3x3 kernel. The 36 element-wise products
//! summed over channels are 36 GEMMs, `M[ξ] = U[ξ] @ V[ξ]` with `U[ξ]` the `[O, C]`
//! matrix of transformed weights at point ξ = 6 i + j and `V[ξ]` the `[C, tiles]` matrix of
//! transformed inputs: 36 multiply-adds per channel for 16 outputs instead of 144 (F(2x2,
//! 3x3): 16 for 4, 2.25 times fewer; this, 4 times fewer).
//!
//! The matrices interpolate at the points 0, 1, -1, 1/2, -2 and infinity: `B^T` and `A^T`
//! hold binary fractions (exact in float32), `G` thirds and fifteenths (the weight is
//! transformed in float64 and rounded once). Larger tiles round more: on random inputs of
//! 3 to 512 channels (float32 against float64), these points' error was 4 to 8 times
//! F(2x2, 3x3)'s, and 11 to 29 times with the usual 0, ±1, ±2; the library's tests see up
//! to 6.5 times the direct sums' error. That is still far inside the models' tolerances
//! (ResNet-50, DenseNet-121, R3D-18: at most 0.18 of PyTorch's recorded outputs' bound).

use crate::gemm::{pack, packed_len, MR};

/// Outputs per tile side, and input per tile side (`TILE + 2`).
pub const TILE: usize = 4;
pub const PATCH: usize = TILE + 2;
/// The points of a tile's transform: one GEMM each.
pub const POINTS: usize = PATCH * PATCH;

/// `B^T`: a patch's input transform, `V = B^T d B`.
pub const BT: [[f32; PATCH]; PATCH] = [
    [1.0, -1.5, -2.0, 1.5, 1.0, 0.0],
    [0.0, -1.0, 0.5, 2.5, 1.0, 0.0],
    [0.0, 1.0, -2.5, 0.5, 1.0, 0.0],
    [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
    [0.0, 0.5, -1.0, -0.5, 1.0, 0.0],
    [0.0, 1.0, -1.5, -2.0, 1.5, 1.0],
];

/// `A^T`: a tile's output transform, `Y = A^T M A`.
pub const AT: [[f32; PATCH]; TILE] = [
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    [0.0, 1.0, -1.0, 0.5, -2.0, 0.0],
    [0.0, 1.0, 1.0, 0.25, 4.0, 0.0],
    [0.0, 1.0, -1.0, 0.125, -8.0, 1.0],
];

/// `G`, of `U = G g G^T`: row j is the points' powers `p^k / prod over l != j (p - p_l)`.
const G: [[f64; 3]; PATCH] = [
    [1.0, 0.0, 0.0],
    [1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0],
    [-1.0 / 3.0, 1.0 / 3.0, -1.0 / 3.0],
    [-16.0 / 15.0, -8.0 / 15.0, -4.0 / 15.0],
    [1.0 / 15.0, -2.0 / 15.0, 4.0 / 15.0],
    [0.0, 0.0, 1.0],
];

/// Whether the library can compute a convolution this way: a 3x3 kernel at unit stride
/// and dilation, one group (any padding).
pub fn fits(kernel: [usize; 2], stride: [usize; 2], dilation: [usize; 2], groups: usize) -> bool {
    kernel == [3, 3] && stride == [1, 1] && dilation == [1, 1] && groups == 1
}

/// Whether the compiler should choose it for a convolution that [`fits`], from what it
/// knows statically: enough input channels that the GEMMs, not the transforms, do the
/// work, and planes large enough that the 4 times larger weight is read for many tiles
/// (ResNet's 7x7 layer4 reads 36 MiB of weight for 4 tiles: 512 -> 512 at 7x7 takes 1.9
/// times the windows' GEMM's time). Unknown (symbolic) output sizes count as large.
/// Measured against the windows' GEMM (kernels bench, one thread, AMD EPYC with AVX-512):
/// 64 -> 64 at 56x56 2.3 times faster, 128 -> 128 at 28x28 2.4, 256 -> 256 at 14x14 2.0;
/// SqueezeNet's fire modules: 16 -> 64 at 55x55 1.4, 32 -> 128 at 27x27 1.6, 48 -> 192 at
/// 13x13 1.4, 64 -> 256 at 13x13 1.6.
pub fn pays(channels: usize, out_channels: usize, out_size: [Option<usize>; 2]) -> bool {
    const MIN_CHANNELS: usize = 16;
    const MIN_OUT_CHANNELS: usize = 16;
    const MIN_POSITIONS: usize = 64;
    let positions = match out_size {
        [Some(h), Some(w)] => h.saturating_mul(w),
        _ => usize::MAX,
    };
    channels >= MIN_CHANNELS && out_channels >= MIN_OUT_CHANNELS && positions >= MIN_POSITIONS
}

/// Floats of the transformed weight: 36 packed `[O, C]` matrices.
pub fn weight_len(channels: usize, out_channels: usize) -> Option<usize> {
    packed_len(channels, out_channels, MR)?.checked_mul(POINTS)
}

/// `weight` (`[O, C, 3, 3]`, contiguous) transformed: for each point ξ in order,
/// `U[ξ][o][c] = (G g_oc G^T)[ξ / 6][ξ % 6]` packed as a GEMM's left operand. None when
/// `weight` is not that size.
pub fn transform_weight(weight: &[f32], out_channels: usize, channels: usize) -> Option<Vec<f32>> {
    if Some(weight.len()) != out_channels.checked_mul(channels)?.checked_mul(9) {
        return None;
    }
    // In float64, rounded once.
    let transformed: Vec<[f32; POINTS]> = weight
        .chunks_exact(9)
        .map(|g| {
            let mut gg = [[0f64; 3]; PATCH];
            for (i, row) in gg.iter_mut().enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (0..3).map(|k| G[i][k] * g[k * 3 + j] as f64).sum();
                }
            }
            std::array::from_fn(|xi| (0..3).map(|k| gg[xi / PATCH][k] * G[xi % PATCH][k]).sum::<f64>() as f32)
        })
        .collect();
    let mut out = Vec::with_capacity(weight_len(channels, out_channels)?);
    (0..POINTS).try_for_each(|point| {
        out.extend(pack(channels, out_channels, MR, |c, o| transformed[o * channels + c][point])?);
        Some(())
    })?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transform_of_a_delta_kernel_is_g_column_times_g_column() {
        // g = 1 at (1, 2): U = G[:, 1] G[:, 2]^T.
        let mut g = [0f32; 9];
        g[5] = 1.0;
        let u = transform_weight(&g, 1, 1).unwrap();
        assert_eq!(u.len(), weight_len(1, 1).unwrap());
        for xi in 0..POINTS {
            let want = G[xi / PATCH][1] * G[xi % PATCH][2];
            // One row packed in a panel of MR: the value at its first slot, zeros after.
            assert_eq!(u[xi * MR], want as f32, "point {xi}: rounded once");
            assert!(u[xi * MR + 1..(xi + 1) * MR].iter().all(|&z| z == 0.0));
        }
        assert_eq!(transform_weight(&g[..8], 1, 1), None);
    }

    #[test]
    fn the_matrices_compute_a_correlation() {
        // In one dimension: y_i = sum over k of d_{i + k} g_k = (A^T [(G g) ⊙ (B^T d)])_i,
        // for every basis input and kernel (exact in float64: the matrices' products are
        // sums of a few binary fractions and thirds).
        for (e, k) in (0..PATCH).flat_map(|e| (0..3).map(move |k| (e, k))) {
            let u: [f64; PATCH] = std::array::from_fn(|j| G[j][k]);
            let v: [f64; PATCH] = std::array::from_fn(|j| BT[j][e] as f64);
            for (i, row) in AT.iter().enumerate() {
                let y: f64 = (0..PATCH).map(|j| row[j] as f64 * u[j] * v[j]).sum();
                let want = if e == i + k { 1.0 } else { 0.0 };
                assert!((y - want).abs() < 1e-12, "output {i}, input {e}, tap {k}: {y}");
            }
        }
    }

    #[test]
    fn the_choice() {
        assert!(pays(64, 64, [Some(56), Some(56)]));
        assert!(pays(64, 32, [None, None]));
        assert!(pays(16, 64, [Some(55), Some(55)]), "SqueezeNet's first fire module");
        assert!(!pays(8, 32, [Some(64), Some(64)]), "8 channels: the transforms would dominate");
        assert!(!pays(512, 512, [Some(7), Some(7)]), "9 MiB of weight for 16 tiles");
        assert!(!pays(3, 32, [Some(64), Some(64)]), "3 channels: the transforms would dominate");
    }
}
