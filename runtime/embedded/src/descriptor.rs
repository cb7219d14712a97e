//! Checks of a caller's tensor descriptor (a DLPack `DLTensor`) before anything reads
//! through it: the caller is code we do not control, so every field is suspect.
//!
//! The order matters: `ndim` is checked against the expected rank before `shape` is
//! read (a bad `ndim` says nothing about how long the shape array is); then the sizes,
//! the element count, and the bytes the strides and `byte_offset` reach are computed
//! with checked arithmetic; only then is `data` trusted to hold that many bytes.

use crate::error::{err, Error, Result};
use aotc_abi::layout::{byte_len, extent, is_contiguous, write_contiguous_strides};
use aotc_abi::{status, AotcTensor, DType, DL_CPU, DL_CUDA};
use smallvec::SmallVec;
use std::fmt::Display;
use std::ops::Range;

/// A shape or strides: inline up to rank 8, so that checking a call's descriptors
/// allocates nothing.
pub type Dims = SmallVec<[i64; 8]>;

/// Where an instance runs, and so where its tensors must live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Cpu,
    /// The CUDA device of this ordinal.
    Cuda(i32),
}

impl Place {
    fn holds(self, t: &AotcTensor) -> bool {
        match self {
            Place::Cpu => t.device.device_type == DL_CPU,
            Place::Cuda(n) => t.device.device_type == DL_CUDA && t.device.device_id == n,
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Cpu => f.write_str("the CPU (device type 1)"),
            Place::Cuda(n) => write!(f, "cuda:{n} (device type 2, id {n})"),
        }
    }
}

/// A checked caller's tensor: shape and strides copied out, sizes known not to overflow.
pub struct View {
    pub shape: Dims,
    /// `None` when contiguous (null strides, or strides equal to the row-major ones).
    pub strides: Option<Dims>,
    /// Bytes of the contiguous layout: `numel * element size`.
    pub bytes: usize,
    /// The first element: `data + byte_offset`.
    pub data: *mut u8,
    /// The addresses the view touches; empty when it has no elements.
    pub span: Range<usize>,
}

impl View {
    /// The strides to walk the caller's memory with.
    pub fn walk_strides(&self) -> Dims {
        self.strides.clone().unwrap_or_else(|| row_major(&self.shape))
    }
}

/// The dtype of `t` in messages, also when it is none aotc knows.
pub fn dtype_of(t: &AotcTensor) -> String {
    match DType::from_dlpack(t.dtype) {
        Some(d) => d.to_string(),
        None => format!("DLDataType(code={}, bits={}, lanes={})", t.dtype.code, t.dtype.bits, t.dtype.lanes),
    }
}

fn invalid(what: &dyn Display, message: impl Display) -> Error {
    Error { code: status::INVALID_ARGUMENT, message: format!("{what}: {message}") }
}

/// Checks `t` (whose dtype the caller checked: elements of `elem` bytes) for a value of
/// rank `rank` on `place`; `want_shape` formats the expected shape for a rank mismatch.
/// Nothing is copied between devices: a tensor elsewhere is an error.
pub fn check_view(
    t: &AotcTensor,
    what: &dyn Display,
    place: Place,
    rank: usize,
    elem: usize,
    want_shape: impl Fn() -> String,
) -> Result<View> {
    if !place.holds(t) {
        return err(
            status::DEVICE,
            format!(
                "{what}: tensor is on device type {} id {}, expected {place}",
                t.device.device_type, t.device.device_id
            ),
        );
    }
    if usize::try_from(t.ndim) != Ok(rank) {
        return err(
            status::RANK,
            format!("{what}: expected rank {rank} (shape [{}]), got rank {}", want_shape(), t.ndim),
        );
    }
    let shape = read_array(t.shape, rank).ok_or_else(|| invalid(what, "shape is a null pointer"))?;
    if let Some(d) = shape.iter().position(|&n| n < 0) {
        return err(status::SHAPE, format!("{what}: dimension {d} has negative size {}", shape[d]));
    }
    let bytes = byte_len(&shape, elem).ok_or_else(|| Error {
        code: status::SHAPE,
        message: format!("{what}: shape {shape:?} holds more bytes than fit in memory"),
    })?;
    // Null strides mean contiguous (DLPack); the array is read only when non-null.
    let strides = if t.strides.is_null() { None } else { read_array(t.strides, rank) };
    let walk = strides.clone().unwrap_or_else(|| row_major(&shape));
    let relative = extent(&shape, &walk).and_then(|e| e.byte_span(elem, t.byte_offset)).ok_or_else(|| {
        let layout = if t.strides.is_null() { "contiguous".to_string() } else { format!("strides {walk:?}") };
        invalid(
            what,
            format_args!(
                "shape {shape:?} ({layout}) at byte_offset {} reaches byte offsets that overflow 64 bits",
                t.byte_offset
            ),
        )
    })?;
    if t.data.is_null() && bytes > 0 {
        return Err(invalid(what, "data is a null pointer"));
    }
    let span = absolute(t.data as usize, &relative).ok_or_else(|| {
        invalid(what, format_args!("data {:p} with byte range {relative:?} wraps around the address space", t.data))
    })?;
    Ok(View {
        strides: strides.filter(|s| !is_contiguous(&shape, s)),
        shape,
        bytes,
        data: (t.data as *mut u8).wrapping_add(t.byte_offset as usize),
        span,
    })
}

/// The row-major (contiguous) strides of `shape`.
fn row_major(shape: &[i64]) -> Dims {
    let mut strides = Dims::from_elem(0, shape.len());
    write_contiguous_strides(shape, &mut strides);
    strides
}

/// `len` entries at `p`; `None` if `p` is null while entries are needed.
fn read_array(p: *const i64, len: usize) -> Option<Dims> {
    if len == 0 {
        return Some(Dims::new());
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: DLPack contract: a non-null shape or strides array holds ndim entries, and
    // ndim was checked to be the expected rank (never a size taken from the caller).
    Some(Dims::from_slice(unsafe { std::slice::from_raw_parts(p, len) }))
}

/// The absolute addresses `base + relative`, if they stay within `0..=isize::MAX`.
fn absolute(base: usize, relative: &Range<i64>) -> Option<Range<usize>> {
    let at = |off: i64| base.checked_add_signed(off as isize).filter(|&a| isize::try_from(a).is_ok());
    Some(at(relative.start)?..at(relative.end)?)
}
