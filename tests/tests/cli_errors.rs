//! A new user's common mistakes with the `aotc` command line, each answered by a message
//! that says what the file is and what was expected (never a parser's error about bytes),
//! and the conveniences that make the mistakes rarer: inputs keyed by name, `run --print`
//! without `--output-dir`, help text for every argument. Runs the built `aotc` binary.

use aotc_tests::{aotc_binary, fixture};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn aotc(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(aotc_binary()).args(args.iter().map(|a| a.as_ref())).output().expect("run aotc")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn succeeds(out: &Output) {
    assert!(out.status.success(), "aotc failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A clean failure (exit status 1, no panic) whose message holds every one of `needles`.
fn fails_with(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "expected a clean failure; stdout: {} stderr: {err}", stdout(out));
    for needle in needles {
        assert!(err.contains(needle), "stderr {err:?} lacks {needle:?}");
    }
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{err}");
}

/// The fixture `name` compiled into `dir/<name>.so`.
fn compiled(dir: &Path, name: &str) -> PathBuf {
    let so = dir.join(format!("{name}.so"));
    succeeds(&aotc(&[&"compile", &fixture(name).join("model.pt2"), &"-o", &so]));
    so
}

/// A zip archive at `path` holding `entries` (name, bytes).
fn write_zip(path: &Path, entries: &[(&str, &[u8])]) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in entries {
        zip.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}

/// A safetensors file at `path` holding `tensors` under their keys, and `scalars` (JSON)
/// in its metadata when given.
fn write_inputs(path: &Path, tensors: &[(&str, &aotc_runtime::Tensor)], scalars: Option<&str>) {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(k, t)| {
            let dtype = match t.dtype {
                aotc_abi::DType::F32 => safetensors::Dtype::F32,
                other => panic!("the tests write float32 inputs only, not {other}"),
            };
            let shape = t.shape.iter().map(|&s| s as usize).collect();
            (k.to_string(), safetensors::tensor::TensorView::new(dtype, shape, &t.data).unwrap())
        })
        .collect();
    let metadata = scalars.map(|s| [("scalars".to_string(), s.to_string())].into());
    std::fs::write(path, safetensors::serialize(views, &metadata).unwrap()).unwrap();
}

/// Input 0 of call 0 of the fixture `name` (keyed "0" in its inputs file).
fn recorded_input(name: &str) -> aotc_runtime::Tensor {
    let (mut tensors, _) = aotc::tensor_io::read(&fixture(name).join("inputs_0.safetensors")).unwrap();
    tensors.remove("0").expect("input 0")
}

const EXPORT_SAVE: &str = "torch.export.save(torch.export.export(model, args), 'model.pt2')";

#[test]
fn compile_names_a_torch_save_archive() {
    let dir = tempfile::tempdir().unwrap();
    // torch.save's zip layout (a state_dict or a whole pickled module): a pickle and storages.
    let pt = dir.path().join("weights.pt");
    write_zip(
        &pt,
        &[("archive/data.pkl", b"\x80\x02}q\x00."), ("archive/version", b"3\n"), ("archive/data/0", &[0; 16])],
    );
    fails_with(&aotc(&[&"compile", &pt, &"-o", &dir.path().join("m.so")]),
        &["weights.pt: a PyTorch archive written by torch.save (a state_dict or a pickled module), not a torch.export program", EXPORT_SAVE]);
}

#[test]
fn compile_names_a_torchscript_archive() {
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("scripted.pt");
    write_zip(
        &pt,
        &[
            ("archive/data.pkl", b"\x80\x02}q\x00."),
            ("archive/constants.pkl", b"\x80\x02)q\x00."),
            ("archive/code/__torch__/model.py", b"def forward(self, x):\n    return x\n"),
        ],
    );
    fails_with(
        &aotc(&[&"compile", &pt, &"-o", &dir.path().join("m.so")]),
        &["scripted.pt: a TorchScript archive (torch.jit.save), not a torch.export program", EXPORT_SAVE],
    );
}

#[test]
fn compile_names_a_shared_library_whatever_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let so = compiled(dir.path(), "mlp_buffer_mutation");
    // Named by its content: a library renamed .pt2 is still a library.
    let renamed = dir.path().join("renamed.pt2");
    std::fs::copy(&so, &renamed).unwrap();
    for file in [&so, &renamed] {
        fails_with(
            &aotc(&[&"compile", file, &"-o", &dir.path().join("again.so")]),
            &[
                "a shared library (ELF), perhaps one aotc compiled: run it with `aotc run`",
                "`aotc compile` takes a .pt2 archive or a model.json",
            ],
        );
    }
}

