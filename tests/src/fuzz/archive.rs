//! Writing a mutant's entries back out: a .pt2 zip (stored or deflated), or the unpacked
//! layout beside a bare `models/model.json` that the compiler also reads.

use super::fixture::Entry;
use std::io::Write;
use std::path::{Component, Path};
use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

pub fn zip_bytes(entries: &[Entry], deflate: bool) -> Vec<u8> {
    let method = if deflate { CompressionMethod::Deflated } else { CompressionMethod::Stored };
    let options = SimpleFileOptions::default().compression_method(method).large_file(false);
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for e in entries {
        zip.start_file(e.name.as_str(), options).expect("in-memory zip entry");
        zip.write_all(&e.data).expect("in-memory zip write");
    }
    zip.finish().expect("in-memory zip").into_inner()
}

/// Writes entries under `dir`, dropping the `<stem>/` prefix `root`: `dir/models/model.json`
/// is then what gets compiled.
pub fn write_layout(entries: &[Entry], root: &str, dir: &Path) -> std::io::Result<()> {
    for e in entries {
        let rel = Path::new(e.name.strip_prefix(root).unwrap_or(&e.name));
        // Fixture entry names are tame, but never write outside `dir` whatever they say.
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) || e.name.ends_with('/') {
            continue;
        }
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("an entry path has a parent"))?;
        std::fs::write(&path, &e.data)?;
    }
    Ok(())
}
