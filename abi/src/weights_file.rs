//! The external weights file: safetensors, with every tensor 64-byte aligned in the file
//! so that a read-only mapping of it is used in place.
//!
//! ```text
//!  u64 N (little-endian) | N bytes of JSON header, space-padded | data: the weights blob
//!  header: {"__metadata__": {"aotc.format": "1", "aotc.fingerprint": F, "aotc.weights_id": I,
//!           "aotc.layout": L, "aotc.abi": V},
//!           "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//!           "__aotc_pad.<k>": {"dtype": "U8", "shape": [n], ...}}
//! ```
//! `8 + N` is a multiple of [`ALIGN`] and the data is the blob of [`WeightsTable`] as it
//! would be embedded: tensors at their blob offsets. safetensors wants the tensors to tile
//! the data without holes, so the alignment gaps are `U8` tensors named `__aotc_pad.<k>`,
//! which readers skip; any safetensors reader opens the file.
//!
//! [`check`] is what the library runs on a file (or bytes) before using it: nothing in the
//! file is trusted, and the first mismatch with the library's table is the error.

use crate::weights::{layout, WeightsTable, ALIGN};
use crate::DType;
use std::collections::BTreeMap;

pub const FORMAT_VERSION: &str = "1";
pub const KEY_FORMAT: &str = "aotc.format";
pub const KEY_FINGERPRINT: &str = "aotc.fingerprint";
pub const KEY_ID: &str = "aotc.weights_id";
pub const KEY_LAYOUT: &str = "aotc.layout";
pub const KEY_ABI: &str = "aotc.abi";
/// Names of the tensors that fill the alignment gaps.
pub const PAD_PREFIX: &str = "__aotc_pad.";
/// The largest header aotc reads (safetensors' own limit).
pub const MAX_HEADER: u64 = 100 << 20;

/// The bytes before the data: the length prefix and the JSON header, padded with spaces so
/// that the data starts at a multiple of [`ALIGN`].
pub fn header(table: &WeightsTable) -> Vec<u8> {
    let mut meta = serde_json::Map::new();
    for (k, v) in [
        (KEY_FORMAT, FORMAT_VERSION.to_string()),
        (KEY_FINGERPRINT, table.fingerprint.clone()),
        (KEY_ID, table.id.clone()),
        (KEY_LAYOUT, layout()),
        (KEY_ABI, crate::ABI_VERSION.to_string()),
    ] {
        meta.insert(k.into(), v.into());
    }
    let mut json = serde_json::Map::new();
    json.insert("__metadata__".into(), meta.into());
    let tensor = |dtype: &str, shape: Vec<i64>, begin: u64, end: u64| serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, end]});
    let mut at = 0u64;
    for e in &table.entries {
        if e.offset > at {
            json.insert(format!("{PAD_PREFIX}{}", at), tensor("U8", vec![(e.offset - at) as i64], at, e.offset));
        }
        json.insert(e.name.clone(), tensor(e.dtype.safetensors_name(), e.sizes.clone(), e.offset, e.offset + e.bytes));
        at = e.offset + e.bytes;
    }
    if table.bytes > at {
        json.insert(format!("{PAD_PREFIX}{at}"), tensor("U8", vec![(table.bytes - at) as i64], at, table.bytes));
    }
    let mut text = serde_json::to_vec(&serde_json::Value::Object(json)).expect("a JSON map serializes");
    text.resize((8 + text.len()).next_multiple_of(ALIGN) - 8, b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out
}

/// One tensor of a header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTensor {
    pub dtype: String,
    pub shape: Vec<u64>,
    pub begin: u64,
    pub end: u64,
}

/// A parsed header: where the data starts, the metadata, the tensors (pads left out).
#[derive(Clone, Debug)]
pub struct Header {
    pub data_start: u64,
    pub metadata: BTreeMap<String, String>,
    pub tensors: BTreeMap<String, FileTensor>,
}

/// How many bytes of the file [`parse_header`] needs: the prefix, then the header.
pub fn header_len(prefix: &[u8]) -> Result<u64, String> {
    let n = prefix.get(..8).ok_or_else(|| {
        format!("not a safetensors file: {} bytes, shorter than the 8-byte header length", prefix.len())
    })?;
    let n = u64::from_le_bytes(n.try_into().expect("8 bytes"));
    if n > MAX_HEADER {
        return Err(format!("not a safetensors file: its header length field says {n} bytes (at most {MAX_HEADER})"));
    }
    Ok(n)
}

