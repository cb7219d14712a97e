//! The float32 GEMM's pre-packed right operand, as the compiler writes it (weights, at
//! compile time) and the support library reads it (`__aotc_sgemm_packed_b`): B (k x n) cut
//! into blocks of [`KC`] rows, each block into panels of [`NR`] columns, a panel stored
//! row by row (`NR` contiguous floats per row, columns past `n` zero). Block `pc` (its
//! first row) starts at `pc * padded_cols(n)`, its panel of columns `j0..j0 + NR` at
//! `j0 * kc` inside it, `kc` being the block's height. These are the panels the AVX2
//! kernel's inner loop reads, so a call reads the weight in order and never repacks it.

pub const PACKED_SGEMM_SYMBOL: &str = "__aotc_sgemm_packed_b";

/// Rows of B per block: the kernel's depth block.
pub const KC: usize = 256;
/// Columns per panel: the kernel's register tile width (two 8-float vectors).
pub const NR: usize = 16;

/// `n` rounded up to whole panels.
pub fn padded_cols(n: usize) -> Option<usize> {
    n.checked_next_multiple_of(NR)
}

/// Floats of the packed operand.
pub fn packed_len(k: usize, n: usize) -> Option<usize> {
    k.checked_mul(padded_cols(n)?)
}

/// Where the panel of columns `j0..j0 + NR` (`j0` a multiple of NR) of the block starting
/// at row `pc` begins, in floats.
pub fn panel_offset(k: usize, n_padded: usize, pc: usize, j0: usize) -> usize {
    let kc = KC.min(k - pc);
    pc * n_padded + j0 * kc
}

/// Packs the k x n matrix whose element (p, j) is `b(p, j)`.
pub fn pack(k: usize, n: usize, b: impl Fn(usize, usize) -> f32) -> Option<Vec<f32>> {
    let n_padded = padded_cols(n)?;
    let mut out = vec![0f32; packed_len(k, n)?];
    for pc in (0..k).step_by(KC) {
        for j0 in (0..n).step_by(NR) {
            let panel = &mut out[panel_offset(k, n_padded, pc, j0)..];
            for p in pc..(pc + KC).min(k) {
                for j in j0..(j0 + NR).min(n) {
                    panel[(p - pc) * NR + j - j0] = b(p, j);
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_lands_at_its_panel_position() {
        // Two depth blocks (the second short) and a partial last panel.
        let (k, n) = (KC + 3, 2 * NR + 5);
        let packed = pack(k, n, |p, j| (p * 1000 + j) as f32).unwrap();
        let n_padded = padded_cols(n).unwrap();
        assert_eq!(packed.len(), k * 3 * NR);
        for p in 0..k {
            let pc = p / KC * KC;
            for j in 0..n_padded {
                let at = panel_offset(k, n_padded, pc, j / NR * NR) + (p - pc) * NR + j % NR;
                let want = if j < n { (p * 1000 + j) as f32 } else { 0.0 };
                assert_eq!(packed[at], want, "element ({p}, {j})");
            }
        }
    }
}
