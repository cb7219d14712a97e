//! A weight's bytes, wherever they are: in memory, in a region of a file (a safetensors
//! tensor, an archive entry stored uncompressed), or the GEMM panels of another payload.
//!
//! Gigabytes of weights must not be held in memory while compiling: a file region is read
//! only when the weights are written out, in pieces of at most [`PIECE_BYTES`], and a
//! packed operand (`aotc_abi::gemm`) is packed then, band by band of its source; the
//! compile-time transforms that need a small weight's values read them with
//! [`Payload::bytes`].

use crate::error::{Error, Result};
use aotc_abi::gemm::{self, KC, NR};
use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

/// The most bytes read from a file, or packed, at once when writing weights out.
const PIECE_BYTES: usize = 32 << 20;

#[derive(Clone, Debug)]
pub enum Payload {
    /// Shared, so that a packed operand's source costs no copy.
    Bytes(Arc<Vec<u8>>),
    File(FileRegion),
    /// Float32 GEMM panels (`aotc_abi::gemm`, [`NR`] columns wide) of a window of another
    /// payload.
    Packed(Arc<PackedMatrix>),
}

/// An open file, named for messages.
#[derive(Debug)]
pub struct SourceFile {
    pub path: PathBuf,
    pub file: File,
}

/// `len` bytes of a file from `offset` on.
#[derive(Clone, Debug)]
pub struct FileRegion {
    pub file: Arc<SourceFile>,
    pub offset: u64,
    pub len: u64,
}

impl FileRegion {
    fn read(&self, at: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.file
            .file
            .read_exact_at(&mut buf, self.offset + at)
            .map_err(|source| Error::Io { path: self.file.path.clone(), source })?;
        Ok(buf)
    }
}

/// The right operand `B[p, j]` (depth `k`, `n` columns) of a GEMM, float32 element
/// `offset + p * strides[0] + j * strides[1]` of `source`, packed in panels of [`NR`].
#[derive(Debug)]
pub struct PackedMatrix {
    source: Payload,
    offset: i64,
    strides: [i64; 2],
    k: usize,
    n: usize,
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Payload {
        Payload::Bytes(Arc::new(bytes))
    }
}

