//! Weight payloads: a strided view of raw storage bytes becomes a dense tensor.

use super::schema::{SymInt, TensorMeta};
use crate::error::{Error, Result};
use aotc_abi::layout::{for_each_offset, is_contiguous};
use aotc_abi::DType;
use std::path::Path;

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
        SymInt::Expr(e) => Err(Error::Weight { name: name.into(), message: format!("{what} is symbolic ({}); weights must have static shapes", e.expr_str) }),
    }
}

/// Gathers the view `meta` describes (sizes, strides, storage_offset) out of `storage`.
pub fn dense_from_storage(name: &str, meta: &TensorMeta, storage: &[u8]) -> Result<Tensor> {
    let dtype = DType::from_torch_code(meta.dtype)
        .ok_or_else(|| Error::Weight { name: name.into(), message: format!("unsupported dtype code {}", meta.dtype) })?;
    let sizes = meta.sizes.iter().map(|s| static_int(name, "a size", s)).collect::<Result<Vec<_>>>()?;
    let strides = meta.strides.iter().map(|s| static_int(name, "a stride", s)).collect::<Result<Vec<_>>>()?;
    let offset = static_int(name, "the storage offset", &meta.storage_offset)?;
    let es = dtype.size();
    let numel: i64 = sizes.iter().product();
    if numel == 0 {
        return Ok(Tensor { dtype, sizes, data: vec![] });
    }
    let max_elem = offset + sizes.iter().zip(&strides).map(|(n, s)| (n - 1) * s).sum::<i64>();
    let min_elem = offset + sizes.iter().zip(&strides).map(|(n, s)| (n - 1) * s.min(&0)).sum::<i64>();
    let need = (max_elem + 1) as usize * es;
    if min_elem < 0 || storage.len() < need {
        return Err(Error::Weight {
            name: name.into(),
            message: format!("storage holds {} bytes, but the view (sizes {sizes:?}, strides {strides:?}, offset {offset}) of {dtype} needs {need}", storage.len()),
        });
    }
    // The usual case: a dense view is a slice of the storage.
    if is_contiguous(&sizes, &strides) {
        let start = offset as usize * es;
        return Ok(Tensor { dtype, sizes, data: storage[start..start + numel as usize * es].to_vec() });
    }
    let mut data = Vec::with_capacity(numel as usize * es);
    for_each_offset(&sizes, &strides, |_, e| {
        let e = (offset + e) as usize;
        data.extend_from_slice(&storage[e * es..(e + 1) * es]);
    });
    Ok(Tensor { dtype, sizes, data })
}

/// Every tensor of a safetensors file, keyed by its name.
pub fn from_safetensors(path: &Path, bytes: &[u8]) -> Result<Vec<(String, Tensor)>> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Format { path: path.into(), message: format!("not a safetensors file: {e}") })?;
    st.tensors().into_iter().map(|(name, view)| {
        let dtype = DType::from_safetensors_name(&format!("{:?}", view.dtype()))
            .ok_or_else(|| Error::Weight { name: name.clone(), message: format!("unsupported dtype {:?}", view.dtype()) })?;
        let sizes = view.shape().iter().map(|&s| s as i64).collect();
        Ok((name, Tensor { dtype, sizes, data: view.data().to_vec() }))
    }).collect()
}
