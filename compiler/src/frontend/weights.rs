//! Weight payloads: a strided view of raw storage bytes becomes a dense tensor.
//!
//! Sizes, strides and offsets come from the archive, so each one is checked (static,
//! non-negative, ranks that agree, no 64-bit overflow, inside the storage) before any
//! memory is sized or indexed from it.

use super::schema::{SymInt, TensorMeta};
use crate::error::{Error, Result};
use aotc_abi::layout::{for_each_offset, is_contiguous};
use aotc_abi::DType;
use std::path::Path;

/// The most aotc reads out of one archive, and the most dense weights it builds from one:
/// far beyond any model it compiles, yet a bound, so that a forged size or a view that
/// repeats its storage (stride 0) is refused rather than exhausting memory.
pub(super) const MAX_BYTES: u64 = 64 << 30;

/// A dense, contiguous, little-endian tensor.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: DType,
    pub sizes: Vec<i64>,
    pub data: Vec<u8>,
}

fn static_int(name: &str, what: &str, s: &SymInt) -> Result<i64> {
    match s {
        SymInt::Int(v) => Ok(*v),
        SymInt::Expr(e) => Err(Error::Weight {
            name: name.into(),
            message: format!("{what} is symbolic ({}); weights must have static shapes", e.expr_str),
        }),
    }
}

/// The byte size of a dense `dtype[sizes]` (sizes non-negative), or None when it overflows
/// or exceeds `limit`.
fn dense_bytes(dtype: DType, sizes: &[i64], limit: u64) -> Option<usize> {
    let bytes = sizes.iter().try_fold(dtype.size() as u64, |acc, &n| acc.checked_mul(u64::try_from(n).ok()?))?;
    if bytes > limit {
        None
    } else {
        usize::try_from(bytes).ok()
    }
}

/// The lowest and highest element offsets a non-empty view reaches, or None when either
/// overflows `i64`.
fn extent(offset: i64, sizes: &[i64], strides: &[i64]) -> Option<(i64, i64)> {
    sizes.iter().zip(strides).try_fold((offset, offset), |(lo, hi), (&n, &s)| {
        let reach = (n - 1).checked_mul(s)?;
        if reach < 0 {
            Some((lo.checked_add(reach)?, hi))
        } else {
            Some((lo, hi.checked_add(reach)?))
        }
    })
}

/// A weight's view of its storage (sizes, strides, storage_offset), checked: static,
/// non-negative, ranks that agree, element offsets within 64 bits, a dense size within
/// the limit it was parsed under.
pub struct View {
    name: String,
    dtype: DType,
    sizes: Vec<i64>,
    strides: Vec<i64>,
    offset: i64,
    /// The dense tensor's byte size.
    bytes: usize,
    /// The lowest and highest element offsets it reads; None when it reads none.
    extent: Option<(i64, i64)>,
}

impl View {
    /// The view `meta` describes for weight `name`, whose dense form may take at most
    /// `limit` bytes: what is left of [`MAX_BYTES`] for the archive's weights.
    pub fn parse(name: &str, meta: &TensorMeta, limit: u64) -> Result<View> {
        let err = |message: String| Error::Weight { name: name.into(), message };
        let dtype =
            DType::from_torch_code(meta.dtype).ok_or_else(|| err(format!("unsupported dtype code {}", meta.dtype)))?;
        let sizes = meta.sizes.iter().map(|s| static_int(name, "a size", s)).collect::<Result<Vec<_>>>()?;
        let strides = meta.strides.iter().map(|s| static_int(name, "a stride", s)).collect::<Result<Vec<_>>>()?;
        let offset = static_int(name, "the storage offset", &meta.storage_offset)?;
        let mut view = View { name: name.into(), dtype, sizes, strides, offset, bytes: 0, extent: None };
        if view.sizes.iter().any(|&n| n < 0) || offset < 0 {
            return Err(err(format!("negative size or storage offset ({})", view.describe())));
        }
        if view.strides.len() != view.sizes.len() {
            return Err(err(format!(
                "{} strides for {} sizes ({})",
                view.strides.len(),
                view.sizes.len(),
                view.describe()
            )));
        }
        view.bytes = dense_bytes(dtype, &view.sizes, limit).ok_or_else(|| {
            err(format!("takes the weights past the {} GiB aotc builds ({})", MAX_BYTES >> 30, view.describe()))
        })?;
        if view.bytes > 0 {
            let reach = extent(offset, &view.sizes, &view.strides)
                .ok_or_else(|| err(format!("the view ({}) overflows 64-bit element offsets", view.describe())))?;
            view.extent = Some(reach);
        }
        Ok(view)
    }