/// Parses the header at the start of `bytes` (at least `8 + header_len` of them).
pub fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    let n = header_len(bytes)?;
    let end = 8 + n as usize;
    let text = bytes
        .get(8..end)
        .ok_or_else(|| format!("the file is truncated: {} bytes, its header alone needs {end}", bytes.len()))?;
    let json: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| format!("not a safetensors file: the header is not JSON ({e})"))?;
    let obj = json.as_object().ok_or("not a safetensors file: the header is not a JSON object")?;
    let mut h = Header { data_start: 8 + n, metadata: BTreeMap::new(), tensors: BTreeMap::new() };
    for (name, v) in obj {
        if name == "__metadata__" {
            let m = v.as_object().ok_or("not a safetensors file: __metadata__ is not an object")?;
            for (k, v) in m {
                h.metadata.insert(
                    k.clone(),
                    v.as_str()
                        .ok_or_else(|| format!("not a safetensors file: metadata '{k}' is not a string"))?
                        .to_string(),
                );
            }
            continue;
        }
        let bad = |what: &str| format!("not a safetensors file: tensor '{name}': {what}");
        let dtype = v.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| bad("no dtype"))?.to_string();
        let shape = v
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| bad("no shape"))?
            .iter()
            .map(|s| s.as_u64())
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| bad("a size is not a non-negative integer"))?;
        let offs = v
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .filter(|a| a.len() == 2)
            .ok_or_else(|| bad("no data_offsets pair"))?;
        let (Some(begin), Some(end)) = (offs[0].as_u64(), offs[1].as_u64()) else {
            return Err(bad("data_offsets are not non-negative integers"));
        };
        if end < begin {
            return Err(bad(&format!("data_offsets [{begin}, {end}] end before they begin")));
        }
        if !name.starts_with(PAD_PREFIX) {
            h.tensors.insert(name.clone(), FileTensor { dtype, shape, begin, end });
        }
    }
    Ok(h)
}

