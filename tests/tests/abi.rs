//! The C ABI of compiled libraries: error reporting, checks, state, and what the `.so`
//! links against and exports.

use aotc_abi::{fn_types, status, symbols, AotcModel, AotcTensor, DLDevice, DType};
use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{compile, fixture};
use std::ffi::CStr;
use std::path::Path;
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
        (
            vec![Value::Tensor(Tensor::zeros(DType::F64, &[2, 8]))],
            status::DTYPE,
            "input 0 ('x'): expected dtype float32, got float64",
        ),
        (vec![ones(&[2, 8, 1])], status::RANK, "expected rank 2"),
        (vec![ones(&[2, 9])], status::SHAPE, "dimension 1 is 9, expected 8"),
        (
            vec![ones(&[1025, 8])],
            status::RANGE,
            "dimension 0 is 1025, outside the range [1, 1024] of dynamic dimension s77",
        ),
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
    assert!(e.message.contains("this library was compiled for the CPU; got \"cuda:0\": compile the model with `aotc compile --device cuda`"), "{}", e.message);
}

/// The raw C functions of a compiled library, for calls the Rust API never makes.
struct Raw {
    create: fn_types::ModelCreate,
    destroy: fn_types::ModelDestroy,
    run: fn_types::Run,
    last_error: fn_types::LastError,
    buffer_read: fn_types::BufferRead,
    buffer_write: fn_types::BufferWrite,
    // Dropped last: the functions above point into it.
    _lib: libloading::Library,
}

impl Raw {
    fn load(so: &Path) -> Raw {
        // SAFETY: an aotc library; each symbol has the type aotc.h declares for it.
        unsafe {
            let lib = libloading::Library::new(so).expect("load");
            fn get<T: Copy>(lib: &libloading::Library, name: &str) -> T {
                // SAFETY: as above.
                unsafe { *lib.get::<T>(name.as_bytes()).expect(name) }
            }
            Raw {
                create: get(&lib, symbols::MODEL_CREATE),
                destroy: get(&lib, symbols::MODEL_DESTROY),
                run: get(&lib, symbols::RUN),
                last_error: get(&lib, symbols::LAST_ERROR),
                buffer_read: get(&lib, symbols::BUFFER_READ),
                buffer_write: get(&lib, symbols::BUFFER_WRITE),
                _lib: lib,
            }
        }
    }

    fn instance(&self) -> *mut AotcModel {
        let mut m = std::ptr::null_mut();
        // SAFETY: valid C string and out pointer.
        assert_eq!(unsafe { (self.create)(c"cpu".as_ptr(), &mut m) }, status::OK);
        m
    }

    fn message(&self) -> String {
        // SAFETY: aotc_last_error returns a valid C string.
        unsafe { CStr::from_ptr((self.last_error)()) }.to_string_lossy().into_owned()
    }

    /// aotc_run; outputs are placeholders the call fills.
    fn run(&self, m: *mut AotcModel, inputs: &[AotcTensor], n_outputs: usize) -> (i32, Vec<AotcTensor>) {
        let mut outs = vec![tensor(std::ptr::null_mut(), &mut [], DType::F32); n_outputs];
        // SAFETY: arrays of the stated lengths; the tensors describe live memory (or are
        // the malformed descriptors under test, which the library must refuse unread).
        let rc = unsafe { (self.run)(m, inputs.as_ptr(), inputs.len() as i64, outs.as_mut_ptr(), outs.len() as i64) };
        (rc, outs)
    }

    /// Expects `rc` to be the status `code` with a message containing `text`.
    fn expect_error(&self, rc: i32, code: i32, text: &str) {
        let msg = self.message();
        assert_eq!((rc, status::name(rc)), (code, status::name(code)), "{msg}");
        assert!(msg.contains(text), "message {msg:?} lacks {text:?}");
    }
}

const CPU: DLDevice = DLDevice { device_type: 1, device_id: 0 };

