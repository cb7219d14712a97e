//! The `.pt2` zip layout (`<stem>/models/*.json`, `<stem>/data/weights/...`) and its
//! unpacked twin on disk beside a bare `model.json`. A weight's storage stored as is (a
//! file on disk, an uncompressed zip entry: what torch.export.save writes) is not read
//! here: it becomes a region of the file, read when the weights are written out.

use super::schema::PayloadConfig;
use super::weights::{Tensor, View, MAX_BYTES};
use super::{parse_program, Source};
use crate::error::{Error, Result};
use crate::ir::payload::{FileRegion, SourceFile};
use crate::ir::Payload;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// The most a JSON entry (the program, a payload config) may take once inflated: far
/// beyond any real program's, yet a bound on what a forged archive makes aotc build.
const MAX_JSON_BYTES: u64 = 1 << 30;

/// Why an entry is refused when it claims more than is left to read.
const TOO_BIG: &str = "larger than the 64 GiB aotc reads from an archive";
const _: () = assert!(MAX_BYTES == 64 << 30, "TOO_BIG names MAX_BYTES");

/// How much of an entry to read.
#[derive(Clone, Copy)]
enum Take {
    /// All of it, refused when it passes this many bytes: a JSON document, [`MAX_JSON_BYTES`].
    All { limit: u64 },
    /// At most its first this many bytes: a weight's storage, of which the views read a
    /// prefix (a storage may be longer than what any view reads).
    Prefix(u64),
}

impl Take {
    /// How many bytes to read at most: one past an entire read's limit, to tell an entry
    /// that passes it.
    fn reads(self) -> u64 {
        match self {
            Take::All { limit } => limit.saturating_add(1),
            Take::Prefix(n) => n,
        }
    }

    /// The limit that `len` bytes pass, if any.
    fn passed(self, len: u64) -> Option<u64> {
        match self {
            Take::All { limit } if len > limit => Some(limit),
            _ => None,
        }
    }
}

/// Reads entries of one archive, addressed relative to its `<stem>/` root.
trait Entries {
    fn read(&mut self, rel: &str, take: Take) -> Result<Option<Vec<u8>>>;

    /// A weight's storage, of which the views read the first `bytes`: at most those.
    fn storage(&mut self, rel: &str, bytes: u64) -> Result<Option<Payload>>;
}

struct ZipEntries<'p> {
    path: &'p Path,
    zip: zip::ZipArchive<File>,
    /// The archive again, for the regions of its stored entries.
    archive: Arc<SourceFile>,
    root: String,
    /// The archive's own size, which bounds any honest entry's.
    len: usize,
    /// The bytes still allowed out of the archive: sizes in a zip are claims, and a
    /// compressed entry can inflate far beyond the file (a decompression bomb).
    budget: u64,
}

