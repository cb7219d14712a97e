//! Owned contiguous tensors for the loader's API.

use aotc_abi::{AotcTensor, DLDevice, DType, DL_CPU};

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<i64>,
    /// Contiguous little-endian elements.
    pub data: Vec<u8>,
}

impl Tensor {
    pub fn zeros(dtype: DType, shape: &[i64]) -> Tensor {
        let n = shape.iter().product::<i64>().max(0) as usize;
        Tensor { dtype, shape: shape.to_vec(), data: vec![0; n * dtype.size()] }
    }

    pub fn from_f32(shape: &[i64], values: &[f32]) -> Tensor {
        Tensor { dtype: DType::F32, shape: shape.to_vec(), data: values.iter().flat_map(|v| v.to_le_bytes()).collect() }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product::<i64>().max(0) as usize
    }

    /// The elements as f64, whatever the dtype (for printing and comparisons).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let es = self.dtype.size();
        self.data.chunks_exact(es).map(|c| match self.dtype {
            DType::F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            DType::I64 => i64::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::I32 => i32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::I16 => i16::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::I8 => c[0] as i8 as f64,
            DType::U8 | DType::Bool => c[0] as f64,
            DType::F16 | DType::BF16 => {
                let bits = u16::from_le_bytes(c.try_into().unwrap()) as u32;
                if self.dtype == DType::BF16 { f32::from_bits(bits << 16) as f64 } else { half_to_f32(bits as u16) as f64 }
            }
        }).collect()
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
