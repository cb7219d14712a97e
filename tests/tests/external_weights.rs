//! External weights (`aotc compile --external-weights`): the library runs from the file
//! beside it, swaps in a second weights file (checked against a library compiled with those
//! weights embedded), refuses bad files with a message naming what is wrong, and its
//! instances share one mapping of the file.

use aotc::{CompileOptions, WeightsPlacement};
use aotc_abi::status;
use aotc_runtime::{Device, Model, Tensor, Weights};
use aotc_tests::{calls, check_call, compare, fixture, recorded, tolerance};
use std::path::Path;

fn compile(model: &Path, so: &Path, weights: Option<&Path>, placement: WeightsPlacement, weights_out: Option<&Path>) {
    let opts = CompileOptions {
        weights: weights.map(Path::to_path_buf),
        placement,
        weights_out: weights_out.map(Path::to_path_buf),
        ..Default::default()
    };
    if let Err(e) = aotc::compile(model, so, &opts) {
        panic!("compiling {}: {e}", model.display());
    }
}

fn load(so: &Path, weights: Weights) -> Result<Model, aotc_runtime::Error> {
    Model::load_with(so, Device::Cpu, 1, weights)
}

/// The archive's weights with every float scaled by 2 and shifted, keyed by FQN: a
/// `--weights` file that changes every output.
fn second_weights(model: &Path, out: &Path) {
    let src = aotc::frontend::load(model, None).expect("archive");
    let tensors: Vec<(String, Tensor)> = src
        .weights
        .iter()
        .map(|(name, t)| {
            let mut data = t.data.bytes().expect("the archive's weights").into_owned();
            if t.dtype == aotc_abi::DType::F32 {
                for c in data.chunks_exact_mut(4) {
                    let v = f32::from_le_bytes(c.try_into().unwrap());
                    c.copy_from_slice(&(v * 2.0 + 0.01).to_le_bytes());
                }
            }
            (name.clone(), Tensor { dtype: t.dtype, shape: t.sizes.clone(), data })
        })
        .collect();
    let named: Vec<(String, &Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    aotc::tensor_io::write(out, &named).expect("second weights");
}

fn expect_weights_error(r: Result<Model, aotc_runtime::Error>, needles: &[&str]) -> String {
    let e = match r {
        Ok(_) => panic!("expected an error mentioning {needles:?}"),
        Err(e) => e,
    };
    assert_eq!(e.code, status::WEIGHTS, "{e}");
    for n in needles {
        assert!(e.message.contains(n), "'{n}' not in: {}", e.message);
    }
    e.message
}

/// Maps of `file` in this process (/proc/self/maps lines naming it).
fn mappings_of(file: &Path) -> usize {
    let name = std::fs::canonicalize(file).unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter(|l| l.ends_with(&*name.to_string_lossy())).count()
}

#[test]
fn a_library_with_external_weights_matches_pytorch() {
    for name in ["mlp_buffer_mutation", "dynamic_batch_mlp"] {
        let dir = fixture(name);
        let tmp = tempfile::tempdir().unwrap();
        let so = tmp.path().join("model.so");
        compile(&dir.join("model.pt2"), &so, None, WeightsPlacement::External, None);
        let file = tmp.path().join("model.weights.safetensors");
        assert!(file.exists(), "{name}: no weights file beside the library");
        // Any safetensors reader opens it: the alignment gaps are tensors of their own.
        let (tensors, _) = aotc::tensor_io::read(&file).expect("a valid safetensors file");
        assert!(
            tensors.keys().any(|k| k.ends_with(".packed")),
            "{name}: the file holds the packed GEMM operands: {:?}",
            tensors.keys()
        );
        let manifest: aotc_abi::manifest::Manifest = {
            let m = load(&so, Weights::Default).unwrap();
            serde_json::from_str(m.metadata_json()).unwrap()
        };
        assert!(manifest.weights.external);
        assert!(std::fs::metadata(&so).unwrap().len() < 4 << 20);

        let mut m = load(&so, Weights::Default).unwrap_or_else(|e| panic!("{name}: {e}"));
        for call in 0..calls(&dir) {
            let (inputs, expected) = recorded(&dir, call);
            check_call(&mut m, &inputs, &expected, tolerance(&dir), &format!("{name} call {call}"));
        }
    }
}

#[test]
fn swapped_weights_match_a_library_compiled_with_them() {
    let dir = fixture("mlp_buffer_mutation");
    let pt2 = dir.join("model.pt2");
    let tmp = tempfile::tempdir().unwrap();
    let (so, reference, second_so) = (tmp.path().join("m.so"), tmp.path().join("ref.so"), tmp.path().join("second.so"));
    let fqn_weights = tmp.path().join("second.safetensors");
    let second = tmp.path().join("second.weights.safetensors");
    second_weights(&pt2, &fqn_weights);
    compile(&pt2, &so, None, WeightsPlacement::External, None);
    // The reference: the same program with the second weights embedded.
    compile(&pt2, &reference, Some(&fqn_weights), WeightsPlacement::Embedded, None);
    // The second weights file: another compilation, with those weights written outside.
    compile(&pt2, &second_so, Some(&fqn_weights), WeightsPlacement::External, Some(&second));

    let tol = tolerance(&dir);
    let mut m = load(&so, Weights::Default).unwrap();
    let (inputs0, expected0) = recorded(&dir, 0);
    check_call(&mut m, &inputs0, &expected0, tol, "before the swap");
    m.load_weights(&second).unwrap();
    let bytes = std::fs::read(&second).unwrap();
    let mut from_bytes = load(&so, Weights::Bytes(&bytes)).unwrap();
    let mut swapped_embedded = load(&reference, Weights::Default).unwrap();
    swapped_embedded.load_weights_bytes(&std::fs::read(tmp.path().join("m.weights.safetensors")).unwrap()).unwrap();
    let mut r = load(&reference, Weights::Default).unwrap();
    for call in 0..calls(&dir) {
        let (inputs, expected) = recorded(&dir, call);
        let want = r.run(&mut inputs.clone()).unwrap();
        // The swap changed the outputs (the test would not see a swap that did nothing)...
        let differs = compare("", &expected[0].1, &want[0], tol.0, tol.1).is_err();
        assert!(differs, "call {call}: the second weights give PyTorch's original outputs");
        // ...to those of the library compiled with the new weights (the swap restarted the
        // state buffer 'calls' from the file, as a new instance would).
        let named: Vec<(String, Tensor)> = want.into_iter().enumerate().map(|(i, t)| (i.to_string(), t)).collect();
        check_call(&mut m, &inputs, &named, (1e-6, 1e-6), &format!("swapped call {call}"));
        check_call(&mut from_bytes, &inputs, &named, (1e-6, 1e-6), &format!("weights from bytes, call {call}"));
        // An embedded library takes a file of its structure too: the original weights.
        check_call(
            &mut swapped_embedded,
            &inputs,
            &expected,
            tol,
            &format!("embedded library, swapped back, call {call}"),
        );
    }
}

/// A copy of the weights file `src` with its header JSON edited by `edit` and the header
/// padded by `pad` spaces more (the data shifts with it).
fn with_header(src: &Path, dst: &Path, pad: usize, edit: impl FnOnce(&mut serde_json::Value)) {
    let bytes = std::fs::read(src).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut json: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut json);
    let mut text = serde_json::to_vec(&json).unwrap();
    text.resize((8 + text.len()).next_multiple_of(64) - 8 + pad, b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(dst, out).unwrap();
}

#[test]
fn bad_weights_files_are_refused_with_a_clear_error() {
    let dir = fixture("mlp_buffer_mutation");
    let tmp = tempfile::tempdir().unwrap();
    let t = |name: &str| tmp.path().join(name);
    let so = t("m.so");
    compile(&dir.join("model.pt2"), &so, None, WeightsPlacement::External, None);
    let good = t("m.weights.safetensors");
    let bytes = std::fs::read(&good).unwrap();
    let file = |name: &str, contents: &[u8]| {
        std::fs::write(t(name), contents).unwrap();
        Weights::File(t(name))
    };

    expect_weights_error(
        load(&so, file("truncated", &bytes[..bytes.len() - 100])),
        &["truncated", "'l2.weight.packed'", "ends at byte"],
    );
    expect_weights_error(load(&so, file("header_only", &bytes[..40])), &["truncated", "header"]);
    expect_weights_error(load(&so, Weights::Bytes(&bytes[..bytes.len() - 1])), &["weights buffer", "truncated"]);
    expect_weights_error(load(&so, file("garbage", b"this is not a weights file at all")), &["not a safetensors file"]);
    expect_weights_error(load(&so, file("empty", b"")), &["empty"]);
    expect_weights_error(load(&so, Weights::File(t("nowhere.safetensors"))), &["nowhere.safetensors", "No such file"]);

    with_header(&good, &t("dtype"), 0, |j| j["l1.bias"]["dtype"] = "I32".into());
    expect_weights_error(
        load(&so, Weights::File(t("dtype"))),
        &["tensor 'l1.bias': expected float32[32], the file has int32[32]"],
    );
    with_header(&good, &t("shape"), 0, |j| j["l1.bias"]["shape"] = serde_json::json!([4, 8]));
    expect_weights_error(
        load(&so, Weights::File(t("shape"))),
        &["tensor 'l1.bias': expected float32[32], the file has float32[4, 8]"],
    );
    with_header(&good, &t("missing"), 0, |j| {
        j.as_object_mut().unwrap().remove("l2.bias");
    });
    expect_weights_error(
        load(&so, Weights::File(t("missing"))),
        &["tensor 'l2.bias' (float32[10]) is missing from the file"],
    );
    with_header(&good, &t("unaligned"), 8, |_| {});
    expect_weights_error(load(&so, Weights::File(t("unaligned"))), &["not a multiple of 64", "aligned"]);
    with_header(&good, &t("layout"), 0, |j| j["__metadata__"]["aotc.fingerprint"] = "0123456789abcdef".into());
    expect_weights_error(load(&so, Weights::File(t("layout"))), &["0123456789abcdef", "fingerprint"]);
    // A plain safetensors file of the archive's weights is not what the library reads.
    second_weights(&dir.join("model.pt2"), &t("fqn.safetensors"));
    expect_weights_error(load(&so, Weights::File(t("fqn.safetensors"))), &["not an aotc weights file"]);
    // Another program's weights: the first mismatch is named.
    let other = t("other.so");
    compile(&fixture("dynamic_batch_mlp").join("model.pt2"), &other, None, WeightsPlacement::External, None);
    let msg = expect_weights_error(
        load(&so, Weights::File(t("other.weights.safetensors"))),
        &["tensor 'l1.bias': expected float32[32], the file has float32[24]"],
    );
    assert!(msg.contains("other.weights.safetensors"), "{msg}");

    // A failed swap leaves the instance as it was.
    let mut m = load(&so, Weights::Default).unwrap();
    let e = m.load_weights(t("truncated")).unwrap_err();
    assert_eq!(e.code, status::WEIGHTS);
    let e = m.load_weights_bytes(b"nope").unwrap_err();
    assert!(e.message.contains("not a safetensors file"), "{e}");
    let (inputs, expected) = recorded(&dir, 0);
    check_call(&mut m, &inputs, &expected, tolerance(&dir), "after failed swaps");
}

#[test]
fn the_file_beside_the_library_must_be_its_own() {
    let dir = fixture("mlp_buffer_mutation");
    let pt2 = dir.join("model.pt2");
    let tmp = tempfile::tempdir().unwrap();
    let so = tmp.path().join("m.so");
    let beside = tmp.path().join("m.weights.safetensors");
    compile(&pt2, &so, None, WeightsPlacement::External, None);
    second_weights(&pt2, &tmp.path().join("fqn.safetensors"));
    let second = tmp.path().join("second.weights.safetensors");
    compile(
        &pt2,
        &tmp.path().join("second.so"),
        Some(&tmp.path().join("fqn.safetensors")),
        WeightsPlacement::External,
        Some(&second),
    );

    // Another compilation's file in its place: refused, naming both weights ids...
    let own = std::fs::read(&beside).unwrap();
    std::fs::copy(&second, &beside).unwrap();
    let msg = expect_weights_error(load(&so, Weights::Default), &["another compilation", "weights id"]);
    let ids =
        |f: &[u8]| aotc_abi::weights_file::parse_header(f).unwrap().metadata[aotc_abi::weights_file::KEY_ID].clone();
    assert!(msg.contains(&ids(&own)) && msg.contains(&ids(&std::fs::read(&second).unwrap())), "{msg}");
    // ...but taken when named explicitly: same structure, other values.
    load(&so, Weights::File(beside.clone())).unwrap();
    std::fs::remove_file(&beside).unwrap();
    expect_weights_error(load(&so, Weights::Default), &["m.weights.safetensors", "beside itself"]);
    std::fs::write(&beside, &own).unwrap();
    load(&so, Weights::Default).unwrap();
}

#[test]
fn instances_share_one_mapping_of_the_file() {
    let dir = fixture("dynamic_batch_mlp");
    let tmp = tempfile::tempdir().unwrap();
    let so = tmp.path().join("shared.so");
    compile(&dir.join("model.pt2"), &so, None, WeightsPlacement::External, None);
    let file = tmp.path().join("shared.weights.safetensors");
    assert_eq!(mappings_of(&file), 0);
    let a = load(&so, Weights::Default).unwrap();
    assert_eq!(mappings_of(&file), 1);
    let b = load(&so, Weights::Default).unwrap();
    let mut c = load(&so, Weights::File(file.clone())).unwrap();
    assert_eq!(mappings_of(&file), 1, "three instances, one mapping");
    // A copy of the file is another file: its own mapping, which a swap takes and frees.
    let copy = tmp.path().join("copy.safetensors");
    std::fs::copy(&file, &copy).unwrap();
    c.load_weights(&copy).unwrap();
    assert_eq!((mappings_of(&file), mappings_of(&copy)), (1, 1));
    drop(a);
    drop(b);
    assert_eq!(mappings_of(&file), 0, "unmapped with the last instance that uses it");
    let (inputs, expected) = recorded(&dir, 0);
    check_call(&mut c, &inputs, &expected, tolerance(&dir), "from the copy");
    drop(c);
    assert_eq!(mappings_of(&copy), 0);
}

#[test]
fn a_library_of_another_abi_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let c = tmp.path().join("v99.c");
    std::fs::write(&c, "unsigned aotc_abi_version(void) { return 99; }\n").unwrap();
    let so = tmp.path().join("v99.so");
    let ok =
        std::process::Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&c).status().unwrap().success();
    assert!(ok, "cc");
    let e = Model::load(&so, Device::Cpu).err().expect("refused");
    assert!(
        e.message.contains("ABI version 99")
            && e.message.contains(&format!("speaks ABI version {}", aotc_abi::ABI_VERSION)),
        "{e}"
    );
}

