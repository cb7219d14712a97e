//! A `--weights FILE.safetensors` for the fixture: the archive's weights by name, some
//! with the wrong shape or dtype, missing or renamed; or a file that lies about itself.

use super::super::interesting;
use super::super::json::sym_ints;
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::super::safetensors_file::{assemble, dtype_size, encode, layout, StTensor, DTYPES};
use super::Mutator;
use serde_json::json;

pub const MUTATORS: &[(usize, Mutator)] = &[(6, by_name), (3, lying_file)];

/// Elements beyond this are not worth writing: a shape that large is a lie told in the header.
const MAX_ELEMENTS: i64 = 1 << 20;

fn safetensors_dtype(torch_code: i64) -> &'static str {
    match torch_code {
        1 => "U8",
        2 => "I8",
        3 => "I16",
        4 => "I32",
        5 => "I64",
        6 => "F16",
        8 => "F64",
        12 => "BOOL",
        13 => "BF16",
        _ => "F32",
    }
}

/// The archive's weights as (FQN, safetensors dtype, sizes).
fn archive_weights(m: &Mutant) -> Vec<(String, &'static str, Vec<i64>)> {
    let Some(config) = m.weights_config.as_ref().and_then(|c| c["config"].as_object()) else { return Vec::new() };
    config
        .iter()
        .map(|(fqn, entry)| {
            let meta = &entry["tensor_meta"];
            (fqn.clone(), safetensors_dtype(meta["dtype"].as_i64().unwrap_or(7)), sym_ints(&meta["sizes"]))
        })
        .collect()
}

fn tensor(rng: &mut Rng, name: String, dtype: &str, shape: Vec<i64>) -> StTensor {
    let numel = shape.iter().try_fold(1i64, |n, &s| n.checked_mul(s.max(0))).unwrap_or(i64::MAX).min(MAX_ELEMENTS);
    let data = rng.bytes(numel as usize * dtype_size(dtype));
    StTensor { name, dtype: dtype.to_string(), shape, data }
}

/// Every archive weight by name, each kept, reshaped, retyped, renamed or left out.
fn by_name(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let weights = archive_weights(m);
    if weights.is_empty() {
        return None;
    }
    let mut tensors = Vec::new();
    let mut changes = Vec::new();
    for (fqn, dtype, sizes) in weights {
        match rng.below(10) {
            0 => changes.push(format!("{fqn} left out")),
            1 => {
                changes.push(format!("{fqn} renamed"));
                tensors.push(tensor(rng, format!("{fqn}.renamed"), dtype, sizes));
            }
            2 | 3 => {
                let mut shape = sizes.clone();
                match (rng.below(3), shape.len()) {
                    (0, n) if n > 0 => {
                        shape[rng.below(n)] = interesting::int(rng, Some(sizes[0])).clamp(0, MAX_ELEMENTS)
                    }
                    (1, _) => shape.push(2),
                    _ => shape.reverse(),
                }
                changes.push(format!("{fqn} shape {sizes:?} -> {shape:?}"));
                tensors.push(tensor(rng, fqn, dtype, shape));
            }
            4 => {
                let other = *rng.pick(DTYPES);
                changes.push(format!("{fqn} dtype {dtype} -> {other}"));
                tensors.push(tensor(rng, fqn, other, sizes));
            }
            _ => tensors.push(tensor(rng, fqn, dtype, sizes)),
        }
    }
    if rng.chance(1, 3) {
        changes.push("an extra unknown tensor".into());
        tensors.push(tensor(rng, "fuzz.unknown".into(), "F32", vec![3]));
    }
    m.weights_file = Some(encode(&tensors, None));
    Some(format!(
        "--weights with the archive's names: {}",
        if changes.is_empty() { "all matching".into() } else { changes.join("; ") }
    ))
}

/// A safetensors file whose header contradicts its data, or that is no safetensors at all.
fn lying_file(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let name = archive_weights(m).first().map(|w| w.0.clone()).unwrap_or_else(|| "fuzz.weight".into());
    let honest = vec![tensor(rng, name.clone(), "F32", vec![4, 4])];
    let (mut header, data) = layout(&honest, None);
    let (bytes, label) = match rng.below(7) {
        0 => {
            header[&name]["data_offsets"] = json!([0u64, 1u64 << 40]);
            (assemble(&header, &data), "data_offsets past the end")
        }
        1 => {
            header[&name]["data_offsets"] = json!([64, 0]);
            (assemble(&header, &data), "data_offsets reversed")
        }
        2 => {
            header[&name]["shape"] = json!([1u64 << 32, 1u64 << 32]);
            (assemble(&header, &data), "a shape whose byte size overflows")
        }
        3 => {
            header[&name]["shape"] = json!([-4, 4]);
            (assemble(&header, &data), "a negative dimension")
        }
        4 => {
            let mut bytes = u64::MAX.to_le_bytes().to_vec();
            bytes.extend_from_slice(b"{}");
            (bytes, "a header length of 2^64-1")
        }
        5 => {
            let len = rng.below(64);
            (rng.bytes(len), "random bytes")
        }
        _ => {
            header["__metadata__"] = json!({"format": {"nested": true}});
            (assemble(&header, &data), "metadata that is not a string map")
        }
    };
    m.weights_file = Some(bytes);
    Some(format!("--weights file with {label}"))
}
