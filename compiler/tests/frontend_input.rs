//! Hostile input to the frontend: an archive, model.json or weights file may be wrong in
//! any way, and aotc must answer with a message naming what is wrong, never a panic, a
//! stack overflow, an abort or silently wrong weights.
//!
//! `AOTC=/path/to/aotc` runs these against another build of the binary.

mod common;

use common::{aotc, fails_with, fixture, succeeds};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Output;

/// The fixture's entries, in archive order: (name, bytes).
fn entries(name: &str) -> Vec<(String, Vec<u8>)> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(fixture(name).join("model.pt2")).unwrap()).unwrap();
    (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).unwrap();
            let mut bytes = vec![];
            f.read_to_end(&mut bytes).unwrap();
            (f.name().to_string(), bytes)
        })
        .collect()
}

/// Writes `entries` as a .pt2 (stored, with ZIP64 size fields) at `dir/model.pt2`.
fn write_pt2(dir: &Path, entries: &[(String, Vec<u8>)]) -> PathBuf {
    let path = dir.join("model.pt2");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored).large_file(true);
    for (name, bytes) in entries {
        zip.start_file(name.as_str(), opts).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    path
}

/// The fixture's archive with the JSON entry ending in `suffix` edited by `edit`.
fn edited_pt2(name: &str, dir: &Path, suffix: &str, edit: impl Fn(&mut Value)) -> PathBuf {
    let mut entries = entries(name);
    let (_, bytes) =
        entries.iter_mut().find(|(n, _)| n.ends_with(suffix)).unwrap_or_else(|| panic!("{name} has no {suffix}"));
    let mut json: Value = serde_json::from_slice(bytes).unwrap();
    edit(&mut json);
    *bytes = json.to_string().into_bytes();
    write_pt2(dir, &entries)
}

const WEIGHTS_CONFIG: &str = "data/weights/model_weights_config.json";

/// mlp_buffer_mutation with l1.weight's tensor_meta (float32[32, 16] over 2048 bytes) edited.
fn l1_weight_meta(dir: &Path, edit: impl Fn(&mut Value)) -> PathBuf {
    edited_pt2("mlp_buffer_mutation", dir, WEIGHTS_CONFIG, |j| edit(&mut j["config"]["l1.weight"]["tensor_meta"]))
}

fn compile(input: &Path, dir: &Path) -> Output {
    aotc(&[&"compile", &input, &"-o", &dir.join("x.so")])
}

#[test]
fn strides_beyond_the_storage_or_overflowing_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let strides =
        |s: [i64; 2]| l1_weight_meta(dir.path(), |m| m["strides"] = json!([{"as_int": s[0]}, {"as_int": s[1]}]));
    // 31 * stride overflows i64: a wrapped bound would pass and read the wrong bytes.
    for big in [i64::MAX / 2, 1 << 62] {
        fails_with(&compile(&strides([big, 1]), dir.path()),
            &format!("weight 'l1.weight': the view (float32 sizes [32, 16], strides [{big}, 1], storage offset 0) overflows 64-bit element offsets"));
    }
    fails_with(&compile(&strides([1 << 40, 1]), dir.path()),
        "weight 'l1.weight': the view (float32 sizes [32, 16], strides [1099511627776, 1], storage offset 0) reads elements 0..=34084860461071, \
         but payload data/weights/weight_0 holds 2048 bytes (512 elements)");
    // A view repeating its storage (stride 0) must not blow up into a terabyte.
    let repeated = l1_weight_meta(dir.path(), |m| {
        m["sizes"] = json!([{"as_int": 1i64 << 34}, {"as_int": 16}]);
        m["strides"] = json!([{"as_int": 0}, {"as_int": 1}]);
    });
    fails_with(&compile(&repeated, dir.path()),
        "weight 'l1.weight': takes the weights past the 64 GiB aotc builds (float32 sizes [17179869184, 16], strides [0, 1], storage offset 0)");
    // A transposed view inside the storage is fine.
    succeeds(&compile(&strides([1, 32]), dir.path()));
}

#[test]
fn strides_of_another_rank_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pt2 = l1_weight_meta(dir.path(), |m| m["strides"] = json!([{"as_int": 16}]));
    fails_with(
        &compile(&pt2, dir.path()),
        "weight 'l1.weight': 1 strides for 2 sizes (float32 sizes [32, 16], strides [16], storage offset 0)",
    );
}

#[test]
fn negative_sizes_and_offsets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let size = l1_weight_meta(dir.path(), |m| m["sizes"][1] = json!({"as_int": -16}));
    fails_with(&compile(&size, dir.path()), "weight 'l1.weight': negative size or storage offset (float32 sizes [32, -16], strides [16, 1], storage offset 0)");
    let offset = l1_weight_meta(dir.path(), |m| m["storage_offset"] = json!({"as_int": -4}));
    fails_with(&compile(&offset, dir.path()), "weight 'l1.weight': negative size or storage offset (float32 sizes [32, 16], strides [16, 1], storage offset -4)");
}

