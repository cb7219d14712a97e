//! The C ABI of compiled libraries: error reporting, checks, state, and what the `.so`
//! links against and exports.

use aotc_abi::{status, AotcModel, AotcTensor, DLDevice, DType};
use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{compile, fixture};
use std::ffi::CStr;
use std::process::Command;

fn ones(shape: &[i64]) -> Value {
    let n = shape.iter().product::<i64>() as usize;
    Value::Tensor(Tensor::from_f32(shape, &vec![1.0; n]))
}

fn dynamic_mlp() -> (tempfile::TempDir, Model) {
    let (dir, so) = compile(&fixture("dynamic_batch_mlp").join("model.pt2"));
    let model = Model::load(&so, Device::Cpu).expect("load");
    (dir, model)
}

#[test]
fn metadata_reports_dynamic_dims_with_ranges() {
    let (_d, m) = dynamic_mlp();
    let x = &m.inputs()[0];
    assert_eq!((x.name.as_str(), x.dtype, x.sizes.as_slice()), ("x", Some(DType::F32), &[-1, 8][..]));
    assert_eq!((x.dim_min[0], x.dim_max[0]), (1, 1024));
    assert_eq!(m.outputs()[0].sizes, vec![-1, 4]);
    assert!(m.in_spec().starts_with("[1, {\"type\": \"builtins.tuple\""));
}

#[test]
fn run_time_checks_give_status_and_message() {
    let (_d, mut m) = dynamic_mlp();
    let cases: Vec<(Vec<Value>, i32, &str)> = vec![
        (vec![], status::INPUT_COUNT, "expected 1 inputs (x), got 0"),
        (vec![Value::Tensor(Tensor::zeros(DType::F64, &[2, 8]))], status::DTYPE, "input 0 ('x'): expected dtype float32, got float64"),
        (vec![ones(&[2, 8, 1])], status::RANK, "expected rank 2"),
        (vec![ones(&[2, 9])], status::SHAPE, "dimension 1 is 9, expected 8"),
        (vec![ones(&[1025, 8])], status::RANGE, "dimension 0 is 1025, outside the range [1, 1024] of dynamic dimension s77"),
        (vec![ones(&[0, 8])], status::RANGE, "outside the range [1, 1024]"),
    ];
    for (mut inputs, code, msg) in cases {
        let e = m.run(&mut inputs).expect_err(msg);
        assert_eq!(e.code, code, "{}", e.message);
        assert!(e.message.contains(msg), "message {:?} lacks {msg:?}", e.message);
    }
    // The instance still works after errors, and every batch size in range is served.
    for b in [1, 5, 1024] {
        let out = m.run(&mut [ones(&[b, 8])]).expect("in range");
        assert_eq!(out[0].shape, vec![b, 4]);
    }
}

#[test]
fn specialised_scalar_input_is_checked() {
    let (_d, so) = compile(&fixture("pytree_io").join("model.pt2"));
    let mut m = Model::load(&so, Device::Cpu).unwrap();
    let e = m.run(&mut [ones(&[2, 4]), ones(&[2, 4]), Value::Float(2.0)]).unwrap_err();
    assert_eq!(e.code, status::CONSTANT);
    assert!(e.message.contains("specialised this input to 3; got 2"), "{}", e.message);
    m.run(&mut [ones(&[2, 4]), ones(&[2, 4]), Value::Float(3.0)]).expect("the exported value");
}

#[test]
fn instances_do_not_share_state_and_buffers_are_readable_and_writable() {
    let (_d, so) = compile(&fixture("mlp_buffer_mutation").join("model.pt2"));
    let mut a = Model::load(&so, Device::Cpu).unwrap();
    let mut b = Model::load(&so, Device::Cpu).unwrap();
    let calls = |m: &Model| m.read_buffer("calls").unwrap().to_f64_vec();
    assert_eq!(calls(&a), vec![0.0]);
    a.run(&mut [ones(&[4, 16])]).unwrap();
    a.run(&mut [ones(&[4, 16])]).unwrap();
    b.run(&mut [ones(&[4, 16])]).unwrap();
    assert_eq!((calls(&a), calls(&b)), (vec![2.0], vec![1.0]));
    // The output is softmax * calls: overwrite the state and the next call sees it.
    b.write_buffer("calls", &Tensor::from_f32(&[1], &[9.0])).unwrap();
    let out = b.run(&mut [ones(&[4, 16])]).unwrap()[0].to_f64_vec();
    let row_sum: f64 = out[..10].iter().sum();
    assert!((row_sum - 10.0).abs() < 1e-4, "softmax rows sum to calls = 10, got {row_sum}");
    let e = b.write_buffer("calls", &Tensor::from_f32(&[2], &[1.0, 2.0])).unwrap_err();
    assert_eq!(e.code, status::SHAPE);
    assert_eq!(b.read_buffer("nope").unwrap_err().code, status::NOT_FOUND);
}

#[test]
fn wrong_device_is_refused() {
    let (_d, so) = compile(&fixture("pytree_io").join("model.pt2"));
    let e = Model::load(&so, Device::Cuda(0)).err().expect("a CPU build refuses cuda");
    assert_eq!(e.code, status::DEVICE);
    assert!(e.message.contains("compiled for device \"cpu\""), "{}", e.message);
}

