//! Frontend: reads a `.pt2` archive or a bare `model.json` plus its weights, and checks
//! what can be checked before lowering (schema version, weight payloads).
//!
//! Output: a [`Source`], the parsed program with every weight and constant as dense,
//! contiguous little-endian bytes.

pub mod schema;
pub mod sympy;
mod archive;
mod weights;

pub use weights::Tensor;

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A program with its payloads, ready for lowering.
pub struct Source {
    pub path: PathBuf,
    pub program: schema::ExportedProgram,
    /// Parameters and persistent buffers by FQN.
    pub weights: BTreeMap<String, Tensor>,
    /// Lifted tensor constants and non-persistent buffers by name.
    pub constants: BTreeMap<String, Tensor>,
}

/// Loads `path` (a `.pt2` zip or a `model.json`); `weights_file` overrides the weights
/// with a safetensors file keyed by FQN.
pub fn load(path: &Path, weights_file: Option<&Path>) -> Result<Source> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.into(), source })?;
    let mut src = if bytes.starts_with(b"PK") {
        archive::load_archive(path, bytes)?
    } else {
        archive::load_json_with_layout(path, &bytes)?
    };
    if let Some(w) = weights_file {
        let file = std::fs::read(w).map_err(|source| Error::Io { path: w.into(), source })?;
        for (name, t) in weights::from_safetensors(w, &file)? {
            match src.constants.get_mut(&name) {
                Some(slot) => *slot = t,
                None => { src.weights.insert(name, t); }
            }
        }
    }
    Ok(src)
}

pub(crate) fn parse_program(path: &Path, json: &[u8]) -> Result<schema::ExportedProgram> {
    #[derive(serde::Deserialize)]
    struct VersionOnly {
        schema_version: schema::SchemaVersion,
    }
    let fmt_err = |message: String| Error::Format { path: path.into(), message };
    // Check the version first: a newer major may not even parse.
    let v: VersionOnly = serde_json::from_slice(json).map_err(|e| fmt_err(format!("not a torch.export program (model.json): {e}")))?;
    if v.schema_version.major != schema::SCHEMA_MAJOR {
        return Err(fmt_err(format!(
            "torch.export schema version {}.{} is not supported: aotc reads major version {}",
            v.schema_version.major, v.schema_version.minor, schema::SCHEMA_MAJOR
        )));
    }
    serde_json::from_slice(json).map_err(|e| fmt_err(format!("malformed model.json: {e}")))
}