impl Entries for ZipEntries<'_> {
    fn read(&mut self, rel: &str, take: Take) -> Result<Option<Vec<u8>>> {
        let name = format!("{}{rel}", self.root);
        let err =
            |message: String| Error::Format { path: self.path.into(), message: format!("entry {name}: {message}") };
        let f = match self.zip.by_name(&name) {
            Ok(f) => f,
            Err(zip::result::ZipError::FileNotFound) => return Ok(None),
            Err(e) => return Err(err(e.to_string())),
        };
        let too_big = || err(TOO_BIG.into());
        let past_limit = |limit: u64| {
            err(format!("passes {} MiB once inflated, the most aotc reads from a JSON entry", limit >> 20))
        };
        if f.size() > self.budget {
            return Err(too_big());
        }
        // The claimed size is refused when it passes the entry's limit, and the read stops
        // past the limit whatever the claim: the header may lie.
        if let Some(limit) = take.passed(f.size()) {
            return Err(past_limit(limit));
        }
        let reads = take.reads().min(self.budget + 1);
        // The claimed size sizes the buffer only up to what the archive itself holds.
        let mut buf = Vec::with_capacity(self.len.min(reads.min(f.size()) as usize));
        f.take(reads).read_to_end(&mut buf).map_err(|e| err(e.to_string()))?;
        if let Some(limit) = take.passed(buf.len() as u64) {
            return Err(past_limit(limit));
        }
        self.budget = self.budget.checked_sub(buf.len() as u64).ok_or_else(too_big)?;
        Ok(Some(buf))
    }

    fn storage(&mut self, rel: &str, bytes: u64) -> Result<Option<Payload>> {
        let name = format!("{}{rel}", self.root);
        let stored = match self.zip.by_name(&name) {
            Ok(f) if f.compression() == zip::CompressionMethod::Stored => Some((f.data_start(), f.size())),
            _ => None,
        };
        // Compressed (or unreadable: read says why): inflated into memory.
        let Some((offset, size)) = stored else { return Ok(self.read(rel, Take::Prefix(bytes))?.map(Payload::from)) };
        let err =
            |message: String| Error::Format { path: self.path.into(), message: format!("entry {name}: {message}") };
        // Sizes in a zip are claims: refused past the budget as `read` refuses them.
        if size > self.budget {
            return Err(err(TOO_BIG.into()));
        }
        let len = size.min(bytes);
        if offset.checked_add(len).is_none_or(|end| end > self.len as u64) {
            return Err(err(format!("its {len} bytes from offset {offset} pass the archive's end")));
        }
        self.budget -= len;
        Ok(Some(Payload::File(FileRegion { file: self.archive.clone(), offset, len })))
    }
}

struct DirEntries<'p> {
    root: &'p Path,
}

impl Entries for DirEntries<'_> {
    fn read(&mut self, rel: &str, take: Take) -> Result<Option<Vec<u8>>> {
        let p = self.root.join(rel);
        let file = match aotc_abi::file::open_regular(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path: p, source }),
        };
        let mut buf = Vec::new();
        file.take(take.reads()).read_to_end(&mut buf).map_err(|source| Error::Io { path: p.clone(), source })?;
        match take.passed(buf.len() as u64) {
            Some(limit) => Err(Error::Format {
                path: p,
                message: format!("larger than {} MiB, the most aotc reads from a JSON file", limit >> 20),
            }),
            None => Ok(Some(buf)),
        }
    }

    fn storage(&mut self, rel: &str, bytes: u64) -> Result<Option<Payload>> {
        let path = self.root.join(rel);
        let file = match aotc_abi::file::open_regular(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path, source }),
        };
        let len = file.metadata().map_err(|source| Error::Io { path: path.clone(), source })?.len().min(bytes);
        Ok(Some(Payload::File(FileRegion { file: Arc::new(SourceFile { path, file }), offset: 0, len })))
    }
}

/// Loads the `.pt2` archive `path`, open as `file`.
pub fn load_archive(path: &Path, file: File) -> Result<Source> {
    let fmt_err = |message: String| Error::Format { path: path.into(), message };
    let io = |source| Error::Io { path: path.into(), source };
    let len = usize::try_from(file.metadata().map_err(io)?.len()).unwrap_or(usize::MAX);
    let archive = Arc::new(SourceFile { path: path.into(), file: file.try_clone().map_err(io)? });
    let zip = zip::ZipArchive::new(file).map_err(|e| fmt_err(format!("not a readable .pt2 (zip) archive: {e}")))?;
    let models: Vec<String> = zip
        .file_names()
        .filter(|n| {
            let parts: Vec<&str> = n.split('/').collect();
            parts.len() >= 2 && parts[parts.len() - 2] == "models" && n.ends_with(".json")
        })
        .map(String::from)
        .collect();
    let model = match models.as_slice() {
        [] => return Err(fmt_err(no_program(zip.file_names()))),
        [one] => one.clone(),
        // torch.export.save writes one program; prefer the default name when there are more.
        many => many.iter().find(|n| n.ends_with("models/model.json")).cloned().ok_or_else(|| {
            fmt_err(format!("archive holds several programs ({}); aotc compiles one", many.join(", ")))
        })?,
    };
    // `<root>models/<file>.json`: the filter above makes the last "models/" the directory.
    let (root, file) = model.rsplit_once("models/").ok_or_else(|| fmt_err(format!("cannot read {model}")))?;
    let mut entries = ZipEntries { path, zip, archive, root: root.into(), len, budget: MAX_BYTES };
    let json = entries
        .read(&format!("models/{file}"), Take::All { limit: MAX_JSON_BYTES })?
        .ok_or_else(|| fmt_err(format!("cannot read {model}")))?;
    let program = parse_program(path, &json)?;
    load_payloads(path, program, &mut entries)
}

