//! The weights of a compiled program as the library reads them: a table of named tensors
//! at 64-byte aligned offsets of one blob, embedded in the `.so` (`__aotc_weights`) or kept
//! in a safetensors file beside it (`aotc compile --external-weights`, [`crate::weights_file`]).
//!
//! The entries are the compiler's weights, not the archive's: a GEMM operand packed into the
//! kernel's panels (`<name>.packed`), a convolution weight with a batch norm folded in
//! (`<node>.folded_weight`), initial values of state. Two fingerprints tell files apart:
//! - the *structure* fingerprint hashes every entry's name, dtype, shape, offset and length
//!   plus [`LAYOUT`], how this compiler transforms weights. Files of equal structure are
//!   interchangeable: that is what swapping weights needs.
//! - the *weights id* hashes the bytes: it names one compilation's values.

use crate::DType;
use serde::{Deserialize, Serialize};

/// Every tensor starts at a multiple of this many bytes from the start of the blob (and of
/// the data section of a weights file), so that a mapped file is used in place.
pub const ALIGN: usize = 64;

/// How the compiler lays weights out, beyond names and shapes: bumped whenever the packed
/// GEMM panels, the convolution weight packing or a compile-time fold changes its layout,
/// so that a weights file written by a compiler that packs differently is refused.
pub const LAYOUT_VERSION: u32 = 1;

/// The layout identity that enters the structure fingerprint.
pub fn layout() -> String {
    format!("aotc-weights layout {LAYOUT_VERSION}; gemm panels {}x{}; little-endian", crate::gemm::MR, crate::gemm::NR)
}

/// The weights table of a program (the manifest's `weights`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightsTable {
    /// The weights live in a file beside the library instead of `__aotc_weights`.
    pub external: bool,
    /// The file name the library looks for in its own directory when external.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// [`structure_fingerprint`] of `entries`.
    pub fingerprint: String,
    /// [`content_id`] of the bytes the compiler wrote.
    pub id: String,
    /// Every non-empty tensor, in blob order (ascending offsets).
    pub entries: Vec<WeightEntry>,
    /// The blob's length in bytes.
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightEntry {
    /// The compiler's name for it (the FQN for an archive weight), unique in the table.
    pub name: String,
    pub dtype: DType,
    pub sizes: Vec<i64>,
    /// Byte offset in the blob (a multiple of [`ALIGN`]).
    pub offset: u64,
    /// Byte length: the product of `sizes` times the element size.
    pub bytes: u64,
}

/// A 64-bit FNV-1a over `data`, four bytes-streams interleaved so that hashing gigabytes
/// stays fast; not cryptographic (it tells compilations apart, it does not authenticate).
pub fn hash64(data: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut lanes = [0xcbf2_9ce4_8422_2325u64, 0x8422_2325_cbf2_9ce4, 0x9e37_79b9_7f4a_7c15, 0x2545_f491_4f6c_dd1d];
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        for (l, w) in lanes.iter_mut().zip(c.chunks_exact(8)) {
            *l = (*l ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(PRIME);
            *l ^= *l >> 29;
        }
    }
    let mut h = lanes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &l| (h ^ l).wrapping_mul(PRIME).rotate_left(23));
    for &b in chunks.remainder() {
        h = (h ^ b as u64).wrapping_mul(PRIME);
    }
    (h ^ data.len() as u64).wrapping_mul(PRIME)
}

/// The fingerprint of the table's structure: names, dtypes, shapes, offsets, lengths and
/// [`layout`], in order; 16 hex digits.
pub fn structure_fingerprint(entries: &[WeightEntry]) -> String {
    let mut text = layout();
    for e in entries {
        text.push_str(&format!(
            "\n{}\0{}\0{:?}\0{}\0{}",
            e.name,
            e.dtype.safetensors_name(),
            e.sizes,
            e.offset,
            e.bytes
        ));
    }
    format!("{:016x}", hash64(text.as_bytes()))
}

/// The id of one set of values: a hash of the blob's bytes; 16 hex digits.
pub fn content_id(blob: &[u8]) -> String {
    format!("{:016x}", hash64(blob))
}

impl WeightsTable {
    /// The table of `entries` (ascending offsets) laid out in `blob`.
    pub fn new(entries: Vec<WeightEntry>, blob: &[u8]) -> WeightsTable {
        WeightsTable {
            external: false,
            file: None,
            fingerprint: structure_fingerprint(&entries),
            id: content_id(blob),
            entries,
            bytes: blob.len() as u64,
        }
    }

    /// The entry named `name`.
    pub fn find(&self, name: &str) -> Option<(usize, &WeightEntry)> {
        self.entries.iter().enumerate().find(|(_, e)| e.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, sizes: Vec<i64>, offset: u64) -> WeightEntry {
        let bytes = sizes.iter().product::<i64>() as u64 * 4;
        WeightEntry { name: name.into(), dtype: DType::F32, sizes, offset, bytes }
    }

    #[test]
    fn the_structure_fingerprint_sees_names_shapes_and_offsets_not_values() {
        let a = vec![entry("w", vec![2, 3], 0), entry("b", vec![3], 64)];
        let fp = structure_fingerprint(&a);
        assert_eq!(fp.len(), 16);
        assert_eq!(fp, structure_fingerprint(&a.clone()));
        let renamed = vec![entry("w2", vec![2, 3], 0), entry("b", vec![3], 64)];
        let reshaped = vec![entry("w", vec![3, 2], 0), entry("b", vec![3], 64)];
        let moved = vec![entry("w", vec![2, 3], 0), entry("b", vec![3], 128)];
        for other in [renamed, reshaped, moved] {
            assert_ne!(fp, structure_fingerprint(&other));
        }
        assert_eq!(WeightsTable::new(a.clone(), &[1; 76]).fingerprint, WeightsTable::new(a, &[2; 76]).fingerprint);
    }

    #[test]
    fn the_content_id_sees_every_byte() {
        let mut blob = vec![0u8; 1000];
        let id = content_id(&blob);
        for i in [0, 31, 32, 500, 999] {
            blob[i] ^= 1;
            assert_ne!(content_id(&blob), id, "byte {i}");
            blob[i] ^= 1;
        }
        assert_ne!(content_id(&blob[..999]), id, "the length counts");
    }
}
