//! The `aotc` command line on good and bad input: every failure is a non-zero exit with a
//! message naming what is wrong.

mod common;

use common::{aotc, aotc_bin, fails_with, fixture, succeeds};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The archive's model.json, edited by `edit`, written as a bare model.json in `dir`.
fn edited_json(name: &str, dir: &Path, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(fixture(name).join("model.pt2")).unwrap()).unwrap();
    let entry = (0..zip.len())
        .map(|i| zip.by_index(i).unwrap().name().to_string())
        .find(|n| n.ends_with("models/model.json"))
        .unwrap();
    let mut text = String::new();
    zip.by_name(&entry).unwrap().read_to_string(&mut text).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut json);
    let path = dir.join("model.json");
    std::fs::File::create(&path).unwrap().write_all(json.to_string().as_bytes()).unwrap();
    path
}

#[test]
fn compile_and_run_writes_outputs_and_mutated_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("m.so");
    let fx = fixture("user_input_mutation");
    let out = aotc(&[&"compile", &fx.join("model.pt2"), &"-o", &so]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = aotc(&[&"run", &so, &"--input", &fx.join("inputs_0.safetensors"), &"--output-dir", &dir.path()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (got, want) in [("outputs_0", "expected_0"), ("mutated_0", "mutated_0")] {
        let (got, _) = aotc::tensor_io::read(&dir.path().join(format!("{got}.safetensors"))).unwrap();
        let (want, _) = aotc::tensor_io::read(&fx.join(format!("{want}.safetensors"))).unwrap();
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        for (k, w) in &want {
            let (a, b) = (w.to_f64_vec(), got[k].to_f64_vec());
            assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-4 + 1e-3 * x.abs()), "{k}: {a:?} vs {b:?}");
        }
    }
    let out = aotc(&[&"inspect", &so]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mutations: 0 buffer(s), 2 user input(s)"), "{text}");
}

#[test]
fn inspect_library_reports_the_arena_and_what_reuse_saves() {
    let dir = tempfile::tempdir().unwrap();
    for (name, dynamic) in [("small_cnn", false), ("dynamic_batch_mlp", true)] {
        let so = dir.path().join(format!("{name}.so"));
        succeeds(&aotc(&[&"compile", &fixture(name).join("model.pt2"), &"-o", &so]));
        let out = aotc(&[&"inspect", &so]);
        succeeds(&out);
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.starts_with("arena: ")).unwrap_or_else(|| panic!("{text}"));
        if dynamic {
            assert!(line.ends_with("slots, laid out by the library for the sizes of a call"), "{line}");
            continue;
        }
        // "arena: N bytes (M slots; without reuse: K bytes)"
        let n: Vec<u64> =
            line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
        assert_eq!(line, format!("arena: {} bytes ({} slots; without reuse: {} bytes)", n[0], n[1], n[2]));
        assert!(n[1] > 2 && n[0].is_multiple_of(64) && n[0] < n[2], "{line}");
    }
}

#[test]
fn inspect_program_lists_signature_ops_and_weights() {
    let out = aotc(&[&"inspect", &fixture("dynamic_batch_mlp").join("model.pt2")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("0: x float32[s77∈[1, 1024], 8]"), "{text}");
    assert!(text.contains("torch.ops.aten.addmm.default x2"), "{text}");
    assert!(text.contains("l1.weight float32[24, 8] 768 bytes"), "{text}");
}

#[test]
fn truncated_archive() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("mlp_buffer_mutation").join("model.pt2")).unwrap();
    let cut = dir.path().join("cut.pt2");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    fails_with(
        &aotc(&[&"compile", &cut, &"-o", &dir.path().join("x.so")]),
        "cut.pt2: not a readable .pt2 (zip) archive",
    );
}

#[test]
fn unknown_ops_are_listed_together_with_their_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let json = edited_json("user_input_mutation", dir.path(), |j| {
        for n in j["graph_module"]["graph"]["nodes"].as_array_mut().unwrap() {
            if n["target"] == "torch.ops.aten.mul.Tensor" || n["target"] == "torch.ops.aten.add.Tensor" {
                n["target"] = "torch.ops.aten.frobnicate.default".into();
            }
        }
    });
    let out = aotc(&[&"compile", &json, &"-o", &dir.path().join("x.so")]);
    fails_with(&out, "1 unsupported operator(s):\n  torch.ops.aten.frobnicate.default: used by node(s) mul, add");
}