/// What `aotc compile` reads, for the errors of a file that is something else.
const EXPECTED: &str = "aotc reads archives written by torch.export.save(torch.export.export(model, args), 'model.pt2'), or the models/model.json inside one";

/// Why a zip archive with no `models/*.json` is not a program: what wrote it, when its
/// entries say.
fn no_program<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let (mut torchscript, mut pickled, mut aoti) = (false, false, false);
    for name in names {
        let parts: Vec<&str> = name.split('/').collect();
        let (last, dirs) = parts.split_last().unwrap_or((&"", &[]));
        torchscript |= *last == "constants.pkl" || dirs.contains(&"code");
        pickled |= *last == "data.pkl";
        aoti |= dirs.contains(&"aotinductor");
    }
    let what = if torchscript {
        "a TorchScript archive (torch.jit.save)"
    } else if pickled {
        "a PyTorch archive written by torch.save (a state_dict or a pickled module)"
    } else if aoti {
        "an AOTInductor package (compiled code, no program)"
    } else {
        "a zip archive with no models/*.json in it"
    };
    format!("{what}, not a torch.export program; {EXPECTED}")
}

/// What a file that failed to load as a `model.json` is, when it is not JSON at all (the
/// JSON error would only puzzle); None for JSON, even malformed (its error says where).
pub fn not_json(path: &Path, bytes: &[u8]) -> Option<Error> {
    if bytes.trim_ascii_start().starts_with(b"{") || serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() {
        return None;
    }
    let what = if bytes.is_empty() {
        "an empty file, not a torch.export program".to_string()
    } else if bytes.starts_with(b"\x7fELF") {
        return Some(Error::Format {
            path: path.into(),
            message: "a shared library (ELF), perhaps one aotc compiled: run it with `aotc run` \
            (`aotc inspect` describes it); `aotc compile` takes a .pt2 archive or a model.json"
                .into(),
        });
    } else if bytes.first() == Some(&0x80) && bytes.get(1).is_some_and(|p| (2..=5).contains(p)) {
        "a Python pickle (torch.save(..., _use_new_zipfile_serialization=False), or pickle.dump), not a torch.export program".to_string()
    } else if crate::tensor_io::looks_like_text(bytes) {
        let python = path.extension().is_some_and(|e| e == "py");
        format!(
            "neither a zip archive (.pt2) nor JSON, but text{}",
            if python { " (Python source? aotc does not run Python)" } else { "" }
        )
    } else {
        "neither a zip archive (.pt2) nor JSON".to_string()
    };
    Some(Error::Format { path: path.into(), message: format!("{what}; {EXPECTED}") })
}

/// A bare `model.json`: weights come from `../data/weights` (the archive layout) when present.
pub fn load_json_with_layout(path: &Path, json: &[u8]) -> Result<Source> {
    let program = parse_program(path, json)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let root = if dir.file_name().is_some_and(|n| n == "models") { dir.parent().unwrap_or(dir) } else { dir };
    load_payloads(path, program, &mut DirEntries { root })
}

fn load_payloads(path: &Path, program: super::schema::ExportedProgram, entries: &mut dyn Entries) -> Result<Source> {
    let mut left = MAX_BYTES;
    let weights =
        load_payload_group(path, entries, "data/weights/model_weights_config.json", "data/weights/", &mut left)?;
    let constants =
        load_payload_group(path, entries, "data/constants/model_constants_config.json", "data/constants/", &mut left)?;
    Ok(Source { path: path.into(), program, weights, constants })
}

