//! Fixture folders (model.pt2, inputs_N.safetensors, ...) and the entries of their archive.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Archives larger than this make every mutant slow to write and compile; they are skipped.
const MAX_ARCHIVE_BYTES: u64 = 2 << 20;

/// One file inside a .pt2 archive.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub data: Vec<u8>,
}

#[derive(Clone, Debug)]
pub struct Fixture {
    pub dir: PathBuf,
    /// The archive's entries, in their original order.
    pub entries: Vec<Entry>,
    /// The `<stem>/` prefix every entry name starts with.
    pub root: String,
    /// `inputs_0.safetensors`, `inputs_1.safetensors`, ...: one call each, in order.
    pub inputs: Vec<PathBuf>,
}

impl Fixture {
    pub fn load(dir: &Path) -> Result<Fixture, String> {
        // Absolute, because mutants are compiled from inside their own temporary folders.
        let dir = &dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("model.pt2");
        let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut zip = zip::ZipArchive::new(file).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut entries = Vec::new();
        for i in 0..zip.len() {
            let mut f = zip.by_index(i).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut data = Vec::new();
            f.read_to_end(&mut data).map_err(|e| format!("{}: {e}", path.display()))?;
            entries.push(Entry { name: f.name().to_string(), data });
        }
        let model = entries
            .iter()
            .find(|e| e.name.ends_with("/models/model.json"))
            .ok_or_else(|| format!("{}: no <stem>/models/model.json", path.display()))?;
        let root = model.name.trim_end_matches("models/model.json").to_string();
        let inputs = (0..).map(|i| dir.join(format!("inputs_{i}.safetensors"))).take_while(|p| p.exists()).collect();
        Ok(Fixture { dir: dir.to_path_buf(), entries, root, inputs })
    }

    pub fn name(&self) -> String {
        self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// Fixture folders by group: each of `dirs` that is a folder of fixtures is a group, and
/// the ones that are fixtures themselves (they hold model.pt2) make one group together.
/// A campaign picks a group, then a fixture in it: a folder of 1500 single-op programs
/// weighs the same as a handful of whole models.
pub fn discover(dirs: &[PathBuf]) -> Vec<Vec<PathBuf>> {
    let usable = |p: &Path| {
        p.join("model.pt2").metadata().is_ok_and(|m| m.len() <= MAX_ARCHIVE_BYTES)
            && p.join("inputs_0.safetensors").exists()
    };
    let (named, folders): (Vec<&PathBuf>, Vec<&PathBuf>) = dirs.iter().partition(|d| d.join("model.pt2").exists());
    let mut groups: Vec<Vec<PathBuf>> = folders
        .iter()
        .map(|d| {
            let mut found: Vec<PathBuf> =
                std::fs::read_dir(d).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| usable(p)).collect();
            found.sort();
            found
        })
        .collect();
    groups.push(named.into_iter().filter(|d| usable(d)).cloned().collect());
    groups.retain(|g| !g.is_empty());
    groups
}