impl Payload {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Payload::Bytes(b) => b.len(),
            Payload::File(r) => r.len as usize,
            Payload::Packed(m) => m.packed_floats() * 4,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` bytes from `at` (inside the payload).
    fn range(&self, at: usize, len: usize) -> Result<Cow<'_, [u8]>> {
        match self {
            Payload::Bytes(b) => Ok(Cow::Borrowed(&b[at..at + len])),
            Payload::File(r) => r.read(at as u64, len).map(Cow::Owned),
            Payload::Packed(m) => {
                let mut whole = vec![0; self.len()];
                m.write(&mut |to, piece| copy_into(&mut whole, to, piece), PIECE_BYTES / 4)?;
                Ok(Cow::Owned(whole[at..at + len].to_vec()))
            }
        }
    }

    /// All of its bytes in memory: for the compile-time transforms, which read small
    /// weights (a file region is read, a packed operand packed).
    pub fn bytes(&self) -> Result<Cow<'_, [u8]>> {
        self.range(0, self.len())
    }

    /// The elements of a strided view of it ([`super::strided_elements`]), reading only the
    /// bytes the view reaches, so that a small view of a large weight in a file (a slice
    /// of an embedding table) costs its own size. None when the view reaches outside it or
    /// a read fails: the caller leaves the weight as it is (writing it reports the error).
    pub fn strided(&self, elem: usize, offset: i64, sizes: &[usize], strides: &[i64]) -> Option<Vec<u8>> {
        if sizes.contains(&0) {
            return Some(vec![]);
        }
        let (mut lo, mut hi) = (offset, offset);
        for (&n, &stride) in sizes.iter().zip(strides) {
            let reach = i64::try_from(n - 1).ok()?.checked_mul(stride)?;
            (lo, hi) = if reach < 0 { (lo.checked_add(reach)?, hi) } else { (lo, hi.checked_add(reach)?) };
        }
        let start = usize::try_from(lo).ok()?.checked_mul(elem)?;
        let len = usize::try_from(hi - lo + 1).ok()?.checked_mul(elem)?;
        if start.checked_add(len)? > self.len() {
            return None;
        }
        super::strided_elements(&self.range(start, len).ok()?, elem, offset - lo, sizes, strides)
    }

    /// The payload of `len` bytes from `at` (inside this one).
    pub fn slice(&self, at: usize, len: usize) -> Result<Payload> {
        match self {
            Payload::File(r) => {
                Ok(Payload::File(FileRegion { offset: r.offset + at as u64, len: len as u64, ..r.clone() }))
            }
            _ => Ok(self.range(at, len)?.into_owned().into()),
        }
    }

    /// Hands its bytes to `sink` in order, a piece at a time (`sink(at, piece)`: `piece`
    /// goes at byte `at` of the payload), holding at most a few pieces in memory.
    pub fn write(&self, sink: &mut dyn FnMut(usize, &[u8]) -> Result<()>) -> Result<()> {
        match self {
            Payload::Bytes(b) => sink(0, b),
            Payload::File(r) => {
                for at in (0..self.len()).step_by(PIECE_BYTES) {
                    sink(at, &r.read(at as u64, PIECE_BYTES.min(self.len() - at))?)?;
                }
                Ok(())
            }
            Payload::Packed(m) => m.write(sink, PIECE_BYTES / 4),
        }
    }
}

/// `piece` copied into `whole` at `at`: a sink that assembles a payload in memory.
fn copy_into(whole: &mut [u8], at: usize, piece: &[u8]) -> Result<()> {
    whole[at..at + piece.len()].copy_from_slice(piece);
    Ok(())
}

impl PackedMatrix {
    /// The packed window of `source`, or None when it does not lie inside its bytes.
    pub fn new(source: Payload, offset: usize, strides: [i64; 2], k: usize, n: usize) -> Option<PackedMatrix> {
        let m = PackedMatrix { source, offset: i64::try_from(offset).ok()?, strides, k, n };
        gemm::packed_len(k, n, NR)?.checked_mul(4)?;
        if k > 0 && n > 0 {
            let (lo, hi) = m.extent(0..k, 0..n)?;
            if lo < 0 || usize::try_from(hi).ok()?.checked_add(1)?.checked_mul(4)? > m.source.len() {
                return None;
            }
        }
        Some(m)
    }

    fn packed_floats(&self) -> usize {
        gemm::packed_len(self.k, self.n, NR).expect("checked by PackedMatrix::new")
    }

    /// The lowest and highest element of the source that depths `ps` and columns `js` read.
    fn extent(&self, ps: std::ops::Range<usize>, js: std::ops::Range<usize>) -> Option<(i64, i64)> {
        let base = self.offset.checked_add(i64::try_from(ps.start).ok()?.checked_mul(self.strides[0])?)?;
        let base = base.checked_add(i64::try_from(js.start).ok()?.checked_mul(self.strides[1])?)?;
        let reach = |n: usize, stride: i64| i64::try_from(n - 1).ok()?.checked_mul(stride);
        let (dp, dj) = (reach(ps.len(), self.strides[0])?, reach(js.len(), self.strides[1])?);
        Some((base + dp.min(0) + dj.min(0), base + dp.max(0) + dj.max(0)))
    }

    /// Packs band by band, each band (about `floats` floats) read from the source in one
    /// piece: bands of whole
    /// columns (all depths) when a column of B is the source's short stride (a Linear
    /// layer's transposed weight: a column is a row of the weight), bands of [`KC`]
    /// depths otherwise; a band's panels of each depth block are consecutive in the
    /// packed operand.
    fn write(&self, sink: &mut dyn FnMut(usize, &[u8]) -> Result<()>, floats: usize) -> Result<()> {
        let (k, n) = (self.k, self.n);
        if k == 0 || n == 0 {
            return Ok(());
        }
        let (band_depths, band_columns) = if self.strides[0].abs() <= self.strides[1].abs() {
            (k, (floats / k / NR * NR).max(NR))
        } else {
            ((floats / n / KC * KC).max(KC), n)
        };
        let padded = gemm::padded(n, NR).expect("checked by PackedMatrix::new");
        let (mut panels, mut bytes) = (Vec::new(), Vec::new());
        for p0 in (0..k).step_by(band_depths) {
            for j0 in (0..n).step_by(band_columns) {
                let (ps, js) = (p0..(p0 + band_depths).min(k), j0..(j0 + band_columns).min(n));
                let (lo, hi) = self.extent(ps.clone(), js.clone()).expect("checked by PackedMatrix::new");
                let source = self.source.range(lo as usize * 4, (hi - lo + 1) as usize * 4)?;
                let x = |p: usize, j: usize| {
                    let at = (self.offset + p as i64 * self.strides[0] + j as i64 * self.strides[1] - lo) as usize * 4;
                    f32::from_le_bytes(source[at..at + 4].try_into().expect("4 bytes"))
                };
                for pc in ps.clone().step_by(KC) {
                    panels.clear();
                    gemm::pack_panels(k, n, NR, pc, js.clone(), x, &mut panels);
                    bytes.clear();
                    bytes.extend(panels.iter().flat_map(|v| v.to_le_bytes()));
                    sink(gemm::panel_offset(k, padded, pc, js.start) * 4, &bytes)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(bytes: &[u8]) -> Vec<f32> {
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    }

    #[test]
    fn a_packed_window_is_the_gemm_packing_of_its_elements() {
        // A weight of 600 x 40 floats; B its transpose (the Linear case), and B a window of
        // it read row-major, each over two depth blocks and a partial last panel.
        let w: Vec<f32> = (0..600 * 40).map(|i| i as f32).collect();
        let source = Payload::from(w.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        for (offset, strides, k, n) in [(0, [1, 40], 40, 600), (3, [40, 1], 300, 37), (0, [40, 1], 600, 40)] {
            let m = PackedMatrix::new(source.clone(), offset, strides, k, n).unwrap();
            let at = |p: usize, j: usize| w[offset + p * strides[0] as usize + j * strides[1] as usize];
            let want = gemm::pack(k, n, NR, at).unwrap();
            // In bands of at most 1000 floats: several bands of columns or of depths.
            let mut got = vec![0; want.len() * 4];
            m.write(&mut |to, piece| copy_into(&mut got, to, piece), 1000).unwrap();
            assert_eq!(floats(&got), want, "strides {strides:?}, in bands");
            assert_eq!(floats(&Payload::Packed(Arc::new(m)).bytes().unwrap()), want, "strides {strides:?}");
        }
        assert!(PackedMatrix::new(source.clone(), 1, [1, 40], 40, 600).is_none(), "past the end");
        // A view reads what it reaches, transposed or backwards, and nothing past the end.
        let element = |i: usize| w[i].to_le_bytes();
        let view = source.strided(4, 41, &[2, 2], &[1, 40]).unwrap();
        assert_eq!(view, [41, 81, 42, 82].map(element).concat());
        assert_eq!(source.strided(4, 81, &[2], &[-40]).unwrap(), [81, 41].map(element).concat());
        assert_eq!(source.strided(4, 600 * 40 - 1, &[2], &[1]), None);
    }
}
