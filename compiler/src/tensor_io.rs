//! safetensors files in the fixture layout: tensors keyed by pytree flat index (or, in
//! an inputs file, by the input's name), python scalars in the header metadata `"scalars"`
//! (`{"index": value}`).

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

/// Python scalars of an inputs file, by key (flat index or input name).
pub type Scalars = BTreeMap<String, serde_json::Value>;

/// What an inputs file is: the input-format paragraph of `aotc run|bench|profile --help`.
pub const INPUT_FORMAT: &str = r#"Input files (--input): one safetensors file per call, holding the inputs of that call. Each tensor
is keyed by the input's name (the names `aotc inspect model.so` lists) or by its flat index ("0",
"1", ...: the order of the program's flattened (args, kwargs)). Python scalars (int, float, bool)
go in the header metadata, under "scalars": a JSON object keyed the same way. Every input must be
given exactly once; any other key is refused.

Writing one from Python:
    import json, safetensors.torch
    safetensors.torch.save_file({"x": x, "mask": mask}, "in.safetensors",
                                metadata={"scalars": json.dumps({"scale": 0.5})})
or, from numpy arrays: safetensors.numpy.save_file({"x": x}, "in.safetensors")"#;

/// What an inputs file is, in one sentence, for the errors of a file that is not one.
const INPUT_FORMAT_SHORT: &str =
    "an inputs file is a safetensors file of one call's inputs, keyed by input name or flat \
index (`aotc run --help` shows how to write one)";

/// Reads every tensor (by key) and the scalars metadata (by key).
pub fn read(path: &Path) -> Result<(BTreeMap<String, Tensor>, Scalars), String> {
    let bytes = aotc_abi::file::read_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let not_safetensors = |e: safetensors::SafeTensorError| not_safetensors(path, &bytes, e);
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(not_safetensors)?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(not_safetensors)?;
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        let dtype = DType::from_safetensors_name(&format!("{:?}", view.dtype()))
            .ok_or_else(|| format!("{}: tensor '{name}' has unsupported dtype {:?}", path.display(), view.dtype()))?;
        tensors.insert(
            name,
            Tensor { dtype, shape: view.shape().iter().map(|&s| s as i64).collect(), data: view.data().to_vec() },
        );
    }
    let scalars = match meta.metadata().as_ref().and_then(|m| m.get("scalars")) {
        Some(s) => serde_json::from_str(s).map_err(|e| {
            format!("{}: bad scalars metadata (expected a JSON object such as {{\"scale\": 0.5}}): {e}", path.display())
        })?,
        None => BTreeMap::new(),
    };
    Ok((tensors, scalars))
}

/// The error for a file safetensors cannot read: what the file is instead, when its first
/// bytes say, and what an inputs file is.
fn not_safetensors(path: &Path, bytes: &[u8], e: safetensors::SafeTensorError) -> String {
    let text = looks_like_text(bytes);
    let what = if bytes.is_empty() {
        "empty"
    } else if bytes.starts_with(b"PK") {
        "a zip archive (a .pt2?)"
    } else if bytes.starts_with(b"\x7fELF") {
        "a shared library (ELF)"
    } else if text && bytes.trim_ascii_start().starts_with(b"{") {
        "JSON text"
    } else if text {
        "text"
    } else {
        return format!("{} is not a safetensors inputs file ({e}): {INPUT_FORMAT_SHORT}", path.display());
    };
    format!("{} is {what}, not a safetensors inputs file: {INPUT_FORMAT_SHORT}", path.display())
}

/// Whether a file's first bytes are text: UTF-8 with no NUL (a character cut by the end of
/// what is looked at still counts).
pub(crate) fn looks_like_text(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(512)];
    !head.contains(&0) && std::str::from_utf8(head).map_or_else(|e| e.error_len().is_none(), |_| true)
}

/// The flat inputs `0..count` of a fixture inputs file, keyed by flat index only.
pub fn read_inputs(path: &Path, count: usize) -> Result<Vec<Value>, String> {
    read_named_inputs(path, &vec![""; count])
}

