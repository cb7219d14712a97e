//! Builds the support library (`runtime/embedded`) as a release staticlib, links it into
//! one relocatable object that holds only what its C ABI and kernels reach, and hands that
//! object's path to the compiler, which embeds the bytes: `aotc compile` then needs only
//! `cc`.

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
    let archive = target_dir.join("release").join("libaotc_embedded.a");
    let object = out.join("libaotc_embedded.o");
    prelink(&archive, &object);
    println!("cargo:rustc-env=AOTC_EMBEDDED_LIB={}", object.display());
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

/// Links `archive` (the library, std and its dependencies: some 380 members) into one
/// relocatable `object` with `cc -r`, keeping only the sections that its exported symbols
/// (the C ABI, `aotc_*`, and the kernels the generated code calls, `__aotc_*`) reach and
/// no local symbols. Every `aotc compile` links the library into a model: from this
/// object GNU ld takes half the time it took from the archive (0.10 s against 0.20 s for
/// a one-operator model on Zen 3), most of which went to looking members up in the
/// archive's symbol table; the op suite's tests spent 84% of their time in ld.
fn prelink(archive: &Path, object: &Path) {
    let nm = Command::new("nm")
        .args(["-g", "--defined-only", "-P"])
        .arg(archive)
        .stderr(std::process::Stdio::null())
        .output()
        .expect("cannot run nm (binutils) to list the support library's symbols");
    assert!(nm.status.success(), "nm failed on {}", archive.display());
    let mut roots: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (name, kind) = (fields.next()?, fields.next()?);
            (kind == "T" && (name.starts_with("aotc_") || name.starts_with("__aotc_"))).then(|| name.to_string())
        })
        .collect();
    roots.sort();
    roots.dedup();
    assert!(roots.iter().any(|r| r == "aotc_run"), "nm listed no aotc_run in {}", archive.display());
    let status = Command::new("cc")
        .args(["-r", "-nostdlib", "-Wl,--gc-sections", "-Wl,--discard-all", "-Wl,--strip-debug"])
        .args(roots.iter().map(|r| format!("-Wl,--undefined={r}")))
        .arg("-Wl,--whole-archive")
        .arg(archive)
        .args(["-Wl,--no-whole-archive", "-o"])
        .arg(object)
        .status()
        .expect("cannot run cc to link the support library into one object");
    assert!(status.success(), "cc -r failed on {}", archive.display());
}