/// A contiguous CPU tensor over `data`; shape points to `shape` (ndim = its length).
fn tensor(data: *mut std::ffi::c_void, shape: &mut [i64], dtype: DType) -> AotcTensor {
    AotcTensor {
        data,
        device: CPU,
        ndim: shape.len() as i32,
        dtype: dtype.to_dlpack(),
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

/// The f32 elements of a contiguous output.
fn f32s(t: &AotcTensor, n: usize) -> Vec<f32> {
    // SAFETY: a successful call's output holds its shape's elements, contiguous.
    unsafe { std::slice::from_raw_parts(t.data as *const f32, n) }.to_vec()
}

/// Calls the raw C functions: null pointers and a transposed (non-contiguous) input.
#[test]
fn raw_abi_null_pointers_and_strided_inputs() {
    let (_d, so) = compile(&fixture("dynamic_batch_mlp").join("model.pt2"));
    let raw = Raw::load(&so);
    // SAFETY: null and valid pointers as the cases need; the library checks them.
    unsafe {
        assert_eq!((raw.create)(std::ptr::null(), std::ptr::null_mut()), status::INVALID_ARGUMENT);
        assert_eq!(raw.message(), "out is a null pointer");
        let mut m = std::ptr::null_mut();
        assert_eq!((raw.create)(c"gpu".as_ptr(), &mut m), status::DEVICE);
        assert_eq!(
            (raw.run)(std::ptr::null_mut(), std::ptr::null(), 0, std::ptr::null_mut(), 0),
            status::INVALID_ARGUMENT
        );
    }
    let m = raw.instance();
    // SAFETY: null arrays with non-zero counts, which the library refuses.
    assert_eq!(unsafe { (raw.run)(m, std::ptr::null(), 1, std::ptr::null_mut(), 1) }, status::INVALID_ARGUMENT);

    // x = values laid out as an (8, 3) buffer, passed as its (3, 8) transpose.
    let mut values: Vec<f32> = (0..24).map(|i| i as f32 * 0.1).collect();
    let mut shape = [3i64, 8];
    let mut strides = [1i64, 3];
    let mut x = tensor(values.as_mut_ptr().cast(), &mut shape, DType::F32);
    x.strides = strides.as_mut_ptr();
    let (rc, out) = raw.run(m, &[x], 1);
    assert_eq!(rc, status::OK, "{}", raw.message());
    let strided = f32s(&out[0], 12);
    // The same logical tensor, contiguous.
    let mut contiguous: Vec<f32> = (0..3).flat_map(|r| (0..8).map(move |c| (r + 3 * c) as f32 * 0.1)).collect();
    let mut cstrides = [8i64, 1];
    x.data = contiguous.as_mut_ptr().cast();
    x.strides = cstrides.as_mut_ptr();
    let (rc, out) = raw.run(m, &[x], 1);
    assert_eq!(rc, status::OK);
    assert_eq!(strided, f32s(&out[0], 12));
    // SAFETY: created above, destroyed once.
    unsafe { (raw.destroy)(m) };
}

/// `ndim` is checked before `shape` is read: a huge or negative rank, or one that does
/// not match the shape array, is refused without reading past the array.
#[test]
fn absurd_ndim_is_refused_before_the_shape_is_read() {
    let (_d, so) = compile(&fixture("dynamic_batch_mlp").join("model.pt2"));
    let raw = Raw::load(&so);
    let m = raw.instance();
    let mut data = vec![0f32; 16];
    let mut shape = [2i64, 8];
    for (ndim, got) in [
        (1 << 30, "got rank 1073741824"),
        (i32::MAX, "got rank 2147483647"),
        (-1, "got rank -1"),
        (3, "got rank 3"),
        (1, "got rank 1"),
    ] {
        let mut x = tensor(data.as_mut_ptr().cast(), &mut shape, DType::F32);
        x.ndim = ndim;
        let (rc, _) = raw.run(m, &[x], 1);
        raw.expect_error(rc, status::RANK, &format!("input 0 ('x'): expected rank 2 (shape [s77, 8]), {got}"));
    }
    let x = tensor(data.as_mut_ptr().cast(), &mut shape, DType::F32);
    assert_eq!(raw.run(m, &[x], 1).0, status::OK, "the instance still works: {}", raw.message());
    // SAFETY: created above, destroyed once.
    unsafe { (raw.destroy)(m) };

    // The same for a buffer's descriptor.
    let (_d, so) = compile(&fixture("mlp_buffer_mutation").join("model.pt2"));
    let raw = Raw::load(&so);
    let m = raw.instance();
    let mut value = [0f32; 1];
    let mut shape = [1i64];
    let mut t = tensor(value.as_mut_ptr().cast(), &mut shape, DType::F32);
    t.ndim = 1 << 30;
    // SAFETY: a valid name and a descriptor the library must refuse unread.
    let rc = unsafe { (raw.buffer_read)(m, c"calls".as_ptr(), &t) };
    raw.expect_error(rc, status::RANK, "buffer 'calls': expected rank 1 (shape [1]), got rank 1073741824");
    // SAFETY: as above.
    let rc = unsafe { (raw.buffer_write)(m, c"calls".as_ptr(), &t) };
    raw.expect_error(rc, status::RANK, "got rank 1073741824");
    // SAFETY: created above, destroyed once.
    unsafe { (raw.destroy)(m) };
}

/// Strides and byte offsets are legal DLPack as long as the memory they reach can be
/// addressed: a view whose extent overflows is refused, a reversed view is served.
#[test]
fn strides_and_byte_offsets_that_overflow_are_refused() {
    let (_d, so) = compile(&fixture("dynamic_batch_mlp").join("model.pt2"));
    let raw = Raw::load(&so);
    let m = raw.instance();
    let mut data: Vec<f32> = (0..16).map(|i| i as f32 * 0.25).collect();
    let mut shape = [2i64, 8];
    let cases: [([i64; 2], u64); 6] = [
        ([i64::MAX, 1], 0),
        ([8, i64::MIN], 0),
        ([i64::MAX / 2 + 1, 1], 0),
        ([8, 1], u64::MAX),
        ([8, 1], i64::MAX as u64),
        ([-(1 << 62), 1], 0),
    ];
    for (mut strides, byte_offset) in cases {
        let mut x = tensor(data.as_mut_ptr().cast(), &mut shape, DType::F32);
        x.strides = strides.as_mut_ptr();
        x.byte_offset = byte_offset;
        let (rc, _) = raw.run(m, &[x], 1);
        raw.expect_error(rc, status::INVALID_ARGUMENT, "input 0 ('x'): ");
        let msg = raw.message();
        assert!(msg.contains("overflow") || msg.contains("address space"), "{strides:?} {byte_offset}: {msg}");
    }
    // Rows in reverse: data points at the last row, which negative strides walk back from.
    let mut strides = [-8i64, 1];
    let mut x = tensor(data.as_mut_ptr().cast(), &mut shape, DType::F32);
    x.strides = strides.as_mut_ptr();
    x.byte_offset = 8 * 4;
    let (rc, out) = raw.run(m, &[x], 1);
    assert_eq!(rc, status::OK, "{}", raw.message());
    let reversed = f32s(&out[0], 8);
    let mut flipped: Vec<f32> = data[8..].iter().chain(&data[..8]).copied().collect();
    let (rc, out) = raw.run(m, &[tensor(flipped.as_mut_ptr().cast(), &mut shape, DType::F32)], 1);
    assert_eq!(rc, status::OK);
    assert_eq!(reversed, f32s(&out[0], 8));
    // SAFETY: created above, destroyed once.
    unsafe { (raw.destroy)(m) };
}

/// How `feed_back`'s second call gets its inputs from the first call's output.
#[derive(Clone, Copy)]
enum Feed {
    /// x is the output itself (memory the instance owns); y a tensor of the caller's.
    Output,
    /// x is a fresh copy of the output.
    Copy,
    /// x and y are both the output itself.
    OutputTwice,
    /// x and y are both one fresh copy.
    CopyTwice,
}

/// What `feed_back` saw: the first output, the second output, and after the second call
/// the memory fed as x, and the other y.
#[derive(Debug, PartialEq)]
struct FedBack {
    first: Vec<f32>,
    second: Vec<f32>,
    x_after: Vec<f32>,
    y_after: Vec<f32>,
}

/// user_input_mutation (out = f(x, y); x and y are mutated): two calls on a fresh
/// instance, the second taking the first's output back as `feed` says.
fn feed_back(raw: &Raw, feed: Feed) -> FedBack {
    let m = raw.instance();
    let mut shape = [3i64, 4];
    let mut x0: Vec<f32> = (0..12).map(|i| i as f32 - 3.5).collect();
    let mut y0: Vec<f32> = (0..12).map(|i| (i * i) as f32 * 0.125).collect();
    let (rc, out) = raw.run(
        m,
        &[
            tensor(x0.as_mut_ptr().cast(), &mut shape, DType::F32),
            tensor(y0.as_mut_ptr().cast(), &mut shape, DType::F32),
        ],
        1,
    );
    assert_eq!(rc, status::OK, "{}", raw.message());
    let first = f32s(&out[0], 12);
    let mut copy = first.clone();
    let mut y: Vec<f32> = (0..12).map(|i| 1.0 - i as f32 * 0.5).collect();
    let x = match feed {
        Feed::Output | Feed::OutputTwice => out[0].data,
        Feed::Copy | Feed::CopyTwice => copy.as_mut_ptr().cast(),
    };
    let y_data = if matches!(feed, Feed::OutputTwice | Feed::CopyTwice) { x } else { y.as_mut_ptr().cast() };
    let (rc, second) = raw.run(m, &[tensor(x, &mut shape, DType::F32), tensor(y_data, &mut shape, DType::F32)], 1);
    assert_eq!(rc, status::OK, "{}", raw.message());
    let seen =
        FedBack { first, second: f32s(&second[0], 12), x_after: f32s(&tensor(x, &mut [], DType::F32), 12), y_after: y };
    // SAFETY: created above, destroyed once.
    unsafe { (raw.destroy)(m) };
    seen
}

/// An output passed back as an input the program mutates is a value like any other: the
/// call computes what it computes on a fresh copy of it, and the mutation lands in the
/// caller's tensor (the output's memory), not in the new output.
#[test]
fn an_output_passed_back_as_a_mutated_input_computes_as_a_copy_would() {
    let (_d, so) = compile(&fixture("user_input_mutation").join("model.pt2"));
    let raw = Raw::load(&so);
    let fed = feed_back(&raw, Feed::Output);
    assert_eq!(fed, feed_back(&raw, Feed::Copy));
    assert_ne!(fed.x_after, fed.first, "x was mutated in place");
    // x and y alias each other: the mutations are written back in input order.
    let fed = feed_back(&raw, Feed::OutputTwice);
    assert_eq!(fed, feed_back(&raw, Feed::CopyTwice));
}

/// `aotc run model.so`: a bare file name is the file in the current directory (dlopen
/// alone would search the library path). Checked in a child process, which gets its own
/// current directory.
#[test]
fn a_bare_file_name_loads_from_the_current_directory() {
    let (dir, _so) = compile(&fixture("pytree_io").join("model.pt2"));
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "load_model_so_by_bare_name", "--ignored", "--nocapture"])
        .current_dir(dir.path())
        .output()
        .expect("run the test binary");
    let out = String::from_utf8_lossy(&child.stdout).into_owned() + &String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success() && out.contains("1 passed"), "{out}");
}

#[test]
#[ignore = "run by a_bare_file_name_loads_from_the_current_directory, in a directory holding model.so"]
fn load_model_so_by_bare_name() {
    let m = Model::load("model.so", Device::Cpu).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.inputs().len(), 3);
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
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .map(|l| l.rsplit('[').next().unwrap().trim_end_matches(']'))
        .collect();
    // glibc's dynamic loader provides __tls_get_addr; it is part of libc on every system.
    let allowed = ["libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "ld-linux-x86-64.so.2"];
    assert!(needed.iter().all(|n| allowed.contains(n)), "unexpected NEEDED entries: {needed:?}");
    assert!(!dynamic.contains("TEXTREL"), "text relocations");
    let syms = readelf(&["--dyn-syms", "-W"], &so);
    let mut exported: Vec<String> = syms
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 8 && f[4] == "GLOBAL" && f[6] != "UND" && f[3] == "FUNC")
        .map(|f| f[7].split('@').next().unwrap().to_string())
        .collect();
    exported.sort();
    let mut want: Vec<String> = aotc_abi::symbols::ALL.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(exported, want);
}