#[test]
fn compile_names_python_source() {
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("model.py");
    std::fs::write(&py, "\"\"\"The model.\"\"\"\nimport torch\n\nclass M(torch.nn.Module):\n    pass\n").unwrap();
    fails_with(
        &aotc(&[&"compile", &py, &"-o", &dir.path().join("m.so")]),
        &["model.py: neither a zip archive (.pt2) nor JSON, but text (Python source?", EXPORT_SAVE],
    );
    // An empty file says so; a device is no program file at all.
    let empty = dir.path().join("empty.pt2");
    std::fs::write(&empty, b"").unwrap();
    fails_with(
        &aotc(&[&"compile", &empty, &"-o", &dir.path().join("m.so")]),
        &["empty.pt2: an empty file, not a torch.export program", EXPORT_SAVE],
    );
    fails_with(
        &aotc(&[&"compile", &"/dev/null", &"-o", &dir.path().join("m.so")]),
        &["/dev/null: a device, not a regular file"],
    );
}

#[test]
fn run_bench_and_profile_name_a_program_given_for_a_library() {
    let dir = tempfile::tempdir().unwrap();
    let pt2 = fixture("mlp_buffer_mutation").join("model.pt2");
    let input = fixture("mlp_buffer_mutation").join("inputs_0.safetensors");
    let compile_first = format!(
        "is a zip archive (a .pt2?), not a compiled library: compile it first with `aotc compile {}",
        pt2.display()
    );
    fails_with(&aotc(&[&"run", &pt2, &"--input", &input, &"--print"]), &[&compile_first]);
    fails_with(&aotc(&[&"bench", &pt2, &"--input", &input]), &[&compile_first]);
    fails_with(&aotc(&[&"profile", &pt2, &"--input", &input]), &[&compile_first]);
    // Any other file that is no library is refused before dlopen, which would only say
    // "invalid ELF header".
    let py = dir.path().join("model.py");
    std::fs::write(&py, "import torch\n").unwrap();
    fails_with(
        &aotc(&[&"run", &py, &"--input", &input]),
        &["model.py is not a compiled library (it has no ELF header)", "aotc compile"],
    );
    let json = fixture("mlp_buffer_mutation").join("info.json");
    fails_with(
        &aotc(&[&"run", &json, &"--input", &input]),
        &["info.json is JSON (a model.json?), not a compiled library"],
    );
}

#[test]
fn inputs_keyed_by_name_give_the_results_of_inputs_keyed_by_index() {
    let dir = tempfile::tempdir().unwrap();
    let so = compiled(dir.path(), "mlp_buffer_mutation");
    let by_name = dir.path().join("by_name.safetensors");
    write_inputs(&by_name, &[("x", &recorded_input("mlp_buffer_mutation"))], None);
    let (out_index, out_name) = (dir.path().join("by_index_out"), dir.path().join("by_name_out"));
    succeeds(&aotc(&[
        &"run",
        &so,
        &"--input",
        &fixture("mlp_buffer_mutation").join("inputs_0.safetensors"),
        &"--output-dir",
        &out_index,
    ]));
    succeeds(&aotc(&[&"run", &so, &"--input", &by_name, &"--output-dir", &out_name]));
    let read = |d: &Path| aotc::tensor_io::read(&d.join("outputs_0.safetensors")).unwrap().0;
    let (want, got) = (read(&out_index), read(&out_name));
    assert_eq!(want.keys().collect::<Vec<_>>(), ["0"]);
    assert_eq!(got, want, "keyed by name, the call gave other outputs than keyed by index");
    // bench and profile take it too.
    succeeds(&aotc(&[&"bench", &so, &"--input", &by_name, &"--iters", &"1", &"--warmup", &"0"]));
    succeeds(&aotc(&[&"profile", &so, &"--input", &by_name, &"--iters", &"1", &"--warmup", &"0"]));
}

