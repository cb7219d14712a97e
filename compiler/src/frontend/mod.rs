//! Frontend: reads a `.pt2` archive or a bare `model.json` plus its weights, and checks
//! what can be checked before lowering (schema version, weight payloads).
//!
//! Output: a [`Source`], the parsed program with every weight and constant as dense,
//! contiguous little-endian bytes.

mod archive;
pub mod schema;
pub mod sympy;
mod weights;

pub use weights::Tensor;

use crate::error::{Error, Result};
use aotc_abi::DType;
use schema::InputSpec;
use std::collections::{BTreeMap, BTreeSet};
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
    let io = |source| Error::Io { path: path.into(), source };
    let mut file = aotc_abi::file::open_regular(path).map_err(io)?;
    let mut magic = [0; 2];
    let is_zip = std::os::unix::fs::FileExt::read_at(&file, &mut magic, 0).map_err(io)? == 2 && magic == *b"PK";
    let mut src = if is_zip {
        // Read entry by entry: an archive may hold gigabytes of weights.
        archive::load_archive(path, file)?
    } else {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).map_err(io)?;
        // A file that is not JSON either is named for what it is, rather than by a JSON error.
        archive::load_json_with_layout(path, &bytes).map_err(|e| archive::not_json(path, &bytes).unwrap_or(e))?
    };
    if let Some(w) = weights_file {
        override_payloads(&mut src, w, weights::from_safetensors(w)?)?;
    }
    Ok(src)
}

/// A tensor the program takes from its payloads rather than from the caller.
struct Wanted {
    /// In `Source::constants` (non-persistent buffers, lifted constants), else `weights`.
    constant: bool,
    /// The static dtype and sizes `tensor_values` records; None when it records none, which
    /// lowering reports.
    meta: Option<(DType, Vec<i64>)>,
}

/// The parameters, buffers and constants `program`'s signature takes, by FQN.
fn wanted_payloads(program: &schema::ExportedProgram) -> BTreeMap<&str, Wanted> {
    let graph = &program.graph_module.graph;
    let static_meta = |arg: &str| {
        let m = graph.tensor_values.get(arg)?;
        let sizes = m
            .sizes
            .iter()
            .map(|s| match s {
                schema::SymInt::Int(v) => Some(*v),
                schema::SymInt::Expr(_) => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some((DType::from_torch_code(m.dtype)?, sizes))
    };
    program
        .graph_module
        .signature
        .input_specs
        .iter()
        .filter_map(|spec| {
            let (arg, fqn, constant) = match spec {
                InputSpec::Parameter { arg, parameter_name } => (arg, parameter_name, false),
                InputSpec::Buffer { arg, buffer_name, persistent } => (arg, buffer_name, !persistent),
                InputSpec::TensorConstant { arg, tensor_constant_name } => (arg, tensor_constant_name, true),
                _ => return None,
            };
            Some((fqn.as_str(), Wanted { constant, meta: static_meta(&arg.name) }))
        })
        .collect()
}

/// Replaces the payloads named in `file` (a `--weights` file) by its `tensors`. Every tensor
/// must be one the program takes, with the dtype and sizes it expects, and every payload
/// must then be present: a silently ignored tensor would leave the archive's weights in
/// use. All the mismatches are reported together.
fn override_payloads(src: &mut Source, file: &Path, mut tensors: Vec<(String, Tensor)>) -> Result<()> {
    let wanted = wanted_payloads(&src.program);
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let in_file: BTreeSet<String> = tensors.iter().map(|(name, _)| name.clone()).collect();
    let mut problems = vec![];
    let mut unknown = false;
    for (name, t) in tensors {
        match wanted.get(name.as_str()) {
            None => {
                problems.push(format!("'{name}': no such weight"));
                unknown = true;
            }
            Some(Wanted { meta: Some((dtype, sizes)), .. }) if (t.dtype, &t.sizes) != (*dtype, sizes) => {
                problems.push(format!("'{name}': expected {dtype}{sizes:?}, the file has {}{:?}", t.dtype, t.sizes));
            }
            Some(w) => {
                let payloads = if w.constant { &mut src.constants } else { &mut src.weights };
                payloads.insert(name, t);
            }
        }
    }
    for (fqn, w) in &wanted {
        let payloads = if w.constant { &src.constants } else { &src.weights };
        if !payloads.contains_key(*fqn) && !in_file.contains(*fqn) {
            problems.push(format!("'{fqn}': missing (neither in the archive nor in the file)"));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    if unknown {
        problems.push(format!("(the program's weights: {})", wanted.keys().copied().collect::<Vec<_>>().join(", ")));
    }
    Err(Error::Format {
        path: file.into(),
        message: format!("the --weights file does not match the program:\n  {}", problems.join("\n  ")),
    })
}

pub(crate) fn parse_program(path: &Path, json: &[u8]) -> Result<schema::ExportedProgram> {
    #[derive(serde::Deserialize)]
    struct VersionOnly {
        schema_version: schema::SchemaVersion,
    }
    let fmt_err = |message: String| Error::Format { path: path.into(), message };
    // Check the version first: a newer major may not even parse.
    let v: VersionOnly =
        serde_json::from_slice(json).map_err(|e| fmt_err(format!("not a torch.export program (model.json): {e}")))?;
    if v.schema_version.major != schema::SCHEMA_MAJOR {
        return Err(fmt_err(format!(
            "torch.export schema version {}.{} is not supported: aotc reads major version {}",
            v.schema_version.major,
            v.schema_version.minor,
            schema::SCHEMA_MAJOR
        )));
    }
    serde_json::from_slice(json).map_err(|e| fmt_err(format!("malformed model.json: {e}")))
}
