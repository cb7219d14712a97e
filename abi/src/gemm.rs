//! GEMM operands packed at compile time, as the compiler writes them (weights) and the
//! support library's float32 kernel reads them: the operand cut into blocks of [`KC`]
//! along the depth, each block into panels of `width` rows of A ([`MR`]) or columns of B
//! ([`NR`]), a panel stored depth by depth (`width` contiguous floats per depth, past the
//! operand's end zeros). Block `pc` (its first depth) starts at `pc * padded(len, width)`,
//! its panel from row/column `i` at `i * kc` inside it, `kc` being the block's depth.
//! These are the panels the AVX2 kernel's inner loop reads, so a call reads the weight in
//! order and never repacks it.

/// `__aotc_sgemm_packed_b(m, k, n, alpha, a, rsa, csa, b, beta, c, rsc, csc, bias,
/// activation)`: B packed; `bias` (null for none) holds one float per column of C, added
/// to the product, then the [`Activation`] of that code is applied as C is written.
pub const PACKED_SGEMM_SYMBOL: &str = "__aotc_sgemm_packed_b";

/// The function applied to every element of a GEMM's (or convolution's) result in its
/// output pass, after the bias and any residual: the graph's activation, fused. Each is
/// computed as the graph's decomposition computes it (NaN stays NaN).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// `(x * 0.5) * (1 + erf(x * (1 / sqrt 2)))`.
    Gelu,
    /// `x * min(max(x + 3, 0), 6) / 6`.
    Hardswish,
    /// SiLU (swish): `x * sigmoid(x)`, sigmoid as `1 / (1 + exp(-x))`.
    Silu,
}

impl Activation {
    pub const ALL: [Activation; 5] =
        [Activation::None, Activation::Relu, Activation::Gelu, Activation::Hardswish, Activation::Silu];

    /// Its code in a call's arguments.
    pub fn code(self) -> i64 {
        self as i64
    }

    pub fn from_code(code: i64) -> Option<Activation> {
        Self::ALL.into_iter().find(|a| a.code() == code)
    }
}

/// Depth per block: the kernel's depth block.
pub const KC: usize = 256;
/// Rows of A per panel: the kernel's register tile height.
pub const MR: usize = 6;
/// Columns of B per panel: the kernel's register tile width (two 8-float vectors).
pub const NR: usize = 16;

/// `len` (rows of A, columns of B) rounded up to whole panels.
pub fn padded(len: usize, width: usize) -> Option<usize> {
    len.checked_next_multiple_of(width)
}

/// Floats of the packed operand.
pub fn packed_len(k: usize, len: usize, width: usize) -> Option<usize> {
    k.checked_mul(padded(len, width)?)
}

/// Where the panel from row/column `i` (a multiple of the width) of the block starting at
/// depth `pc` begins, in floats; `padded` is the operand's [`padded`] length.
pub fn panel_offset(k: usize, padded: usize, pc: usize, i: usize) -> usize {
    let kc = KC.min(k - pc);
    pc * padded + i * kc
}

/// Where the element at depth `p`, row/column `i` of an operand packed by [`pack`] lies, in
/// floats; `padded` is its [`padded`] length for `width`.
pub fn packed_index(k: usize, padded: usize, width: usize, p: usize, i: usize) -> usize {
    let pc = p / KC * KC;
    panel_offset(k, padded, pc, i / width * width) + (p - pc) * width + i % width
}

/// Packs an operand of depth `k` and `len` rows (A) or columns (B) whose element at depth
/// p, row/column i is `x(p, i)`.
pub fn pack(k: usize, len: usize, width: usize, x: impl Fn(usize, usize) -> f32) -> Option<Vec<f32>> {
    let mut out = Vec::with_capacity(packed_len(k, len, width)?);
    // The blocks follow one another, each its panels in order.
    for pc in (0..k).step_by(KC) {
        pack_panels(k, len, width, pc, 0..len, &x, &mut out);
    }
    Some(out)
}

/// Appends to `out` the panels of the block starting at depth `pc` (a multiple of [`KC`])
/// for rows/columns `range` (its start a multiple of `width`; its end `len` or a multiple of
/// `width`): the packed operand's floats from [`panel_offset`]`(k, padded, pc, range.start)`
/// on, in order, so that a large operand is packed and written a piece at a time.
pub fn pack_panels(
    k: usize,
    len: usize,
    width: usize,
    pc: usize,
    range: std::ops::Range<usize>,
    x: impl Fn(usize, usize) -> f32,
    out: &mut Vec<f32>,
) {
    let depths = pc..(pc + KC).min(k);
    for i0 in range.step_by(width) {
        for p in depths.clone() {
            out.extend((i0..i0 + width).map(|i| if i < len { x(p, i) } else { 0.0 }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_lands_at_its_panel_position() {
        // Two depth blocks (the second short) and a partial last panel, for both widths.
        for width in [MR, NR] {
            let (k, len) = (KC + 3, 2 * width + 5);
            let packed = pack(k, len, width, |p, i| (p * 1000 + i) as f32).unwrap();
            let padded_len = padded(len, width).unwrap();
            assert_eq!(packed.len(), k * 3 * width);
            for p in 0..k {
                for i in 0..padded_len {
                    let at = packed_index(k, padded_len, width, p, i);
                    let want = if i < len { (p * 1000 + i) as f32 } else { 0.0 };
                    assert_eq!(packed[at], want, "width {width}, element ({p}, {i})");
                }
            }
            // A piece of a block: the panels from the second on, where they lie in the whole.
            let mut piece = vec![];
            pack_panels(k, len, width, KC, width..len, |p, i| (p * 1000 + i) as f32, &mut piece);
            let at = panel_offset(k, padded_len, KC, width);
            assert_eq!(piece, packed[at..at + piece.len()], "width {width}");
        }
    }
}
