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
    let mut h = Hash64::new();
    h.update(data);
    h.finish()
}

/// [`hash64`] fed piece by piece (the compiler hashes weights as it writes them, never all
/// in memory at once): the same value for the same bytes however they are cut.
#[derive(Clone, Debug)]
pub struct Hash64 {
    lanes: [u64; 4],
    /// The start of a 32-byte chunk that the pieces so far left incomplete.
    pending: [u8; 32],
    pending_len: usize,
    len: u64,
}

impl Default for Hash64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Hash64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    pub fn new() -> Hash64 {
        let lanes = [0xcbf2_9ce4_8422_2325u64, 0x8422_2325_cbf2_9ce4, 0x9e37_79b9_7f4a_7c15, 0x2545_f491_4f6c_dd1d];
        Hash64 { lanes, pending: [0; 32], pending_len: 0, len: 0 }
    }

    fn mix(&mut self, chunk: &[u8]) {
        for (l, w) in self.lanes.iter_mut().zip(chunk.chunks_exact(8)) {
            *l = (*l ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(Self::PRIME);
            *l ^= *l >> 29;
        }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.pending_len > 0 {
            let take = (32 - self.pending_len).min(data.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&data[..take]);
            self.pending_len += take;
            data = &data[take..];
            if self.pending_len < 32 {
                return;
            }
            let chunk = self.pending;
            self.mix(&chunk);
            self.pending_len = 0;
        }
        let mut chunks = data.chunks_exact(32);
        for c in &mut chunks {
            self.mix(c);
        }
        let rest = chunks.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    pub fn finish(&self) -> u64 {
        let mut h =
            self.lanes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &l| (h ^ l).wrapping_mul(Self::PRIME).rotate_left(23));
        for &b in &self.pending[..self.pending_len] {
            h = (h ^ b as u64).wrapping_mul(Self::PRIME);
        }
        (h ^ self.len).wrapping_mul(Self::PRIME)
    }

    /// The [`content_id`] of the bytes fed so far.
    pub fn content_id(&self) -> String {
        format!("{:016x}", self.finish())
    }
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
        WeightsTable { id: content_id(blob), ..WeightsTable::unhashed(entries, blob.len() as u64) }
    }

    /// The table of `entries` laid out in a blob of `bytes` bytes not written yet: its
    /// [`WeightsTable::id`] is left empty, for the writer to set once it has hashed them.
    pub fn unhashed(entries: Vec<WeightEntry>, bytes: u64) -> WeightsTable {
        WeightsTable {
            external: false,
            file: None,
            fingerprint: structure_fingerprint(&entries),
            id: String::new(),
            entries,
            bytes,
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

    #[test]
    fn the_hash_of_pieces_is_the_hash_of_the_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for cuts in [vec![0, 1000], vec![0, 1, 33, 64, 65, 1000], vec![0, 31, 32, 500, 999, 1000], vec![0, 0, 7, 1000]]
        {
            let mut h = Hash64::new();
            for w in cuts.windows(2) {
                h.update(&data[w[0]..w[1]]);
            }
            assert_eq!(h.finish(), hash64(&data), "cut at {cuts:?}");
        }
    }
}