#[test]
fn unknown_twice_given_and_missing_inputs_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let so = compiled(dir.path(), "dynamic_batch_mlp");
    let x = recorded_input("dynamic_batch_mlp");
    let file = |name: &str, tensors: &[(&str, &aotc_runtime::Tensor)], scalars: Option<&str>| {
        let p = dir.path().join(name);
        write_inputs(&p, tensors, scalars);
        p
    };
    let run = |input: &Path| aotc(&[&"run", &so, &"--input", &input, &"--print"]);
    // An extra tensor is no longer ignored: the message lists the keys the program takes.
    fails_with(
        &run(&file("extra.safetensors", &[("x", &x), ("y", &x)], None)),
        &["extra.safetensors: unknown key(s) 'y': the program's 1 input(s) are keyed by flat index or by name: 0 or x"],
    );
    fails_with(
        &run(&file("scalar.safetensors", &[("0", &x)], Some(r#"{"scale": 2}"#))),
        &["unknown key(s) 'scale'", "0 or x"],
    );
    fails_with(
        &run(&file("twice.safetensors", &[("0", &x), ("x", &x)], None)),
        &["input 0 (x) is given twice, as '0' and as 'x'"],
    );
    fails_with(
        &run(&file("none.safetensors", &[], None)),
        &["none.safetensors: no tensor or scalar for input 0 (the model takes 1 inputs), named 'x': key it '0' or 'x'"],
    );
}

#[test]
fn inputs_files_that_are_not_safetensors_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let so = compiled(dir.path(), "dynamic_batch_mlp");
    let fx = fixture("dynamic_batch_mlp");
    let expected = "not a safetensors inputs file: an inputs file is a safetensors file of one call's inputs, keyed by input name or flat index";
    let empty = dir.path().join("empty.safetensors");
    std::fs::write(&empty, b"").unwrap();
    let cases: [(PathBuf, &str); 3] = [
        (fx.join("info.json"), "info.json is JSON text"),
        (empty, "empty.safetensors is empty"),
        (fx.join("model.pt2"), "model.pt2 is a zip archive (a .pt2?)"),
    ];
    for (input, what) in &cases {
        fails_with(&aotc(&[&"run", &so, &"--input", input, &"--print"]), &[*what, expected]);
        fails_with(&aotc(&[&"bench", &so, &"--input", input]), &[*what, expected]);
    }
}

#[test]
fn run_print_needs_no_output_dir() {
    let dir = tempfile::tempdir().unwrap();
    let so = compiled(dir.path(), "mlp_buffer_mutation");
    let input = fixture("mlp_buffer_mutation").join("inputs_0.safetensors");
    let out = aotc(&[&"run", &so, &"--input", &input, &"--print"]);
    succeeds(&out);
    assert!(stdout(&out).contains("  output 0: float32[4, 10] ["), "{}", stdout(&out));
    // With neither, the outputs are printed: there is nowhere else for them to go.
    let out = aotc(&[&"run", &so, &"--input", &input, &"--input", &input]);
    succeeds(&out);
    assert_eq!(stdout(&out).matches("  output 0: float32[4, 10] [").count(), 2, "{}", stdout(&out));
}

/// The entries of a --help's "Arguments:" and "Options:" lists that name an argument but
/// do not say what it is: "  <LIBRARY>  The shared library..." (short help) or the name
/// alone on its line and the text indented below it (long help).
fn undocumented(help: &str) -> Vec<String> {
    let is_entry = |line: &str| line.starts_with("  ") && line.trim_start().starts_with(['<', '-']);
    let lines: Vec<&str> = help.lines().collect();
    let mut bad = vec![];
    let mut in_list = false;
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with(' ') {
            in_list = *line == "Arguments:" || *line == "Options:";
            continue;
        }
        if !in_list || !is_entry(line) {
            continue;
        }
        // What follows the name (two spaces or more after it), less clap's own notes
        // ("[default: cpu]"), else the next line when it is not another entry.
        let inline = line.trim_start().split_once("  ").map(|(_, doc)| doc.trim()).filter(|doc| !doc.is_empty());
        let below = lines.get(i + 1).filter(|next| !next.trim().is_empty() && !is_entry(next)).map(|next| next.trim());
        if inline.or(below).is_none_or(|doc| doc.starts_with('[')) {
            bad.push(line.to_string());
        }
    }
    bad
}

#[test]
fn help_documents_every_argument_and_the_input_format() {
    for sub in ["compile", "run", "bench", "profile", "ptx", "ops", "inspect"] {
        let out = aotc(&[&sub, &"--help"]);
        succeeds(&out);
        let help = stdout(&out);
        assert!(help.contains("Usage: aotc"), "{help}");
        assert_eq!(undocumented(&help), Vec::<String>::new(), "aotc {sub} --help:\n{help}");
    }
    for sub in ["run", "bench", "profile"] {
        let help = stdout(&aotc(&[&sub, &"--help"]));
        for needle in [
            "one safetensors file per call",
            "keyed by the input's name",
            "flat index",
            "\"scalars\"",
            "safetensors.torch.save_file({\"x\": x",
            "safetensors.numpy.save_file",
        ] {
            assert!(help.contains(needle), "aotc {sub} --help lacks {needle:?}:\n{help}");
        }
    }
}

#[test]
fn inspect_names_symbols_as_the_inputs_do_and_says_when_there_are_no_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let so = compiled(dir.path(), "dynamic_batch_mlp");
    let out = aotc(&[&"inspect", &so]);
    succeeds(&out);
    let text = stdout(&out);
    assert!(text.contains("0: x float32[s77∈[1, 1024], 8]"), "{text}");
    assert!(text.contains("GEMM FLOPs per call: (384*s77) + (192*s77)\n"), "{text}");
    assert!(text.contains("\nbuffers: none\n"), "{text}");
    let out = aotc(&[&"inspect", &fixture("dynamic_batch_mlp").join("model.pt2")]);
    succeeds(&out);
    assert!(stdout(&out).contains("\nbuffers (mutable state): none\n"), "{}", stdout(&out));
}