#[test]
fn payload_names_cannot_leave_the_layout() {
    // An unpacked archive beside a secret of exactly l1.weight's size.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), [7u8; 2048]).unwrap();
    let root = dir.path().join("unpacked");
    for (name, bytes) in entries("mlp_buffer_mutation") {
        let rel = name.split_once('/').unwrap().1;
        let mut bytes = bytes;
        if rel == WEIGHTS_CONFIG {
            let mut j: Value = serde_json::from_slice(&bytes).unwrap();
            j["config"]["l1.weight"]["path_name"] = "../../../secret".into();
            bytes = j.to_string().into_bytes();
        }
        std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
        std::fs::write(root.join(rel), bytes).unwrap();
    }
    fails_with(&compile(&root.join("models/model.json"), dir.path()),
        "weight 'l1.weight': payload name \"../../../secret\" in data/weights/model_weights_config.json is not a plain file name");
}

/// 20,000 nested `Add`s: a recursive parser without a depth bound overflows the stack.
fn deeply_nested(depth: usize) -> String {
    format!("{}Symbol('s77', positive=True, integer=True){}", "Add(".repeat(depth), ", Integer(1))".repeat(depth))
}

#[test]
fn deeply_nested_symbolic_sizes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pt2 = edited_pt2("dynamic_batch_mlp", dir.path(), "models/model.json", |j| {
        j["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]["expr_str"] =
            deeply_nested(20_000).into();
    });
    let message = "symbolic expression nested deeper than 64 levels";
    fails_with(&compile(&pt2, dir.path()), message);
    fails_with(&aotc(&[&"inspect", &pt2]), message);
}

/// A safetensors file of `tensors` (name, dtype, sizes; zero-filled) in `dir`.
fn weights_file(dir: &Path, tensors: &[(&str, aotc_abi::DType, &[i64])]) -> PathBuf {
    let path = dir.join("w.safetensors");
    let tensors: Vec<(String, aotc_runtime::Tensor)> = tensors
        .iter()
        .map(|(name, dtype, sizes)| (name.to_string(), aotc_runtime::Tensor::zeros(*dtype, sizes)))
        .collect();
    let refs: Vec<(String, &aotc_runtime::Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    aotc::tensor_io::write(&path, &refs).unwrap();
    path
}

fn compile_with_weights(weights: &Path, dir: &Path) -> Output {
    aotc(&[
        &"compile",
        &fixture("mlp_buffer_mutation").join("model.pt2"),
        &"--weights",
        &weights,
        &"-o",
        &dir.join("x.so"),
    ])
}

#[test]
fn weights_file_names_must_match_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let w = weights_file(
        dir.path(),
        &[
            ("l1.weight", aotc_abi::DType::F32, &[32, 16]),
            ("foo", aotc_abi::DType::F32, &[3]),
            ("l3.bias", aotc_abi::DType::F32, &[10]),
        ],
    );
    fails_with(
        &compile_with_weights(&w, dir.path()),
        &format!(
        "{}: the --weights file does not match the program:\n  'foo': no such weight\n  'l3.bias': no such weight\n  \
         (the program's weights: calls, l1.bias, l1.weight, l2.bias, l2.weight)\n", w.display()),
    );
    // Names that all match are used.
    let w = weights_file(
        dir.path(),
        &[("l1.weight", aotc_abi::DType::F32, &[32, 16]), ("calls", aotc_abi::DType::F32, &[1])],
    );
    succeeds(&compile_with_weights(&w, dir.path()));
}

#[test]
fn weights_file_dtypes_and_shapes_must_match_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let w = weights_file(
        dir.path(),
        &[("l1.weight", aotc_abi::DType::F64, &[32, 16]), ("l2.bias", aotc_abi::DType::F32, &[11])],
    );
    fails_with(&compile_with_weights(&w, dir.path()), &format!(
        "{}: the --weights file does not match the program:\n  'l1.weight': expected float32[32, 16], the file has float64[32, 16]\n  \
         'l2.bias': expected float32[10], the file has float32[11]\n", w.display()));
}

/// Sets the ZIP64 uncompressed size of central directory entry `name` in the zip `bytes`.
fn claim_size(bytes: &mut [u8], name: &str, size: u64) {
    const CENTRAL_HEADER: &[u8] = b"PK\x01\x02";
    let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]) as usize;
    let mut at = 0;
    loop {
        at += bytes[at..]
            .windows(4)
            .position(|w| w == CENTRAL_HEADER)
            .unwrap_or_else(|| panic!("no central entry {name}"));
        let (name_len, extra_len) = (u16_at(bytes, at + 28), u16_at(bytes, at + 30));
        if &bytes[at + 46..at + 46 + name_len] == name.as_bytes() {
            // The extra field starts with the ZIP64 block (id 1): uncompressed size first.
            let extra = at + 46 + name_len;
            assert!(extra_len >= 12 && u16_at(bytes, extra) == 1, "{name} has no ZIP64 block");
            bytes[extra + 4..extra + 12].copy_from_slice(&size.to_le_bytes());
            return;
        }
        at += 4;
    }
}