/// The four weights calls straight through the C ABI: NULL arguments and bad lengths are
/// refused with a status and a message, never a crash; a NULL path means the library's own.
#[test]
fn the_c_calls_check_their_arguments() {
    use aotc_abi::{fn_types as ft, symbols};
    let dir = fixture("mlp_buffer_mutation");
    let tmp = tempfile::tempdir().unwrap();
    let so = tmp.path().join("c.so");
    compile(&dir.join("model.pt2"), &so, None, WeightsPlacement::External, None);
    let file = std::fs::read(tmp.path().join("c.weights.safetensors")).unwrap();
    // SAFETY: an aotc library; each symbol has the type aotc.h declares for it, and every
    // pointer passed below is NULL or valid for what the call reads.
    unsafe {
        let lib = libloading::Library::new(&so).unwrap();
        let create: ft::ModelCreateWeights = *lib.get(symbols::MODEL_CREATE_WEIGHTS.as_bytes()).unwrap();
        let create_bytes: ft::ModelCreateWeightsBytes =
            *lib.get(symbols::MODEL_CREATE_WEIGHTS_BYTES.as_bytes()).unwrap();
        let load: ft::LoadWeights = *lib.get(symbols::LOAD_WEIGHTS.as_bytes()).unwrap();
        let load_bytes: ft::LoadWeightsBytes = *lib.get(symbols::LOAD_WEIGHTS_BYTES.as_bytes()).unwrap();
        let destroy: ft::ModelDestroy = *lib.get(symbols::MODEL_DESTROY.as_bytes()).unwrap();
        let last_error: ft::LastError = *lib.get(symbols::LAST_ERROR.as_bytes()).unwrap();
        let message = || std::ffi::CStr::from_ptr(last_error()).to_string_lossy().into_owned();
        let mut m = std::ptr::null_mut();
        assert_eq!(create(c"cpu".as_ptr(), 1, std::ptr::null(), &mut m), status::OK, "{}", message());
        assert!(!m.is_null());
        assert_eq!(create(c"cpu".as_ptr(), 1, std::ptr::null(), std::ptr::null_mut()), status::INVALID_ARGUMENT);
        let mut n = std::ptr::null_mut();
        assert_eq!(create_bytes(c"cpu".as_ptr(), 1, std::ptr::null(), 10, &mut n), status::INVALID_ARGUMENT);
        assert!(message().contains("data is a null pointer"), "{}", message());
        assert_eq!(create_bytes(c"cpu".as_ptr(), 1, file.as_ptr().cast(), u64::MAX, &mut n), status::INVALID_ARGUMENT);
        assert_eq!(create_bytes(c"gpu".as_ptr(), 1, file.as_ptr().cast(), file.len() as u64, &mut n), status::DEVICE);
        assert_eq!(
            create_bytes(c"cpu".as_ptr(), 1, file.as_ptr().cast(), file.len() as u64, &mut n),
            status::OK,
            "{}",
            message()
        );
        assert_eq!(load(std::ptr::null_mut(), c"x".as_ptr()), status::INVALID_ARGUMENT);
        assert_eq!(load(m, std::ptr::null()), status::INVALID_ARGUMENT);
        assert!(message().contains("path is a null pointer"), "{}", message());
        assert_eq!(load_bytes(m, std::ptr::null(), 0), status::INVALID_ARGUMENT);
        assert_eq!(load_bytes(m, file.as_ptr().cast(), 7), status::WEIGHTS);
        assert!(message().contains("not a safetensors file"), "{}", message());
        assert_eq!(load_bytes(m, file.as_ptr().cast(), file.len() as u64), status::OK, "{}", message());
        destroy(m);
        destroy(n);
    }
}
