//! safetensors files in the fixture layout: tensors keyed by pytree flat index, python
//! scalars in the header metadata `"scalars"` (`{"index": value}`).

use aotc_runtime::{DType, Tensor, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

fn st_dtype(d: DType) -> safetensors::Dtype {
    use safetensors::Dtype as S;
    match d {
        DType::U8 => S::U8,
        DType::I8 => S::I8,
        DType::I16 => S::I16,
        DType::I32 => S::I32,
        DType::I64 => S::I64,
        DType::F16 => S::F16,
        DType::F32 => S::F32,
        DType::F64 => S::F64,
        DType::Bool => S::BOOL,
        DType::BF16 => S::BF16,
    }
}

/// Python scalars of an inputs file, by flat index.
pub type Scalars = BTreeMap<String, serde_json::Value>;

/// Reads every tensor (by key) and the scalars metadata (by key).
pub fn read(path: &Path) -> Result<(BTreeMap<String, Tensor>, Scalars), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        let dtype = DType::from_safetensors_name(&format!("{:?}", view.dtype()))
            .ok_or_else(|| format!("{}: tensor '{name}' has unsupported dtype {:?}", path.display(), view.dtype()))?;
        tensors.insert(name, Tensor { dtype, shape: view.shape().iter().map(|&s| s as i64).collect(), data: view.data().to_vec() });
    }
    let scalars = match meta.metadata().as_ref().and_then(|m| m.get("scalars")) {
        Some(s) => serde_json::from_str(s).map_err(|e| format!("{}: bad scalars metadata: {e}", path.display()))?,
        None => BTreeMap::new(),
    };
    Ok((tensors, scalars))
}

/// The flat inputs `0..count` of a fixture inputs file.
pub fn read_inputs(path: &Path, count: usize) -> Result<Vec<Value>, String> {
    let (mut tensors, scalars) = read(path)?;
    (0..count).map(|i| {
        let key = i.to_string();
        if let Some(t) = tensors.remove(&key) {
            return Ok(Value::Tensor(t));
        }
        match scalars.get(&key) {
            Some(serde_json::Value::Bool(b)) => Ok(Value::Bool(*b)),
            Some(serde_json::Value::Number(n)) if n.is_i64() => Ok(Value::Int(n.as_i64().unwrap())),
            Some(serde_json::Value::Number(n)) => Ok(Value::Float(n.as_f64().unwrap_or(f64::NAN))),
            _ => Err(format!("{}: no tensor or scalar for input {i} (the model takes {count} inputs)", path.display())),
        }
    }).collect()
}

pub fn write(path: &Path, tensors: &[(String, &Tensor)]) -> Result<(), String> {
    let views = tensors.iter().map(|(k, t)| {
        let shape = t.shape.iter().map(|&s| s as usize).collect();
        safetensors::tensor::TensorView::new(st_dtype(t.dtype), shape, &t.data).map(|v| (k.clone(), v)).map_err(|e| format!("{k}: {e}"))
    }).collect::<Result<HashMap<_, _>, _>>()?;
    let bytes = safetensors::serialize(views, &None).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
