//! Owned contiguous tensors for the loader's API.

use crate::Error;
use aotc_abi::layout::{byte_len, numel};
use aotc_abi::{status, AotcTensor, DLDevice, DType, DL_CPU};

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<i64>,
    /// Contiguous little-endian elements.
    pub data: Vec<u8>,
}

impl Tensor {
    /// # Panics
    /// If a size is negative or the tensor does not fit in memory.
    pub fn zeros(dtype: DType, shape: &[i64]) -> Tensor {
        let bytes = byte_len(shape, dtype.size())
            .unwrap_or_else(|| panic!("no {dtype} tensor of shape {shape:?} fits in memory"));
        Tensor { dtype, shape: shape.to_vec(), data: vec![0; bytes] }
    }

    pub fn from_f32(shape: &[i64], values: &[f32]) -> Tensor {
        Tensor { dtype: DType::F32, shape: shape.to_vec(), data: values.iter().flat_map(|v| v.to_le_bytes()).collect() }
    }

    /// The element count (0 for a shape with a negative size or too many elements,
    /// which [`Tensor::check_len`] refuses).
    pub fn numel(&self) -> usize {
        numel(&self.shape).and_then(|n| usize::try_from(n).ok()).unwrap_or(0)
    }

    /// Fails unless `data` holds exactly the bytes of `shape`: the library reads (and
    /// writes back) that many bytes through the raw pointer.
    pub(crate) fn check_len(&self, what: &str) -> Result<(), Error> {
        match byte_len(&self.shape, self.dtype.size()) {
            Some(n) if n == self.data.len() => Ok(()),
            Some(n) => Err(Error::new(
                status::INVALID_ARGUMENT,
                format!(
                    "{what}: a {} tensor of shape {:?} holds {n} bytes, this one {}",
                    self.dtype,
                    self.shape,
                    self.data.len()
                ),
            )),
            None => {
                Err(Error::new(status::INVALID_ARGUMENT, format!("{what}: shape {:?} is not a valid size", self.shape)))
            }
        }
    }

    /// The python scalar a 0-dim output of kind `kind` (`aotc.h`'s AOTC_KIND_*, as
    /// [`crate::Model::outputs`] reports it) is; `None` for a tensor output, or a tensor
    /// that is not 0-dim.
    pub fn scalar(&self, kind: i32) -> Option<crate::Value> {
        use aotc_abi::value_kind;
        if kind == value_kind::TENSOR || !self.shape.is_empty() {
            return None;
        }
        let x = *self.to_f64_vec().first()?;
        let int = || match self.dtype {
            DType::I64 => self.data.get(..8).map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes"))),
            d if d.is_float() => None,
            _ => Some(x as i64),
        };
        match kind {
            value_kind::INT => int().map(crate::Value::Int),
            value_kind::BOOL => Some(crate::Value::Bool(x != 0.0)),
            value_kind::FLOAT => Some(crate::Value::Float(x)),
            _ => None,
        }
    }

    /// The elements as f64, whatever the dtype (for printing and comparisons).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let es = self.dtype.size();
        self.data
            .chunks_exact(es)
            .map(|c| match self.dtype {
                DType::F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
                DType::F64 => f64::from_le_bytes(c.try_into().unwrap()),
                DType::I64 => i64::from_le_bytes(c.try_into().unwrap()) as f64,
                DType::I32 => i32::from_le_bytes(c.try_into().unwrap()) as f64,
                DType::I16 => i16::from_le_bytes(c.try_into().unwrap()) as f64,
                DType::I8 => c[0] as i8 as f64,
                DType::U8 | DType::Bool => c[0] as f64,
                DType::F16 | DType::BF16 => {
                    let bits = u16::from_le_bytes(c.try_into().unwrap()) as u32;
                    if self.dtype == DType::BF16 {
                        f32::from_bits(bits << 16) as f64
                    } else {
                        half_to_f32(bits as u16) as f64
                    }
                }
            })
            .collect()
    }

    /// A DLPack view of this tensor's memory (valid while `self` is not moved or resized).
    pub fn as_raw(&mut self) -> AotcTensor {
        AotcTensor {
            data: self.data.as_mut_ptr().cast(),
            device: DLDevice { device_type: DL_CPU, device_id: 0 },
            ndim: self.shape.len() as i32,
            dtype: self.dtype.to_dlpack(),
            shape: self.shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }
}

fn half_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as u32;
    let bits = match exp {
        0 if frac == 0 => sign,
        0 => return if sign != 0 { -(frac as f32) * 2f32.powi(-24) } else { frac as f32 * 2f32.powi(-24) },
        31 => sign | 0x7f80_0000 | (frac << 13),
        e => sign | (((e - 15 + 127) as u32) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}