/// Reads one group of payloads, building at most `left` bytes of dense tensors (less what
/// it builds, on return).
fn load_payload_group(
    path: &Path,
    entries: &mut dyn Entries,
    config: &str,
    dir: &str,
    left: &mut u64,
) -> Result<BTreeMap<String, Tensor>> {
    let Some(cfg) = entries.read(config, Take::All { limit: MAX_JSON_BYTES })? else { return Ok(BTreeMap::new()) };
    let cfg: PayloadConfig = serde_json::from_slice(&cfg)
        .map_err(|e| Error::Format { path: path.into(), message: format!("{config}: {e}") })?;
    let mut out = BTreeMap::new();
    for (name, meta) in cfg.config {
        if meta.use_pickle {
            return Err(Error::Weight {
                name,
                message: "stored pickled (use_pickle: true, e.g. a tensor subclass); aotc reads raw tensor bytes only"
                    .into(),
            });
        }
        let tm = meta
            .tensor_meta
            .as_ref()
            .ok_or_else(|| Error::Weight { name: name.clone(), message: "has no tensor_meta".into() })?;
        // A file name, not a path: on disk, "../x" would read outside the program's layout.
        if !is_plain_file_name(&meta.path_name) {
            return Err(Error::Weight {
                name,
                message: format!("payload name {:?} in {config} is not a plain file name", meta.path_name),
            });
        }
        let payload = format!("{dir}{}", meta.path_name);
        let view = View::parse(&name, tm, *left)?;
        let storage = entries.storage(&payload, view.storage_bytes())?.ok_or_else(|| Error::Weight {
            name: name.clone(),
            message: format!("payload {payload} is missing from the archive"),
        })?;
        let t = view.gather(&payload, &storage)?;
        *left -= t.data.len() as u64;
        out.insert(name, t);
    }
    Ok(out)
}

fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Write};

    /// A stored archive holding `m/models/model.json` of `len` bytes, its central directory
    /// claiming `claimed` bytes.
    fn archive(len: usize, claimed: u32) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file("m/models/model.json", stored).unwrap();
        zip.write_all(&vec![b' '; len]).unwrap();
        let mut bytes = zip.finish().unwrap().into_inner();
        let central = bytes.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
        bytes[central + 24..central + 28].copy_from_slice(&claimed.to_le_bytes());
        bytes
    }

    fn read(bytes: Vec<u8>, take: Take) -> Result<Option<Vec<u8>>> {
        let len = bytes.len();
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(&bytes).unwrap();
        let archive = Arc::new(SourceFile { path: "x.pt2".into(), file: tmp.try_clone().unwrap() });
        let zip = zip::ZipArchive::new(tmp).unwrap();
        let path = Path::new("x.pt2");
        ZipEntries { path, zip, archive, root: "m/".into(), len, budget: MAX_BYTES }.read("models/model.json", take)
    }

    #[test]
    fn an_entry_is_read_only_up_to_its_limit_whatever_its_header_claims() {
        let limit = Take::All { limit: 3 << 20 };
        assert_eq!(read(archive(1000, 1000), limit).unwrap().unwrap().len(), 1000);
        let message =
            "x.pt2: entry m/models/model.json: passes 3 MiB once inflated, the most aotc reads from a JSON entry";
        // Claimed and real size past the limit: refused on the claim.
        assert_eq!(read(archive(10, 4 << 20), limit).unwrap_err().to_string(), message);
        // A header understating the size: the read stops past the limit.
        assert_eq!(read(archive((3 << 20) + 1, 10), limit).unwrap_err().to_string(), message);
        assert_eq!(read(archive(3 << 20, 10), limit).unwrap().unwrap().len(), 3 << 20);
        // A weight's storage: only the prefix its views read.
        assert_eq!(read(archive(1000, 1000), Take::Prefix(64)).unwrap().unwrap().len(), 64);
    }
}
