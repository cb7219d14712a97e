//! Winograd's F(2x2, 3x3) (Lavin and Gray, 2015), the part the compiler and the library
//! share: when it applies, and the weight transformed and packed at compile time.
//!
//! Each 2x2 block of output positions (a *tile*) of a 3x3 convolution is
//! `Y = A^T [sum over c of (G g_oc G^T) ⊙ (B^T d_c B)] A`, where `d_c` is the 4x4 input patch
//! under the tile in channel c and `g_oc` the 3x3 kernel. The 16 element-wise products
//! summed over channels are 16 GEMMs, `M[ξ] = U[ξ] @ V[ξ]` with `U[ξ]` the `[O, C]`
//! matrix of transformed weights at point ξ = 4 i + j and `V[ξ]` the `[C, tiles]` matrix of
//! transformed inputs: 16 multiply-adds per channel for 4 outputs instead of 36. The
//! transforms' constants are 0, ±1 and ±1/2, so their rounding is that of a few additions.

use crate::gemm::{pack, packed_len, MR};

/// Outputs per tile side, and input per tile side (`TILE + 2`).
pub const TILE: usize = 2;
pub const PATCH: usize = 4;
/// The points of a tile's transform: one GEMM each.
pub const POINTS: usize = PATCH * PATCH;

/// `G`, of `U = G g G^T`.
const G: [[f64; 3]; 4] = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]];

/// Whether the library can compute a convolution this way: a 3x3 kernel at unit stride
/// and dilation, one group (any padding).
pub fn fits(kernel: [usize; 2], stride: [usize; 2], dilation: [usize; 2], groups: usize) -> bool {
    kernel == [3, 3] && stride == [1, 1] && dilation == [1, 1] && groups == 1
}

/// Whether the compiler should choose it for a convolution that [`fits`], from what it
/// knows statically: enough input channels that the GEMMs, not the transforms, do the
/// work, and planes large enough that the 16/9 larger weight is read for many tiles
/// (ResNet's 7x7 layer4 reads 9 MiB of weight for 16 tiles: streaming it bounds that
/// layer either way). Unknown (symbolic) output sizes count as large. Measured against the
/// windows' GEMM (kernels bench, one thread, AMD EPYC with AVX-512), SqueezeNet's fire
/// modules: 16 -> 64 at 55x55 1.09 times faster, 32 -> 128 at 27x27 1.19, 48 -> 192 at
/// 13x13 1.03, 64 -> 256 at 13x13 1.12; bench_convnet (32 -> 64 at 32x32, batch 4, 2
/// threads) 10% less time. (Before the GEMM wrote a tile's last partial columns with
/// masked stores, 16 to 48 channels were 1.4-1.8 times slower, on that machine and on a
/// Xeon: the 16 small GEMMs of a block spent 40% of their time on those columns.)
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

/// Floats of the transformed weight: 16 packed `[O, C]` matrices.
pub fn weight_len(channels: usize, out_channels: usize) -> Option<usize> {
    packed_len(channels, out_channels, MR)?.checked_mul(POINTS)
}

/// `weight` (`[O, C, 3, 3]`, contiguous) transformed: for each point ξ in order,
/// `U[ξ][o][c] = (G g_oc G^T)[ξ / 4][ξ % 4]` packed as a GEMM's left operand. None when
/// `weight` is not that size.
pub fn transform_weight(weight: &[f32], out_channels: usize, channels: usize) -> Option<Vec<f32>> {
    if Some(weight.len()) != out_channels.checked_mul(channels)?.checked_mul(9) {
        return None;
    }
    // In float64, rounded once.
    let transformed: Vec<[f32; POINTS]> = weight
        .chunks_exact(9)
        .map(|g| {
            let mut gg = [[0f64; 3]; 4];
            for (i, row) in gg.iter_mut().enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (0..3).map(|k| G[i][k] * g[k * 3 + j] as f64).sum();
                }
            }
            let mut u = [0f32; POINTS];
            for (xi, v) in u.iter_mut().enumerate() {
                let (i, j) = (xi / PATCH, xi % PATCH);
                *v = (0..3).map(|k| gg[i][k] * G[j][k]).sum::<f64>() as f32;
            }
            u
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
            let want = G[xi / 4][1] * G[xi % 4][2];
            // One row packed in a panel of MR: the value at its first slot, zeros after.
            assert_eq!(u[xi * MR] as f64, want, "point {xi}");
            assert!(u[xi * MR + 1..(xi + 1) * MR].iter().all(|&z| z == 0.0));
        }
        assert_eq!(transform_weight(&g[..8], 1, 1), None);
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
