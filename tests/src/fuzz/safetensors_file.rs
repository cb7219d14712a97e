//! safetensors files read and written by hand, so that mutants can hold shapes, dtypes
//! and offsets the safetensors crate would refuse to write.

use serde_json::{json, Map, Value};

#[derive(Clone, Debug)]
pub struct StTensor {
    pub name: String,
    /// safetensors dtype name: "F32", "I64", "BOOL"...
    pub dtype: String,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

/// The header's `__metadata__` string map, if any.
pub type Metadata = Option<Map<String, Value>>;

pub const DTYPES: &[&str] = &["BOOL", "U8", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "F64", "U64", "F8_E4M3"];

pub fn dtype_size(dtype: &str) -> usize {
    match dtype {
        "I16" | "F16" | "BF16" | "U16" => 2,
        "I32" | "F32" | "U32" => 4,
        "I64" | "F64" | "U64" => 8,
        _ => 1,
    }
}

/// The header and data section of `tensors`, laid out back to back as the format wants.
pub fn layout(tensors: &[StTensor], metadata: Option<&Map<String, Value>>) -> (Value, Vec<u8>) {
    let mut header = Map::new();
    let mut data = Vec::new();
    for t in tensors {
        let start = data.len();
        data.extend_from_slice(&t.data);
        header.insert(t.name.clone(), json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [start, data.len()]}));
    }
    if let Some(m) = metadata {
        header.insert("__metadata__".into(), Value::Object(m.clone()));
    }
    (Value::Object(header), data)
}

/// File bytes: 8-byte little-endian header length, the JSON header, the data.
pub fn assemble(header: &Value, data: &[u8]) -> Vec<u8> {
    let text = header.to_string();
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

pub fn encode(tensors: &[StTensor], metadata: Option<&Map<String, Value>>) -> Vec<u8> {
    let (header, data) = layout(tensors, metadata);
    assemble(&header, &data)
}

/// The tensors (in data order) and metadata of a well-formed file.
pub fn decode(bytes: &[u8]) -> Option<(Vec<StTensor>, Metadata)> {
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let header: Map<String, Value> = serde_json::from_slice(bytes.get(8..8usize.checked_add(len)?)?).ok()?;
    let data = &bytes[8 + len..];
    let mut tensors = Vec::new();
    let mut metadata = None;
    for (name, info) in header {
        if name == "__metadata__" {
            metadata = info.as_object().cloned();
            continue;
        }
        let offsets: Vec<usize> =
            info["data_offsets"].as_array()?.iter().filter_map(|v| v.as_u64().map(|v| v as usize)).collect();
        let (start, end) = (*offsets.first()?, *offsets.get(1)?);
        tensors.push((
            start,
            StTensor {
                name,
                dtype: info["dtype"].as_str()?.to_string(),
                shape: info["shape"].as_array()?.iter().filter_map(Value::as_i64).collect(),
                data: data.get(start..end)?.to_vec(),
            },
        ));
    }
    tensors.sort_by_key(|(start, _)| *start);
    Some((tensors.into_iter().map(|(_, t)| t).collect(), metadata))
}