type Run = unsafe extern "C" fn(*mut AotcModel, *const AotcTensor, i64, *mut AotcTensor, i64) -> i32;
type Create = unsafe extern "C" fn(*const std::ffi::c_char, *mut *mut AotcModel) -> i32;
type LastError = unsafe extern "C" fn() -> *const std::ffi::c_char;

/// Calls the raw C functions: null pointers and a transposed (non-contiguous) input.
#[test]
fn raw_abi_null_pointers_and_strided_inputs() {
    let (_d, so) = compile(&fixture("dynamic_batch_mlp").join("model.pt2"));
    // SAFETY: the library is an aotc library; the symbol types are those of aotc.h.
    unsafe {
        let lib = libloading::Library::new(&so).unwrap();
        let create: libloading::Symbol<Create> = lib.get(b"aotc_model_create").unwrap();
        let run: libloading::Symbol<Run> = lib.get(b"aotc_run").unwrap();
        let last: libloading::Symbol<LastError> = lib.get(b"aotc_last_error").unwrap();
        let msg = || CStr::from_ptr(last()).to_string_lossy().into_owned();
        assert_eq!(create(std::ptr::null(), std::ptr::null_mut()), status::INVALID_ARGUMENT);
        assert_eq!(msg(), "out is a null pointer");
        let mut m = std::ptr::null_mut();
        assert_eq!(create(c"gpu".as_ptr(), &mut m), status::DEVICE);
        assert_eq!(create(c"cpu".as_ptr(), &mut m), status::OK);
        assert_eq!(run(std::ptr::null_mut(), std::ptr::null(), 0, std::ptr::null_mut(), 0), status::INVALID_ARGUMENT);
        assert_eq!(run(m, std::ptr::null(), 1, std::ptr::null_mut(), 1), status::INVALID_ARGUMENT);

        // x = values laid out as an (8, 3) buffer, passed as its (3, 8) transpose.
        let values: Vec<f32> = (0..24).map(|i| i as f32 * 0.1).collect();
        let mut shape = [3i64, 8];
        let mut strides = [1i64, 3];
        let cpu = DLDevice { device_type: 1, device_id: 0 };
        let mut x = AotcTensor { data: values.as_ptr() as *mut _, device: cpu, ndim: 2, dtype: DType::F32.to_dlpack(), shape: shape.as_mut_ptr(), strides: strides.as_mut_ptr(), byte_offset: 0 };
        let mut out = [AotcTensor { data: std::ptr::null_mut(), device: cpu, ndim: 0, dtype: DType::F32.to_dlpack(), shape: std::ptr::null_mut(), strides: std::ptr::null_mut(), byte_offset: 0 }];
        assert_eq!(run(m, &x, 1, out.as_mut_ptr(), 1), status::OK, "{}", msg());
        let strided: Vec<f32> = std::slice::from_raw_parts(out[0].data as *const f32, 12).to_vec();
        // The same logical tensor, contiguous.
        let contiguous: Vec<f32> = (0..3).flat_map(|r| (0..8).map(move |c| (r + 3 * c) as f32 * 0.1)).collect();
        let mut cstrides = [8i64, 1];
        x.data = contiguous.as_ptr() as *mut _;
        x.strides = cstrides.as_mut_ptr();
        assert_eq!(run(m, &x, 1, out.as_mut_ptr(), 1), status::OK);
        let dense: Vec<f32> = std::slice::from_raw_parts(out[0].data as *const f32, 12).to_vec();
        assert_eq!(strided, dense);
        let destroy: libloading::Symbol<unsafe extern "C" fn(*mut AotcModel)> = lib.get(b"aotc_model_destroy").unwrap();
        destroy(m);
    }
}

fn readelf(args: &[&str], so: &std::path::Path) -> String {
    let out = Command::new("readelf").args(args).arg(so).output().expect("readelf (binutils) is installed");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn library_needs_only_libc_and_exports_only_the_abi() {
    let (_d, so) = compile(&fixture("mlp_buffer_mutation").join("model.pt2"));
    let dynamic = readelf(&["-d", "-W"], &so);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).map(|l| l.rsplit('[').next().unwrap().trim_end_matches(']')).collect();
    // glibc's dynamic loader provides __tls_get_addr; it is part of libc on every system.
    let allowed = ["libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "ld-linux-x86-64.so.2"];
    assert!(needed.iter().all(|n| allowed.contains(n)), "unexpected NEEDED entries: {needed:?}");
    assert!(!dynamic.contains("TEXTREL"), "text relocations");
    let syms = readelf(&["--dyn-syms", "-W"], &so);
    let mut exported: Vec<String> = syms.lines().map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 8 && f[4] == "GLOBAL" && f[6] != "UND" && f[3] == "FUNC")
        .map(|f| f[7].split('@').next().unwrap().to_string()).collect();
    exported.sort();
    let mut want: Vec<String> = aotc_abi::symbols::ALL.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(exported, want);
}
