//! The `.pt2` zip layout (`<stem>/models/*.json`, `<stem>/data/weights/...`) and its
//! unpacked twin on disk beside a bare `model.json`.

use super::schema::PayloadConfig;
use super::weights::{dense_from_storage, Tensor};
use super::{parse_program, Source};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::Path;

/// Reads entries of one archive, addressed relative to its `<stem>/` root.
trait Entries {
    fn read(&mut self, rel: &str) -> Result<Option<Vec<u8>>>;
}

struct ZipEntries<'p> {
    path: &'p Path,
    zip: zip::ZipArchive<Cursor<Vec<u8>>>,
    root: String,
}

impl Entries for ZipEntries<'_> {
    fn read(&mut self, rel: &str) -> Result<Option<Vec<u8>>> {
        let name = format!("{}{rel}", self.root);
        let mut f = match self.zip.by_name(&name) {
            Ok(f) => f,
            Err(zip::result::ZipError::FileNotFound) => return Ok(None),
            Err(e) => return Err(Error::Format { path: self.path.into(), message: format!("entry {name}: {e}") }),
        };
        let mut buf = Vec::with_capacity(f.size() as usize);
        f.read_to_end(&mut buf).map_err(|e| Error::Format { path: self.path.into(), message: format!("entry {name}: {e}") })?;
        Ok(Some(buf))
    }
}

struct DirEntries<'p> {
    root: &'p Path,
}

impl Entries for DirEntries<'_> {
    fn read(&mut self, rel: &str) -> Result<Option<Vec<u8>>> {
        let p = self.root.join(rel);
        match std::fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io { path: p, source }),
        }
    }
}

pub fn load_archive(path: &Path, bytes: Vec<u8>) -> Result<Source> {
    let fmt_err = |message: String| Error::Format { path: path.into(), message };
    let zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| fmt_err(format!("not a readable .pt2 (zip) archive: {e}")))?;
    let models: Vec<String> = zip.file_names().filter(|n| {
        let parts: Vec<&str> = n.split('/').collect();
        parts.len() >= 2 && parts[parts.len() - 2] == "models" && n.ends_with(".json")
    }).map(String::from).collect();
    let model = match models.as_slice() {
        [] => return Err(fmt_err("archive holds no models/*.json program".into())),
        [one] => one.clone(),
        // torch.export.save writes one program; prefer the default name when there are more.
        many => many.iter().find(|n| n.ends_with("models/model.json")).cloned()
            .ok_or_else(|| fmt_err(format!("archive holds several programs ({}); aotc compiles one", many.join(", "))))?,
    };
    let root = model[..model.len() - model.rsplit('/').next().unwrap().len() - "models/".len()].to_string();
    let mut entries = ZipEntries { path, zip, root };
    let json = entries.read(&model[entries.root.len()..])?.ok_or_else(|| fmt_err(format!("cannot read {model}")))?;
    let program = parse_program(path, &json)?;
    load_payloads(path, program, &mut entries)
}

/// A bare `model.json`: weights come from `../data/weights` (the archive layout) when present.
pub fn load_json_with_layout(path: &Path, json: &[u8]) -> Result<Source> {
    let program = parse_program(path, json)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let root = if dir.file_name().is_some_and(|n| n == "models") { dir.parent().unwrap_or(dir) } else { dir };
    load_payloads(path, program, &mut DirEntries { root })
}

fn load_payloads(path: &Path, program: super::schema::ExportedProgram, entries: &mut dyn Entries) -> Result<Source> {
    let weights = load_payload_group(path, entries, "data/weights/model_weights_config.json", "data/weights/")?;
    let constants = load_payload_group(path, entries, "data/constants/model_constants_config.json", "data/constants/")?;
    Ok(Source { path: path.into(), program, weights, constants })
}

fn load_payload_group(path: &Path, entries: &mut dyn Entries, config: &str, dir: &str) -> Result<BTreeMap<String, Tensor>> {
    let Some(cfg) = entries.read(config)? else { return Ok(BTreeMap::new()) };
    let cfg: PayloadConfig = serde_json::from_slice(&cfg)
        .map_err(|e| Error::Format { path: path.into(), message: format!("{config}: {e}") })?;
    let mut out = BTreeMap::new();
    for (name, meta) in cfg.config {
        if meta.use_pickle {
            return Err(Error::Weight { name, message: "stored pickled (use_pickle: true, e.g. a tensor subclass); aotc reads raw tensor bytes only".into() });
        }
        let tm = meta.tensor_meta.as_ref().ok_or_else(|| Error::Weight { name: name.clone(), message: "has no tensor_meta".into() })?;
        let storage = entries.read(&format!("{dir}{}", meta.path_name))?
            .ok_or_else(|| Error::Weight { name: name.clone(), message: format!("payload {dir}{} is missing from the archive", meta.path_name) })?;
        let t = dense_from_storage(&name, tm, &storage)?;
        out.insert(name, t);
    }
    Ok(out)
}
