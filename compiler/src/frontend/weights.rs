//! Weight payloads: a strided view of raw storage bytes becomes a dense tensor; a dense
//! view of a storage in a file stays a region of that file (`ir::Payload`), read when the
//! weights are written out.
//!
//! Sizes, strides and offsets come from the archive, so each one is checked (static,
//! non-negative, ranks that agree, no 64-bit overflow, inside the storage) before any
//! memory is sized or indexed from it.

use super::schema::{SymInt, TensorMeta};
use crate::error::{Error, Result};
use crate::ir::payload::{FileRegion, SourceFile};
use crate::ir::Payload;
use aotc_abi::layout::{for_each_offset, is_contiguous};
use aotc_abi::DType;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

/// The most aotc reads out of one archive, and the most dense weights it builds from one:
/// far beyond any model it compiles, yet a bound, so that a forged size or a view that
/// repeats its storage (stride 0) is refused rather than exhausting memory.
pub(super) const MAX_BYTES: u64 = 64 << 30;

/// A dense, contiguous, little-endian tensor.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: DType,
    pub sizes: Vec<i64>,
    pub data: Payload,
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
    /// for messages), into a dense tensor: a slice of the storage when the view is dense
    /// (no copy), else its elements read and gathered.
    pub fn gather(self, payload: &str, storage: &Payload) -> Result<Tensor> {
        let view = self.describe();
        let View { name, dtype, sizes, strides, offset, bytes, extent } = self;
        let Some((lo, hi)) = extent else { return Ok(Tensor { dtype, sizes, data: Vec::new().into() }) };
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
            return Ok(Tensor { dtype, sizes, data: storage.slice(offset as usize * es, bytes)? });
        }
        let storage = storage.bytes()?;
        let mut data = Vec::new();
        data.try_reserve_exact(bytes).map_err(|_| err(format!("cannot allocate {bytes} bytes ({view})")))?;
        for_each_offset(&sizes, &strides, |_, e| {
            let at = (offset + e) as usize * es;
            data.extend_from_slice(&storage[at..at + es]);
        });
        Ok(Tensor { dtype, sizes, data: data.into() })
    }
}

/// Every tensor of a safetensors file, keyed by its name: regions of the file, read when
/// the weights are written out.
pub fn from_safetensors(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let bad = |name: &str, message: String| Error::Format {
        path: path.into(),
        message: format!("tensor '{name}': {message}"),
    };
    let io = |source| Error::Io { path: path.into(), source };
    let file = Arc::new(SourceFile { path: path.into(), file: aotc_abi::file::open_regular(path).map_err(io)? });
    let map = Mapping::new(&file.file).map_err(io)?;
    let bytes = map.bytes();
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
            // The crate's views are slices of the mapping: their place in the file.
            let offset = (view.data().as_ptr() as usize - bytes.as_ptr() as usize) as u64;
            let region = FileRegion { file: file.clone(), offset, len: view.data().len() as u64 };
            Ok((name, Tensor { dtype, sizes, data: Payload::File(region) }))
        })
        .collect()
}

/// A read-only mapping of a whole file, for the safetensors crate, which checks a header
/// against the length of the data after it given the file whole: mapped, the tensors'
/// pages are never read (nor held) here.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(file: &std::fs::File) -> std::io::Result<Mapping> {
        let len = usize::try_from(file.metadata()?.len()).map_err(std::io::Error::other)?;
        if len == 0 {
            return Ok(Mapping { ptr: std::ptr::null_mut(), len });
        }
        // SAFETY: a new private read-only mapping of an open file; the kernel checks the
        // arguments and the result is tested below.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes until `self` drops. (A file truncated by
        // another process meanwhile would fault on access; only its header is read.)
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: `ptr` and `len` are those of a live mapping made by `Mapping::new`,
            // which no slice outlives (`bytes` borrows `self`).
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}
