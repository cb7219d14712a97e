//! Builds the support library (`runtime/embedded`) as a release staticlib and hands its
//! path to the compiler, which embeds the bytes: `aotc compile` then needs only `cc`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let here = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = here.parent().expect("compiler/ sits in the workspace");
    let target_dir = shared_target_dir(&out).unwrap_or_else(|| out.join("embedded-target"));
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--lib", "-p", "aotc-embedded", "--target-dir"])
        .arg(&target_dir)
        .current_dir(workspace);
    // The outer build's settings (target dir, flags, jobserver) must not leak in.
    for (k, _) in env::vars() {
        if (k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_NET_OFFLINE")
            || k.starts_with("RUSTC")
            || k == "RUSTFLAGS"
            || k.ends_with("MAKEFLAGS")
            || k == "MFLAGS"
        {
            cmd.env_remove(&k);
        }
    }
    let status = cmd.status().expect("cannot run cargo to build the support library");
    assert!(status.success(), "building aotc-embedded failed");
    let lib = target_dir.join("release").join("libaotc_embedded.a");
    println!("cargo:rustc-env=AOTC_EMBEDDED_LIB={}", lib.display());
    for p in
        ["runtime/embedded/src", "runtime/embedded/Cargo.toml", "abi/src", "abi/Cargo.toml", "Cargo.toml", "Cargo.lock"]
    {
        println!("cargo:rerun-if-changed={}", workspace.join(p).display());
    }
}

/// `<target>/aotc-embedded` for an OUT_DIR `<target>[/<triple>]/<profile>/build/<unit>/out`:
/// one release build of the support library shared by every profile and command (`cargo
/// build --release`, `cargo clippy`, `cargo test` each run this script with their own
/// OUT_DIR, and a fresh clone's CI built it into each). The nested cargo's lock on that
/// folder serialises concurrent runs. None when OUT_DIR is laid out otherwise.
fn shared_target_dir(out: &Path) -> Option<PathBuf> {
    let build = out.ancestors().nth(2)?;
    if build.file_name()? != "build" {
        return None;
    }
    Some(build.parent()?.parent()?.join("aotc-embedded"))
}