/// Checks `header` (of a file of `file_len` bytes) against the library's `table` and returns
/// each entry's byte offset in the file. `base_align` is the alignment of the memory the file
/// lies in (a page for a mapping). The first mismatch is the error: not an aotc file,
/// another format, a tensor missing, extra, of another dtype or shape, out of the file
/// (truncated) or unaligned, and last another structure fingerprint.
pub fn check(table: &WeightsTable, h: &Header, file_len: u64, base_align: usize) -> Result<Vec<u64>, String> {
    let Some(fp) = h.metadata.get(KEY_FINGERPRINT) else {
        return Err(format!("not an aotc weights file: its safetensors header has no '{KEY_FINGERPRINT}' metadata (write one with aotc compile --external-weights)"));
    };
    match h.metadata.get(KEY_FORMAT).map(String::as_str) {
        Some(FORMAT_VERSION) => {}
        v => {
            return Err(format!(
                "aotc weights format {} is not the format {FORMAT_VERSION} this library reads",
                v.unwrap_or("(none)")
            ))
        }
    }
    let mut offsets = Vec::with_capacity(table.entries.len());
    for e in &table.entries {
        let want = || format!("{}{:?}", e.dtype, e.sizes);
        let t = h
            .tensors
            .get(&e.name)
            .ok_or_else(|| format!("tensor '{}' ({}) is missing from the file", e.name, want()))?;
        let got_dtype = DType::from_safetensors_name(&t.dtype);
        let got_shape: Option<Vec<i64>> = t.shape.iter().map(|&s| i64::try_from(s).ok()).collect();
        if got_dtype != Some(e.dtype) || got_shape.as_deref() != Some(&e.sizes[..]) {
            let dtype = got_dtype.map_or_else(|| t.dtype.clone(), |d| d.name().to_string());
            return Err(format!("tensor '{}': expected {}, the file has {dtype}{:?}", e.name, want(), t.shape));
        }
        if t.end - t.begin != e.bytes {
            return Err(format!(
                "tensor '{}': {} takes {} bytes, the file's data_offsets [{}, {}] hold {}",
                e.name,
                want(),
                e.bytes,
                t.begin,
                t.end,
                t.end - t.begin
            ));
        }
        let (start, end) = (h.data_start.checked_add(t.begin), h.data_start.checked_add(t.end));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(format!(
                    "the file is truncated: tensor '{}' ends at byte {}, the file has {file_len} bytes",
                    e.name,
                    end.map_or("(overflow)".into(), |x| x.to_string())
                ))
            }
        }
        let start = start.expect("no larger than end");
        if !start.is_multiple_of(ALIGN as u64) || !base_align.is_multiple_of(ALIGN) {
            return Err(format!("tensor '{}' starts at byte {start} of the file, not a multiple of {ALIGN}: the library reads weights in place and needs them {ALIGN}-byte aligned (write the file with aotc compile --external-weights)", e.name));
        }
        offsets.push(start);
    }
    let names: std::collections::HashSet<&str> = table.entries.iter().map(|e| e.name.as_str()).collect();
    if let Some(extra) = h.tensors.keys().find(|n| !names.contains(n.as_str())) {
        return Err(format!("the file has tensor '{extra}', which this library does not read"));
    }
    if *fp != table.fingerprint {
        return Err(format!(
            "the file's structure fingerprint is {fp} (layout \"{}\"), the library's is {} (layout \"{}\"): the tensors match by name, dtype and shape but are laid out differently (written by another aotc?)",
            h.metadata.get(KEY_LAYOUT).map_or("unknown", String::as_str), table.fingerprint, layout()
        ));
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::WeightEntry;

    fn table() -> (WeightsTable, Vec<u8>) {
        let entries = vec![
            WeightEntry { name: "w".into(), dtype: DType::F32, sizes: vec![3], offset: 0, bytes: 12 },
            WeightEntry { name: "b".into(), dtype: DType::I64, sizes: vec![2], offset: 64, bytes: 16 },
        ];
        let blob: Vec<u8> = (0..80u8).collect();
        (WeightsTable::new(entries, &blob), blob)
    }

    fn file(t: &WeightsTable, blob: &[u8]) -> Vec<u8> {
        let mut f = header(t);
        f.extend_from_slice(blob);
        f
    }

    #[test]
    fn a_written_header_parses_back_aligned_and_checks() {
        let (t, blob) = table();
        let f = file(&t, &blob);
        assert_eq!(header(&t).len() % ALIGN, 0);
        let h = parse_header(&f).unwrap();
        assert_eq!(h.tensors.len(), 2, "pads are left out");
        let offsets = check(&t, &h, f.len() as u64, 4096).unwrap();
        assert_eq!(offsets, vec![h.data_start, h.data_start + 64]);
        assert_eq!(&f[offsets[1] as usize..][..16], &blob[64..80]);
    }

    #[test]
    fn mismatches_name_the_tensor_and_what_differs() {
        let (t, blob) = table();
        let f = file(&t, &blob);
        let h = parse_header(&f).unwrap();
        let e = check(&t, &h, f.len() as u64 - 1, 4096).unwrap_err();
        assert!(e.contains("truncated") && e.contains("'b'"), "{e}");
        let mut other = t.clone();
        other.entries[0].sizes = vec![1, 3];
        let e = check(&other, &h, f.len() as u64, 4096).unwrap_err();
        assert!(e.contains("tensor 'w': expected float32[1, 3], the file has float32[3]"), "{e}");
        other = t.clone();
        other.entries[1].name = "c".into();
        let e = check(&other, &h, f.len() as u64, 4096).unwrap_err();
        assert!(e.contains("'c'") && e.contains("missing"), "{e}");
        other = t.clone();
        other.fingerprint = "0000000000000000".into();
        let e = check(&other, &h, f.len() as u64, 4096).unwrap_err();
        assert!(e.contains("fingerprint"), "{e}");
        let e = check(&t, &h, f.len() as u64, 8).unwrap_err();
        assert!(e.contains("aligned"), "{e}");
    }

    #[test]
    fn garbage_is_not_a_safetensors_file() {
        let (t, _) = table();
        assert!(parse_header(b"abc").unwrap_err().contains("not a safetensors file"));
        assert!(parse_header(&u64::MAX.to_le_bytes()).unwrap_err().contains("header length"));
        let mut f = 4u64.to_le_bytes().to_vec();
        f.extend_from_slice(b"[1] ");
        assert!(parse_header(&f).unwrap_err().contains("not a JSON object"));
        let mut f = 2u64.to_le_bytes().to_vec();
        f.extend_from_slice(b"{}");
        let h = parse_header(&f).unwrap();
        assert!(check(&t, &h, 10, 4096).unwrap_err().contains("not an aotc weights file"));
    }
}