/// The flat inputs of an inputs file, one per entry of `names` (the program's input names,
/// as the library's manifest has them; "" for an input known by index only): each keyed by
/// its name or by its flat index, as a tensor or a python scalar. A key that is neither,
/// an input given twice and an input missing are errors.
pub fn read_named_inputs(path: &Path, names: &[impl AsRef<str>]) -> Result<Vec<Value>, String> {
    let names: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
    let (tensors, scalars) = read(path)?;
    let file = path.display();
    let index_of = |key: &str| {
        key.parse::<usize>()
            .ok()
            .filter(|&i| i < names.len())
            .or_else(|| names.iter().position(|n| !n.is_empty() && *n == key))
    };
    let describe =
        |i: usize| if names[i].is_empty() { format!("input {i}") } else { format!("input {i} ({})", names[i]) };
    let mut values: Vec<Option<(String, Value)>> = vec![None; names.len()];
    let mut unknown = vec![];
    let given = tensors.into_iter().map(|(k, t)| Ok((k, Value::Tensor(t)))).chain(scalars.into_iter().map(|(k, v)| {
        scalar(&v).map(|v| (k.clone(), v)).ok_or_else(|| {
            format!("{file}: scalar '{k}' is {v}; a python scalar input is a number, a bool, a string or null")
        })
    }));
    for entry in given {
        let (key, value) = entry?;
        let Some(i) = index_of(&key) else {
            unknown.push(format!("'{key}'"));
            continue;
        };
        if let Some((first, _)) = &values[i] {
            return Err(format!("{file}: {} is given twice, as '{first}' and as '{key}'", describe(i)));
        }
        values[i] = Some((key, value));
    }
    if !unknown.is_empty() {
        let expected: Vec<String> = (0..names.len())
            .map(|i| if names[i].is_empty() { format!("{i}") } else { format!("{i} or {}", names[i]) })
            .collect();
        return Err(format!(
            "{file}: unknown key(s) {}: the program's {} input(s) are keyed by flat index or by name: {}",
            unknown.join(", "),
            names.len(),
            expected.join(", ")
        ));
    }
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            v.map(|(_, v)| v).ok_or_else(|| {
                let named = if names[i].is_empty() {
                    String::new()
                } else {
                    format!(", named '{0}': key it '{i}' or '{0}'", names[i])
                };
                format!("{file}: no tensor or scalar for input {i} (the model takes {} inputs){named}", names.len())
            })
        })
        .collect()
}

/// A python scalar of the metadata as an input value.
pub fn scalar(v: &serde_json::Value) -> Option<Value> {
    match v {
        serde_json::Value::Bool(b) => Some(Value::Bool(*b)),
        serde_json::Value::Number(n) => {
            Some(n.as_i64().map_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN)), Value::Int))
        }
        serde_json::Value::String(s) => Some(Value::Str(s.clone())),
        serde_json::Value::Null => Some(Value::None),
        _ => None,
    }
}

/// A python scalar as the metadata's JSON value.
pub fn scalar_json(v: &Value) -> Option<serde_json::Value> {
    match v {
        Value::Int(i) => Some((*i).into()),
        Value::Bool(b) => Some((*b).into()),
        // JSON has no NaN or infinity: those are written as python spells them.
        Value::Float(f) => Some(serde_json::Number::from_f64(*f).map_or_else(|| f.to_string().into(), Into::into)),
        Value::Str(s) => Some(s.clone().into()),
        Value::None => Some(serde_json::Value::Null),
        Value::Tensor(_) => None,
    }
}

/// One call's outputs in the fixture layout: each tensor keyed by its flat output index,
/// each python-scalar output (its `kind` is not AOTC_KIND_TENSOR: a SymInt, SymFloat or
/// SymBool output) in the header metadata `"scalars"` (`{"1": 6}`), as PyTorch's expected
/// files hold them.
pub fn write_outputs(path: &Path, outputs: &[Tensor], kinds: &[i32]) -> Result<(), String> {
    let mut tensors = vec![];
    let mut scalars = Scalars::new();
    for (i, t) in outputs.iter().enumerate() {
        match kinds.get(i).and_then(|&k| t.scalar(k)).as_ref().and_then(scalar_json) {
            Some(v) => {
                scalars.insert(i.to_string(), v);
            }
            None => tensors.push((i.to_string(), t)),
        }
    }
    write_with_scalars(path, &tensors, &scalars)
}

pub fn write(path: &Path, tensors: &[(String, &Tensor)]) -> Result<(), String> {
    write_with_scalars(path, tensors, &Scalars::new())
}

/// [`write`], with python scalars in the header metadata `"scalars"` (when there are any).
pub fn write_with_scalars(path: &Path, tensors: &[(String, &Tensor)], scalars: &Scalars) -> Result<(), String> {
    let views = tensors
        .iter()
        .map(|(k, t)| {
            let shape = t.shape.iter().map(|&s| s as usize).collect();
            safetensors::tensor::TensorView::new(st_dtype(t.dtype), shape, &t.data)
                .map(|v| (k.clone(), v))
                .map_err(|e| format!("{k}: {e}"))
        })
        .collect::<Result<HashMap<_, _>, _>>()?;
    let metadata = (!scalars.is_empty())
        .then(|| serde_json::to_string(scalars).map(|s| HashMap::from([("scalars".to_string(), s)])))
        .transpose()
        .map_err(|e| e.to_string())?;
    let bytes = safetensors::serialize(views, &metadata).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