#[test]
fn other_schema_major_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let json = edited_json("pytree_io", dir.path(), |j| j["schema_version"]["major"] = 9.into());
    fails_with(
        &aotc(&[&"compile", &json, &"-o", &dir.path().join("x.so")]),
        "schema version 9.20 is not supported: aotc reads major version 8",
    );
}

#[test]
fn missing_and_misshaped_weights() {
    let dir = tempfile::tempdir().unwrap();
    // A bare model.json with no weights beside it.
    let json = edited_json("mlp_buffer_mutation", dir.path(), |_| {});
    fails_with(
        &aotc(&[&"compile", &json, &"-o", &dir.path().join("x.so")]),
        "weight 'l1.weight': parameter is missing from the weights (graph input 'p_l1_weight')",
    );
    // --weights supplies them; a wrong shape names expected and got.
    let w = dir.path().join("w.safetensors");
    let t = aotc_runtime::Tensor::zeros(aotc_abi::DType::F32, &[32, 15]);
    aotc::tensor_io::write(&w, &[("l1.weight".into(), &t)]).unwrap();
    fails_with(&aotc(&[&"compile", &json, &"--weights", &w, &"-o", &dir.path().join("x.so")]), "the --weights file does not match the program:\n  'l1.weight': expected float32[32, 16], the file has float32[32, 15]\n  'calls': missing (neither in the archive nor in the file)");
}

#[test]
fn run_time_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("m.so");
    assert!(aotc(&[&"compile", &fixture("dynamic_batch_mlp").join("model.pt2"), &"-o", &so]).status.success());
    let write = |name: &str, t: aotc_runtime::Tensor| {
        let p = dir.path().join(name);
        aotc::tensor_io::write(&p, &[("0".into(), &t)]).unwrap();
        p
    };
    let cases = [
        (
            write("dtype.safetensors", aotc_runtime::Tensor::zeros(aotc_abi::DType::F64, &[2, 8])),
            "input 0 ('x'): expected dtype float32, got float64 (AOTC_ERR_DTYPE)",
        ),
        (
            write("shape.safetensors", aotc_runtime::Tensor::zeros(aotc_abi::DType::F32, &[2, 7])),
            "input 0 ('x'): dimension 1 is 7, expected 8 (shape [s77, 8]) (AOTC_ERR_SHAPE)",
        ),
        (
            write("rank.safetensors", aotc_runtime::Tensor::zeros(aotc_abi::DType::F32, &[8])),
            "expected rank 2 (shape [s77, 8]), got rank 1",
        ),
        (
            write("range.safetensors", aotc_runtime::Tensor::zeros(aotc_abi::DType::F32, &[2000, 8])),
            "dimension 0 is 2000, outside the range [1, 1024] of dynamic dimension s77 (AOTC_ERR_RANGE)",
        ),
    ];
    for (input, msg) in cases {
        fails_with(&aotc(&[&"run", &so, &"--input", &input, &"--output-dir", &dir.path()]), msg);
    }
    // Too few inputs: a pytree_io inputs file against a library taking one.
    let so2 = dir.path().join("p.so");
    assert!(aotc(&[&"compile", &fixture("pytree_io").join("model.pt2"), &"-o", &so2]).status.success());
    let one = write("one.safetensors", aotc_runtime::Tensor::zeros(aotc_abi::DType::F32, &[2, 4]));
    fails_with(
        &aotc(&[&"run", &so2, &"--input", &one, &"--output-dir", &dir.path()]),
        "no tensor or scalar for input 1 (the model takes 3 inputs)",
    );
}

