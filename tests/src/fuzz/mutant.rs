//! A mutant: one fixture's archive with one to three mutations applied, kept as editable
//! JSON documents and entries until it is written to disk.

use super::archive::{write_layout, zip_bytes};
use super::fixture::{Entry, Fixture};
use super::safetensors_file::{decode, encode, Metadata, StTensor};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub const MODEL_JSON: &str = "models/model.json";
pub const WEIGHTS_CONFIG: &str = "data/weights/model_weights_config.json";
pub const CONSTANTS_CONFIG: &str = "data/constants/model_constants_config.json";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    ZipStored,
    ZipDeflated,
    /// A bare `models/model.json` with `data/...` beside it, unzipped.
    Directory,
}

pub struct Mutant {
    pub fixture: Fixture,
    /// Archive entries; model.json and the payload configs are re-serialized from the
    /// documents below when written.
    pub entries: Vec<Entry>,
    pub program: Value,
    pub weights_config: Option<Value>,
    pub constants_config: Option<Value>,
    /// model.json text after byte-level damage; replaces `program` when set.
    pub program_text: Option<Vec<u8>>,
    /// The whole .pt2 after byte-level damage; replaces everything above when set.
    pub archive_bytes: Option<Vec<u8>>,
    /// A safetensors file passed with `--weights`.
    pub weights_file: Option<Vec<u8>>,
    /// Caller inputs replacing the fixture's `inputs_0.safetensors`.
    pub first_inputs: Option<Vec<u8>>,
    pub layout: Layout,
    /// One line per mutation applied, for the failure report.
    pub mutations: Vec<String>,
}

/// A written mutant's files, relative to the folder it was written to (so that the
/// commands that reproduce a failure read the same from inside a saved copy).
pub struct Files {
    pub model: PathBuf,
    pub weights: Option<PathBuf>,
    pub inputs: Vec<PathBuf>,
}

impl Mutant {
    pub fn new(fixture: &Fixture) -> Result<Mutant, String> {
        let doc = |rel: &str| -> Result<Option<Value>, String> {
            let Some(e) = fixture.entries.iter().find(|e| e.name == format!("{}{rel}", fixture.root)) else {
                return Ok(None);
            };
            serde_json::from_slice(&e.data).map(Some).map_err(|err| format!("{}: {rel}: {err}", fixture.dir.display()))
        };
        Ok(Mutant {
            program: doc(MODEL_JSON)?.ok_or("no model.json")?,
            weights_config: doc(WEIGHTS_CONFIG)?,
            constants_config: doc(CONSTANTS_CONFIG)?,
            fixture: fixture.clone(),
            entries: fixture.entries.clone(),
            program_text: None,
            archive_bytes: None,
            weights_file: None,
            first_inputs: None,
            layout: Layout::ZipStored,
            mutations: Vec::new(),
        })
    }

    /// The archive entry at `rel` (relative to `<stem>/`).
    pub fn entry_mut(&mut self, rel: &str) -> Option<&mut Vec<u8>> {
        let name = format!("{}{rel}", self.fixture.root);
        self.entries.iter_mut().find(|e| e.name == name).map(|e| &mut e.data)
    }

    /// Decodes the first call's inputs (as mutated so far), lets `edit` change them, and
    /// keeps the result; returns what `edit` says it did.
    pub fn edit_first_inputs(
        &mut self,
        edit: impl FnOnce(&mut Vec<StTensor>, &mut Metadata) -> Option<String>,
    ) -> Option<String> {
        let bytes = match &self.first_inputs {
            Some(bytes) => bytes.clone(),
            None => std::fs::read(self.fixture.inputs.first()?).ok()?,
        };
        let (mut tensors, mut metadata) = decode(&bytes)?;
        let description = edit(&mut tensors, &mut metadata)?;
        self.first_inputs = Some(encode(&tensors, metadata.as_ref()));
        Some(description)
    }

    pub fn program_bytes(&self) -> Vec<u8> {
        self.program_text.clone().unwrap_or_else(|| serde_json::to_vec(&self.program).expect("JSON value serializes"))
    }

    /// The entries as they will be written, documents serialized.
    pub fn final_entries(&self) -> Vec<Entry> {
        let mut entries = self.entries.clone();
        let docs = [
            (MODEL_JSON, Some(self.program_bytes())),
            (WEIGHTS_CONFIG, self.weights_config.as_ref().map(|v| v.to_string().into_bytes())),
            (CONSTANTS_CONFIG, self.constants_config.as_ref().map(|v| v.to_string().into_bytes())),
        ];
        for (rel, bytes) in docs {
            let name = format!("{}{rel}", self.fixture.root);
            if let (Some(e), Some(bytes)) = (entries.iter_mut().find(|e| e.name == name), bytes) {
                e.data = bytes;
            }
        }
        entries
    }

    /// Writes the mutant and the inputs to run it with into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<Files> {
        let model = match (&self.archive_bytes, self.layout) {
            (Some(bytes), _) => write_file(dir, "model.pt2", bytes)?,
            (None, Layout::Directory) => {
                write_layout(&self.final_entries(), &self.fixture.root, &dir.join("model"))?;
                PathBuf::from("model/models/model.json")
            }
            (None, layout) => {
                write_file(dir, "model.pt2", &zip_bytes(&self.final_entries(), layout == Layout::ZipDeflated))?
            }
        };
        let weights = self.weights_file.as_ref().map(|b| write_file(dir, "weights.safetensors", b)).transpose()?;
        let mut inputs = Vec::new();
        for (i, original) in self.fixture.inputs.iter().enumerate() {
            let name = format!("inputs_{i}.safetensors");
            match (&self.first_inputs, i) {
                (Some(bytes), 0) => std::fs::write(dir.join(&name), bytes)?,
                _ => std::fs::copy(original, dir.join(&name)).map(drop)?,
            }
            inputs.push(PathBuf::from(name));
        }
        Ok(Files { model, weights, inputs })
    }

    /// What was done to which fixture, one mutation per line.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "fixture: {}\nlayout: {:?}{}\n",
            self.fixture.dir.display(),
            self.layout,
            if self.archive_bytes.is_some() { " (then damaged as bytes)" } else { "" }
        );
        for m in &self.mutations {
            text += &format!("mutation: {m}\n");
        }
        text
    }
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    std::fs::write(dir.join(name), bytes)?;
    Ok(PathBuf::from(name))
}
