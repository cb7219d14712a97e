//! `aotc compile --cpu`: the generated code's target. The default (the x86-64 baseline)
//! runs on an old CPU, emulated by qemu-user as a Nehalem (2008: SSE4.2, no AVX); a
//! library compiled for x86-64-v3 is refused there by aotc_model_create with
//! AOTC_ERR_CPU naming the missing feature, instead of dying of an illegal instruction.
//! qemu-x86_64 comes from scripts/setup_tests.sh (Debian's qemu-user).

use aotc_abi::cpu::CpuTarget;
use aotc_tests::{build_c_example, fixture};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn compile_for(dir: &Path, cpu: &str) -> PathBuf {
    let so = dir.join(format!("small_cnn.{cpu}.so"));
    let opts = aotc::CompileOptions { cpu: CpuTarget::parse(cpu).unwrap(), ..Default::default() };
    aotc::compile(&fixture("small_cnn").join("model.pt2"), &so, &opts).expect("compile");
    so
}

/// run_model (examples/c) on `so`, under `qemu-x86_64 -cpu MODEL` when given.
fn run_c_example(exe: &Path, so: &Path, qemu_cpu: Option<&str>) -> Output {
    let mut cmd = match qemu_cpu {
        Some(model) => {
            let mut c = Command::new("qemu-x86_64");
            c.args(["-cpu", model]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.arg(so).arg("1").output().unwrap_or_else(|e| {
        panic!("cannot run {} ({e}): qemu-x86_64 comes from scripts/setup_tests.sh (apt: qemu-user)", exe.display())
    })
}

/// The numbers run_model printed for call 0's first output.
fn printed_outputs(run: &Output) -> Vec<f64> {
    let stdout = String::from_utf8_lossy(&run.stdout);
    let line = stdout.lines().find(|l| l.starts_with("call 0 output 0:")).expect("call 0 printed");
    line.split(':').nth(1).unwrap().split_whitespace().map(|v| v.parse().unwrap()).collect()
}

#[test]
fn the_default_target_runs_on_an_old_cpu_and_a_newer_target_is_refused_there() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c_example(dir.path());
    let portable = compile_for(dir.path(), aotc_abi::cpu::DEFAULT);
    let native = run_c_example(&exe, &portable, None);
    let old = run_c_example(&exe, &portable, Some("Nehalem"));
    let text = |o: &Output| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(native.status.success(), "{}", text(&native));
    assert!(old.status.success(), "under qemu -cpu Nehalem: {:?}\n{}", old.status, text(&old));
    // The support library's kernels take their SSE paths there (no AVX2/FMA): the same
    // values up to float32 rounding.
    let (here, there) = (printed_outputs(&native), printed_outputs(&old));
    assert_eq!(here.len(), there.len());
    assert!(!here.is_empty());
    for (a, b) in here.iter().zip(&there) {
        assert!((a - b).abs() <= 1e-5 * a.abs().max(1.0), "native {a} vs emulated Nehalem {b}");
    }

    let v3 = compile_for(dir.path(), "x86-64-v3");
    let refused = run_c_example(&exe, &v3, Some("Nehalem"));
    assert_eq!(
        refused.status.code(),
        Some(1),
        "a clean refusal, not a signal: {:?}\n{}",
        refused.status,
        text(&refused)
    );
    let message = text(&refused);
    assert!(message.contains("create:") && message.contains("x86-64-v3") && message.contains("avx"), "{message}");
}

#[test]
fn the_target_is_recorded_and_native_runs_here() {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_for(dir.path(), "native");
    let exe = build_c_example(dir.path());
    let run = run_c_example(&exe, &so, None);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let shown = aotc::inspect::inspect(&so, &Default::default()).expect("inspect");
    assert!(shown.contains("cpu target: native"), "{shown}");
    let shown = aotc::inspect::inspect(&compile_for(dir.path(), "x86-64"), &Default::default()).expect("inspect");
    assert!(shown.contains("cpu target: x86-64 (any x86-64)"), "{shown}");
}
