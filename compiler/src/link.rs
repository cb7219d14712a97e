//! Links the generated object (and the object of embedded weights, written by
//! `crate::weights_out`) with the embedded support library into a `.so` with the system C
//! compiler driver (`cc`, or `$AOTC_CC`).
//!
//! The result needs only libc/libm/libpthread/libdl and exports exactly the ABI symbols
//! (a version script hides everything else).

use crate::error::{Error, Result};
use std::path::Path;
use std::process::Command;

/// The support library, built by build.rs and embedded in the compiler binary: one
/// relocatable object.
static EMBEDDED_LIB: &[u8] = include_bytes!(env!("AOTC_EMBEDDED_LIB"));

fn version_script() -> String {
    let globals: String = aotc_abi::symbols::ALL.iter().map(|s| format!("    {s};\n")).collect();
    format!("AOTC_{} {{\n  global:\n{globals}  local: *;\n}};\n", aotc_abi::ABI_VERSION)
}

pub fn link(object: &[u8], weights: Option<&Path>, output: &Path) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::Link(format!("temporary directory: {e}")))?;
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).map(|_| p).map_err(|e| Error::Link(format!("writing {name}: {e}")))
    };
    let obj = write("model.o", object)?;
    let lib = write("libaotc_embedded.o", EMBEDDED_LIB)?;
    let map = write("exports.map", version_script().as_bytes())?;
    let cc = std::env::var("AOTC_CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-shared")
        .arg("-o")
        .arg(output)
        .arg(&obj)
        .args(weights)
        // Nothing in the object references the ABI functions: ask the linker for them.
        .args(aotc_abi::symbols::ALL.iter().map(|s| format!("-Wl,--undefined={s}")))
        .arg(&lib)
        .arg(format!("-Wl,--version-script={}", map.display()))
        .args([
            "-Wl,--gc-sections",
            "-Wl,-z,defs",
            "-Wl,-z,noexecstack",
            "-Wl,-z,relro",
            "-Wl,--strip-all",
            "-static-libgcc",
        ])
        .args(["-lm", "-lpthread", "-ldl", "-lc"])
        .output()
        .map_err(|e| {
            Error::Link(format!("cannot run the C compiler driver '{cc}' (install a C toolchain or set AOTC_CC): {e}"))
        })?;
    if !out.status.success() {
        return Err(Error::Link(format!("{cc} failed:\n{}", String::from_utf8_lossy(&out.stderr))));
    }
    Ok(())
}
