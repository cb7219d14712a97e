//! External weights: where a library's weights go (`--external-weights`, or automatically
//! past [`crate::AUTO_EXTERNAL_BYTES`]) and the file that holds them
//! (`aotc_abi::weights_file`: safetensors, every tensor 64-byte aligned).
//!
//! The file holds the weights as the library reads them (packed GEMM operands, folded
//! convolution weights, initial values of state), keyed by the names of the manifest's
//! weights table, whose fingerprints it carries.

use crate::error::{Error, Result};
use crate::passes::plan::Plan;
use crate::{CompileOptions, WeightsPlacement, AUTO_EXTERNAL_BYTES};
use std::io::Write;

/// The most weights `--embed-weights` links into a library: past 2 GiB the x86-64 small
/// code model's 32-bit relocations from the code to the GOT cannot span the blob (measured
/// with benchmarks/big_weights.py --embed: the link of 2.5 GiB fails).
pub const MAX_EMBEDDED_BYTES: u64 = 2 << 30;
use std::path::{Path, PathBuf};

/// The weights file of `library` by default: `model.so` → `model.weights.safetensors`.
pub fn default_path(library: &Path) -> PathBuf {
    let stem = library.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    library.with_file_name(format!("{stem}.weights.safetensors"))
}

/// Decides where the weights of `plan` live and records it in its manifest; returns the
/// file to write when they go outside the library.
pub fn place(plan: &mut Plan, library: &Path, opts: &CompileOptions) -> Result<Option<PathBuf>> {
    let external = match opts.placement {
        WeightsPlacement::External => true,
        WeightsPlacement::Embedded => false,
        WeightsPlacement::Auto => opts.weights_out.is_some() || plan.weights_blob.len() as u64 > AUTO_EXTERNAL_BYTES,
    };
    if !external {
        let bytes = plan.weights_blob.len() as u64;
        if bytes > MAX_EMBEDDED_BYTES {
            return Err(Error::Unsupported(format!(
                "{bytes} bytes of weights cannot be linked into the library: the support library reaches its data through 32-bit PC-relative relocations, which a blob past 2 GiB puts out of range (linking 2.5 GiB fails with \"relocation truncated to fit: R_X86_64_GOTPCREL\"); drop --embed-weights to keep them in a weights file beside the library"
            )));
        }
        if opts.weights_out.is_some() {
            return Err(Error::Unsupported(
                "--weights-out names a weights file, but --embed-weights keeps the weights in the library".into(),
            ));
        }
        return Ok(None);
    }
    let file = opts.weights_out.clone().unwrap_or_else(|| default_path(library));
    if file.file_name().is_none() || file == library {
        return Err(Error::Io {
            path: file,
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a usable weights file name (it must name a file other than the library)",
            ),
        });
    }
    let table = &mut plan.manifest.weights;
    table.external = true;
    table.file = file.file_name().map(|n| n.to_string_lossy().into_owned());
    Ok(Some(file))
}

/// Writes the weights file: the header, then the blob. Through a temporary file renamed
/// into place, so that a process that has the previous file mapped keeps its (now
/// unlinked) contents instead of seeing them change or shrink under it.
pub fn write(plan: &Plan, file: &Path) -> Result<()> {
    let io = |source: std::io::Error| Error::Io { path: file.into(), source };
    let tmp = file.with_file_name(format!(
        ".{}.tmp{}",
        file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
        f.write_all(&aotc_abi::weights_file::header(&plan.manifest.weights))?;
        f.write_all(&plan.weights_blob)?;
        // Not fsynced, like the library beside it: a build output, not a database.
        f.into_inner().map_err(|e| e.into_error())?;
        std::fs::rename(&tmp, file)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_file_sits_beside_the_library() {
        assert_eq!(default_path(Path::new("/x/model.so")), Path::new("/x/model.weights.safetensors"));
        assert_eq!(default_path(Path::new("lib")), Path::new("lib.weights.safetensors"));
    }
}