    fn describe(&self) -> String {
        format!("{} sizes {:?}, strides {:?}, storage offset {}", self.dtype, self.sizes, self.strides, self.offset)
    }

    /// How many leading bytes of its storage the view reads: all a reader needs of the
    /// payload (a storage may be longer, shared with other views).
    pub fn storage_bytes(&self) -> u64 {
        // A view reaching below the storage (hi < 0) needs none of it: gathering refuses it.
        let elements = self.extent.and_then(|(_, hi)| u64::try_from(hi).ok()).map_or(0, |hi| hi + 1);
        elements.saturating_mul(self.dtype.size() as u64)
    }

    /// Gathers the view out of `storage`, the bytes of `payload` (its name in the archive,
    /// for messages), into a dense tensor.
    pub fn gather(self, payload: &str, storage: &[u8]) -> Result<Tensor> {
        let view = self.describe();
        let View { name, dtype, sizes, strides, offset, bytes, extent } = self;
        let Some((lo, hi)) = extent else { return Ok(Tensor { dtype, sizes, data: vec![] }) };
        let err = |message: String| Error::Weight { name: name.clone(), message };
        let es = dtype.size();
        let held = i64::try_from(storage.len() / es).unwrap_or(i64::MAX);
        if lo < 0 || hi >= held {
            return Err(err(format!(
                "the view ({view}) reads elements {lo}..={hi}, but payload {payload} holds {} bytes ({held} elements)",
                storage.len()
            )));
        }
        // From here every element offset `offset + e` lies in lo..=hi, inside the storage, and
        // the sums for_each_offset forms stay within those bounds.
        // The usual case: a dense view is a slice of the storage.
        if is_contiguous(&sizes, &strides) {
            let start = offset as usize * es;
            return Ok(Tensor { dtype, sizes, data: storage[start..start + bytes].to_vec() });
        }
        let mut data = Vec::new();
        data.try_reserve_exact(bytes).map_err(|_| err(format!("cannot allocate {bytes} bytes ({view})")))?;
        for_each_offset(&sizes, &strides, |_, e| {
            let at = (offset + e) as usize * es;
            data.extend_from_slice(&storage[at..at + es]);
        });
        Ok(Tensor { dtype, sizes, data })
    }
}

/// Every tensor of a safetensors file, keyed by its name.
pub fn from_safetensors(path: &Path, bytes: &[u8]) -> Result<Vec<(String, Tensor)>> {
    let bad = |name: &str, message: String| Error::Format {
        path: path.into(),
        message: format!("tensor '{name}': {message}"),
    };
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Format { path: path.into(), message: format!("not a safetensors file: {e}") })?;
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let dtype = DType::from_safetensors_name(&format!("{:?}", view.dtype()))
                .ok_or_else(|| bad(&name, format!("unsupported dtype {:?}", view.dtype())))?;
            let sizes = view
                .shape()
                .iter()
                .map(|&s| i64::try_from(s))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| bad(&name, format!("a size of {:?} does not fit in 64 bits", view.shape())))?;
            // The safetensors crate checks this too; the weights blob relies on it.
            if dense_bytes(dtype, &sizes, MAX_BYTES) != Some(view.data().len()) {
                return Err(bad(
                    &name,
                    format!("{dtype}{sizes:?} does not match its {} bytes of data", view.data().len()),
                ));
            }
            Ok((name, Tensor { dtype, sizes, data: view.data().to_vec() }))
        })
        .collect()
}