/// Paths as users type them: bare file names in the current directory (which dlopen
/// would otherwise look up on the library search path), and a missing output directory.
#[test]
fn paths_as_users_type_them() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture("dynamic_batch_mlp");
    for f in ["model.pt2", "inputs_0.safetensors"] {
        std::fs::copy(fx.join(f), dir.path().join(f)).unwrap();
    }
    let in_dir =
        |args: &[&str]| Command::new(aotc_bin()).args(args).current_dir(dir.path()).output().expect("run aotc");
    let out = in_dir(&["compile", "model.pt2", "-o", "model.so"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = in_dir(&["run", "model.so", "--input", "inputs_0.safetensors", "--output-dir", "out"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.path().join("out/outputs_0.safetensors").exists());
    fails_with(
        &in_dir(&["compile", "model.pt2", "-o", "no/such/dir/model.so"]),
        "no/such/dir/model.so: the output directory no/such/dir does not exist",
    );
}

/// An index read from the data that lies outside its dimension fails the call with
/// AOTC_ERR_INDEX naming the node and the index; it is never read out of bounds.
#[test]
fn data_dependent_index_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("m.so");
    let fx = fixture("embedding_mask");
    let out = aotc(&[&"compile", &fx.join("model.pt2"), &"-o", &so]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let inputs = |token: i64| {
        let mut tokens = aotc_runtime::Tensor::zeros(aotc_abi::DType::I64, &[3, 7]);
        tokens.data[8 * 5..8 * 6].copy_from_slice(&token.to_le_bytes());
        let mask = aotc_runtime::Tensor::zeros(aotc_abi::DType::Bool, &[3, 7]);
        let p = dir.path().join(format!("in{token}.safetensors"));
        aotc::tensor_io::write(&p, &[("0".into(), &tokens), ("1".into(), &mask)]).unwrap();
        p
    };
    let run = |token: i64| aotc(&[&"run", &so, &"--input", &inputs(token), &"--output-dir", &dir.path()]);
    let ok = run(3);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    // As in torch, embedding rows do not count from the end.
    fails_with(&run(-1), "embedding row: index -1 is out of range");
    fails_with(&run(1000), "node 'embedding' (torch.ops.aten.embedding.default): embedding row: index 1000 is out of range for a dimension of size");
    fails_with(&run(1000), "(AOTC_ERR_INDEX)");
}

#[test]
fn profile_times_every_kernel_slowest_first() {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("m.so");
    let fx = fixture("small_cnn");
    let out = aotc(&[&"compile", &fx.join("model.pt2"), &"-o", &so]);
    succeeds(&out);
    let compiled = String::from_utf8_lossy(&out.stdout);
    let count: usize = compiled
        .split(" kernels")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .expect(&compiled);
    let input = fx.join("inputs_0.safetensors");
    let out = aotc(&[&"profile", &so, &"--input", &input, &"--iters", &"3", &"--warmup", &"1", &"--json"]);
    succeeds(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kernels = report["kernels"].as_array().unwrap();
    let field = |k: &serde_json::Value, f: &str| k[f].as_f64().unwrap();
    let mut indices: Vec<u64> = kernels.iter().map(|k| k["kernel"].as_u64().unwrap()).collect();
    indices.sort();
    assert_eq!(indices, (0..count as u64).collect::<Vec<_>>(), "one entry per kernel");
    assert!(kernels.iter().enumerate().all(|(i, k)| k["rank"] == i + 1));
    assert!(kernels.windows(2).all(|w| field(&w[0], "ms_per_call") >= field(&w[1], "ms_per_call")), "slowest first");
    let sum: f64 = kernels.iter().map(|k| field(k, "ms_per_call")).sum();
    assert!(
        (sum - field(&report, "kernels_ms")).abs() <= 1e-9 + 1e-9 * sum && sum <= field(&report, "call_ms"),
        "{report}"
    );
    let conv = kernels
        .iter()
        .flat_map(|k| k["nodes"].as_array().unwrap())
        .find(|n| n["name"] == "convolution")
        .expect("a kernel of node 'convolution'");
    assert_eq!((&conv["module"], &conv["module_type"]), (&serde_json::json!("c1"), &serde_json::json!("Conv2d")));

    let out = aotc(&[&"profile", &so, &"--input", &input, &"--iters", &"2", &"--warmup", &"0"]);
    succeeds(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rank  kernel  kind") && text.contains("convolution, _native_batch_norm_legit_no_training, relu, max_pool2d_with_indices [c1: Conv2d] [bn: BatchNorm2d]") && text.contains("total: kernels"), "{text}");
    fails_with(&aotc(&[&"profile", &dir.path().join("missing.so"), &"--input", &input]), "missing.so");
}

#[test]
fn external_weights_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let fx = fixture("mlp_buffer_mutation");
    let out = aotc(&[&"compile", &fx.join("model.pt2"), &"-o", &p("m.so"), &"--external-weights"]);
    succeeds(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("weights -> {}", p("m.weights.safetensors").display()))
    );
    let out = aotc(&[&"inspect", &p("m.so")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("weights: 5 tensors") && text.contains("in m.weights.safetensors beside the library"),
        "{text}"
    );
    // --weights-out names the file (and implies external weights); the library finds it
    // only beside itself, so run names it.
    std::fs::create_dir(p("elsewhere")).unwrap();
    succeeds(&aotc(&[
        &"compile",
        &fx.join("model.pt2"),
        &"-o",
        &p("o.so"),
        &"--weights-out",
        &p("elsewhere/other.safetensors"),
    ]));
    // `aotc run SO --input inputs_0 --output-dir out [extra...]`, and its output 0.
    let run = |so: &str, extra: &[std::ffi::OsString]| {
        let _ = std::fs::remove_dir_all(p("out"));
        let mut args: Vec<std::ffi::OsString> = vec![
            "run".into(),
            p(so).into(),
            "--input".into(),
            fx.join("inputs_0.safetensors").into(),
            "--output-dir".into(),
            p("out").into(),
        ];
        args.extend_from_slice(extra);
        let out = Command::new(aotc_bin()).args(&args).output().expect("run aotc");
        (out, aotc::tensor_io::read(&p("out/outputs_0.safetensors")).map(|t| t.0))
    };
    let weights_file = |name: &str| vec!["--weights-file".into(), p(name).into_os_string()];
    let want = aotc::tensor_io::read(&fx.join("expected_0.safetensors")).unwrap().0;
    for (so, extra) in [
        ("m.so", vec![]),
        ("m.so", weights_file("elsewhere/other.safetensors")),
        ("o.so", weights_file("elsewhere/other.safetensors")),
    ] {
        let (out, got) = run(so, &extra);
        succeeds(&out);
        let got = got.unwrap();
        let (a, b) = (want["0"].to_f64_vec(), got["0"].to_f64_vec());
        assert!(
            a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-4 + 1e-3 * x.abs()),
            "{so} {extra:?}: {a:?} vs {b:?}"
        );
    }
    fails_with(&run("o.so", &[]).0, "beside itself");
    let bytes = std::fs::read(p("m.weights.safetensors")).unwrap();
    std::fs::write(p("cut.safetensors"), &bytes[..bytes.len() - 8]).unwrap();
    fails_with(&run("m.so", &weights_file("cut.safetensors")).0, "truncated");
    fails_with(
        &aotc(&[
            &"bench",
            &p("m.so"),
            &"--input",
            &fx.join("inputs_0.safetensors"),
            &"--iters",
            &"2",
            &"--weights-file",
            &p("cut.safetensors"),
        ]),
        "AOTC_ERR_WEIGHTS",
    );
    succeeds(&aotc(&[
        &"bench",
        &p("m.so"),
        &"--input",
        &fx.join("inputs_0.safetensors"),
        &"--iters",
        &"2",
        &"--weights-file",
        &p("elsewhere/other.safetensors"),
    ]));
    fails_with(
        &aotc(&[
            &"compile",
            &fx.join("model.pt2"),
            &"-o",
            &p("e.so"),
            &"--embed-weights",
            &"--weights-out",
            &p("x.safetensors"),
        ]),
        "--weights-out",
    );
    let out = aotc(&[&"compile", &fx.join("model.pt2"), &"-o", &p("e.so"), &"--embed-weights", &"--external-weights"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}
