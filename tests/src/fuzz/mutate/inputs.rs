//! The caller's side: the first call's inputs get other shapes, dtypes, contents or keys.
//! Compiling is untouched; the library's own input checks are what is tested.

use super::super::interesting;
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::super::safetensors_file::{dtype_size, Metadata, StTensor, DTYPES};
use super::Mutator;
use serde_json::{json, Map};

pub const MUTATORS: &[(usize, Mutator)] = &[(4, reshape), (2, retype), (3, contents), (2, keys), (1, scalars)];

/// Keeps rewritten inputs small enough to allocate (and to run under valgrind).
const MAX_ELEMENTS: i64 = 1 << 22;

fn edit_inputs(
    m: &mut Mutant,
    edit: impl FnOnce(&mut Vec<StTensor>, &mut Metadata) -> Option<String>,
) -> Option<String> {
    m.edit_first_inputs(edit).map(|d| format!("inputs_0: {d}"))
}

/// Resizes `t.data` to its shape, keeping the old bytes as a prefix.
pub fn fit_data(t: &mut StTensor, rng: &mut Rng) {
    let numel = t.shape.iter().try_fold(1i64, |n, &s| n.checked_mul(s.max(0))).unwrap_or(0).min(MAX_ELEMENTS);
    let want = numel as usize * dtype_size(&t.dtype);
    let extra = want.saturating_sub(t.data.len());
    t.data.truncate(want);
    t.data.extend(rng.bytes(extra));
}

fn pick<'t>(tensors: &'t mut [StTensor], rng: &mut Rng) -> Option<&'t mut StTensor> {
    if tensors.is_empty() {
        return None;
    }
    let i = rng.below(tensors.len());
    tensors.get_mut(i)
}

/// A dimension changes (zero, one off, past a dynamic range), or the rank does.
fn reshape(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    edit_inputs(m, |tensors, _| {
        let t = pick(tensors, rng)?;
        let old = t.shape.clone();
        match (rng.below(4), t.shape.len()) {
            (0 | 1, n) if n > 0 => {
                let i = rng.below(n);
                t.shape[i] = *rng.pick(&[0, 1, t.shape[i] + 1, t.shape[i] - 1, 1025, t.shape[i] * 2]);
            }
            (2, _) => t.shape.push(*rng.pick(&[1, 2])),
            _ => drop(t.shape.pop()),
        }
        let lie = rng.chance(1, 5);
        if !lie {
            fit_data(t, rng);
        }
        Some(format!(
            "tensor '{}' shape {old:?} -> {:?}{}",
            t.name,
            t.shape,
            if lie { " (data left as is)" } else { "" }
        ))
    })
}

fn retype(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    edit_inputs(m, |tensors, _| {
        let t = pick(tensors, rng)?;
        let old = std::mem::replace(&mut t.dtype, rng.pick(DTYPES).to_string());
        fit_data(t, rng);
        Some(format!("tensor '{}' dtype {old} -> {}", t.name, t.dtype))
    })
}

/// Values that matter when used as indices (token ids, gather indices) or in arithmetic.
fn contents(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    edit_inputs(m, |tensors, _| {
        let t = pick(tensors, rng)?;
        let size = dtype_size(&t.dtype);
        let value: Vec<u8> = match size {
            8 => interesting::int(rng, None).to_le_bytes().to_vec(),
            4 => rng
                .pick(&[f32::NAN.to_bits(), f32::INFINITY.to_bits(), 0x7fff_ffff, 0x8000_0000])
                .to_le_bytes()
                .to_vec(),
            2 => vec![0xff, 0x7f],
            _ => vec![*rng.pick(&[0xff, 2, 0x80])],
        };
        let every = *rng.pick(&[1, 2, 7]);
        for (i, chunk) in t.data.chunks_mut(size).enumerate() {
            if i % every == 0 {
                chunk.copy_from_slice(&value[..chunk.len()]);
            }
        }
        Some(format!("tensor '{}' ({}) every {every} element(s) = {value:02x?}", t.name, t.dtype))
    })
}

/// A tensor goes missing, moves to another flat index, or an extra one appears.
fn keys(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    edit_inputs(m, |tensors, _| {
        if tensors.is_empty() {
            return None;
        }
        let i = rng.below(tensors.len());
        Some(match rng.below(3) {
            0 => format!("tensor '{}' removed", tensors.remove(i).name),
            1 => {
                let new = rng.pick(&["7", "-1", "abc", "00", "18446744073709551616"]).to_string();
                let old = std::mem::replace(&mut tensors[i].name, new.clone());
                format!("tensor '{old}' renamed '{new}'")
            }
            _ => {
                let mut extra = tensors[i].clone();
                extra.name = "99".into();
                tensors.push(extra);
                "an extra tensor '99'".into()
            }
        })
    })
}

/// The python-scalar metadata turns into garbage or the wrong types.
fn scalars(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    edit_inputs(m, |_, metadata| {
        let new = match rng.below(4) {
            0 => "not json".to_string(),
            1 => json!({"0": "text", "1": [1, 2]}).to_string(),
            2 => json!({"0": 1e308, "1": u64::MAX, "2": null}).to_string(),
            _ => json!({"0": interesting::int(rng, None)}).to_string(),
        };
        metadata.get_or_insert_with(Map::new).insert("scalars".into(), json!(new));
        Some(format!("scalars metadata = {new}"))
    })
}