#[test]
fn zip_entries_claiming_absurd_sizes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let entries = entries("mlp_buffer_mutation");
    let pt2 = write_pt2(dir.path(), &entries);
    let mut bytes = std::fs::read(&pt2).unwrap();
    claim_size(&mut bytes, "model/data/weights/weight_0", 1 << 62);
    std::fs::write(&pt2, bytes).unwrap();
    fails_with(
        &compile(&pt2, dir.path()),
        "entry model/data/weights/weight_0: larger than the 64 GiB aotc reads from an archive",
    );
}

#[test]
fn a_program_inflating_past_the_json_limit_is_refused() {
    // A model.json claiming 10 GiB, as a 47 MB deflated one really can: refused before
    // inflating. (archive.rs's unit tests cover an entry whose header understates it.)
    let dir = tempfile::tempdir().unwrap();
    let pt2 = write_pt2(dir.path(), &entries("mlp_buffer_mutation"));
    let mut bytes = std::fs::read(&pt2).unwrap();
    claim_size(&mut bytes, "model/models/model.json", 10 << 30);
    std::fs::write(&pt2, bytes).unwrap();
    fails_with(
        &compile(&pt2, dir.path()),
        &format!(
            "{}: entry model/models/model.json: passes 1024 MiB once inflated, the most aotc reads from a JSON entry",
            pt2.display()
        ),
    );
}

/// Runs aotc with `args`, failing the test if it has not finished within 30 s (a read of
/// a FIFO waits for a writer forever).
fn aotc_within_30s(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut child = std::process::Command::new(common::aotc_bin())
        .args(args.iter().map(|a| a.as_ref()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("aotc {:?} hangs", args.iter().map(|a| a.as_ref().to_owned()).collect::<Vec<_>>());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: c is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

#[test]
fn fifos_are_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let not_regular = format!("{}: a FIFO (named pipe), not a regular file", fifo.display());
    let pt2 = fixture("mlp_buffer_mutation").join("model.pt2");
    let so = dir.path().join("m.so");
    fails_with(&aotc_within_30s(&[&"compile", &fifo, &"-o", &so]), &not_regular);
    fails_with(&aotc_within_30s(&[&"compile", &pt2, &"--weights", &fifo, &"-o", &so]), &not_regular);
    fails_with(&aotc_within_30s(&[&"inspect", &fifo]), &not_regular);
    // A bare model.json whose weights config is a FIFO.
    let root = dir.path().join("unpacked");
    for (name, bytes) in entries("mlp_buffer_mutation") {
        let path = root.join(name.split_once('/').unwrap().1);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if name.ends_with(WEIGHTS_CONFIG) {
            mkfifo(&path);
        } else {
            std::fs::write(path, bytes).unwrap();
        }
    }
    fails_with(
        &aotc_within_30s(&[&"compile", &root.join("models/model.json"), &"-o", &so]),
        &format!("{}: a FIFO (named pipe), not a regular file", root.join(WEIGHTS_CONFIG).display()),
    );
    // The library's side: the weights beside it, --weights-file, and an inputs file.
    succeeds(&aotc(&[&"compile", &pt2, &"--external-weights", &"-o", &so]));
    let beside = dir.path().join("m.weights.safetensors");
    std::fs::rename(&beside, dir.path().join("w.safetensors")).unwrap();
    mkfifo(&beside);
    let inputs = dir.path().join("in.safetensors");
    std::fs::copy(fixture("mlp_buffer_mutation").join("inputs_0.safetensors"), &inputs).unwrap();
    fails_with(
        &aotc_within_30s(&[&"run", &so, &"--input", &inputs]),
        &format!("weights file '{}': a FIFO (named pipe), not a regular file", beside.display()),
    );
    std::fs::remove_file(&beside).unwrap();
    std::fs::rename(dir.path().join("w.safetensors"), &beside).unwrap();
    fails_with(
        &aotc_within_30s(&[&"run", &so, &"--input", &inputs, &"--weights-file", &fifo]),
        &format!("weights file '{}': a FIFO (named pipe), not a regular file", fifo.display()),
    );
    fails_with(&aotc_within_30s(&[&"run", &so, &"--input", &fifo]), &not_regular);
    succeeds(&aotc_within_30s(&[&"run", &so, &"--input", &inputs]));
}

#[test]
fn a_signature_listing_an_input_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pt2 = edited_pt2("mlp_buffer_mutation", dir.path(), "models/model.json", |j| {
        let specs = j["graph_module"]["signature"]["input_specs"].as_array_mut().unwrap();
        let user = specs.iter().find(|s| s.get("user_input").is_some()).unwrap().clone();
        specs.push(user);
    });
    fails_with(
        &compile(&pt2, dir.path()),
        &format!(
            "{}: the graph signature lists graph input 'x' twice (input_specs 5 and 6); torch.export gives each input \
             its own placeholder",
            pt2.display()
        ),
    );
}
