//! Kernel profiles of ordinary compiled libraries, through the loader and the raw C ABI:
//! one time per kernel, adding up to the call, each kernel named by the graph nodes it
//! computes, and the profiled calls still computing what PyTorch did.

use aotc_abi::manifest::Manifest;
use aotc_abi::{fn_types, status, symbols, AotcModel};
use aotc_runtime::{Device, Model};
use aotc_tests::{assert_close, compile, fixture, tolerance};
use std::collections::HashSet;
use std::ffi::CStr;
use std::path::Path;

/// Targets whose nodes compute nothing in aotc: views of memory, which change the index
/// map of their consumers, and clones of them.
const VIEWS: &[&str] = &[
    "view",
    "_unsafe_view",
    "permute",
    "expand",
    "t",
    "transpose",
    "unsqueeze",
    "squeeze",
    "select",
    "slice",
    "split",
    "split_with_sizes",
    "clone",
    "alias",
    "flip",
];

/// Profiles `calls` calls of fixture `name` on `threads` threads, checking each call's
/// outputs and the profile's totals; returns the manifest and the kernel times.
fn profile(name: &str, threads: usize, calls: u64) -> (Manifest, Vec<f64>) {
    let dir = fixture(name);
    let (_d, so) = compile(&dir.join("model.pt2"));
    let mut model = Model::load_with_threads(&so, Device::Cpu, threads).unwrap();
    let manifest: Manifest = serde_json::from_str(model.metadata_json()).unwrap();
    let inputs = aotc::tensor_io::read_inputs(&dir.join("inputs_0.safetensors"), model.inputs().len()).unwrap();
    let (expected, _) = aotc::tensor_io::read(&dir.join("expected_0.safetensors")).unwrap();
    let (rtol, atol) = tolerance(&dir);
    model.run(&mut inputs.clone()).unwrap();
    model.profile_enable(true).unwrap();
    for call in 0..calls {
        let outputs = model.run(&mut inputs.clone()).unwrap();
        for (k, want) in &expected {
            assert_close(
                &format!("{name}: profiled call {call}, output {k}"),
                want,
                &outputs[k.parse::<usize>().unwrap()],
                rtol,
                atol,
            );
        }
    }
    let p = model.profile_read().unwrap();
    assert_eq!(p.calls, calls);
    assert_eq!((p.kernel_ns.len(), model.kernel_count().unwrap()), (manifest.kernels.len(), manifest.kernels.len()));
    assert!(p.kernel_ns.iter().all(|&t| t >= 0.0) && p.kernel_ns.iter().any(|&t| t > 0.0), "{:?}", p.kernel_ns);
    // The kernels run inside the call; the rest of it is the library's own checks and
    // allocation, small next to these programs' work.
    let kernels: f64 = p.kernel_ns.iter().sum();
    assert!(kernels <= p.call_ns && kernels >= 0.5 * p.call_ns, "kernels {kernels} ns of {} ns", p.call_ns);

    // Off, calls no longer count; on again, the totals start from zero.
    model.profile_enable(false).unwrap();
    model.run(&mut inputs.clone()).unwrap();
    assert_eq!(model.profile_read().unwrap(), p);
    model.profile_enable(true).unwrap();
    let fresh = model.profile_read().unwrap();
    assert_eq!((fresh.calls, fresh.call_ns, fresh.kernel_ns.iter().sum::<f64>()), (0, 0.0, 0.0));
    (manifest, p.kernel_ns)
}

/// Every node of the graph that computes something is named by some kernel.
fn check_nodes_covered(name: &str, m: &Manifest) {
    let src = aotc::frontend::load(&fixture(name).join("model.pt2"), None).unwrap();
    let named: HashSet<&str> = m.kernels.iter().flat_map(|k| &k.nodes).map(|&n| m.nodes[n].name.as_str()).collect();
    let missing: Vec<&str> = src
        .program
        .graph_module
        .graph
        .nodes
        .iter()
        .filter(|n| {
            !aotc::lower::is_bookkeeping(&n.target) && !VIEWS.contains(&n.target.rsplit('.').nth(1).unwrap_or(""))
        })
        .map(|n| n.name.as_deref().unwrap())
        .filter(|n| !named.contains(n))
        .collect();
    assert!(missing.is_empty(), "{name}: no kernel names {missing:?}");
    assert!(m
        .kernels
        .iter()
        .all(|k| k.nodes.windows(2).all(|w| w[0] < w[1]) && k.nodes.iter().all(|&n| n < m.nodes.len())));
}

#[test]
fn small_cnn_profile_names_the_convolution_and_its_module() {
    let (m, times) = profile("small_cnn", 1, 3);
    check_nodes_covered("small_cnn", &m);
    // The convolutions are calls of the library's convolution, named by their node and module.
    let conv_gemm = m
        .kernels
        .iter()
        .position(|k| {
            k.kind == format!("extern {}", aotc_abi::conv::SYMBOL)
                && k.nodes.iter().any(|&n| m.nodes[n].name == "convolution")
        })
        .expect("a convolution call of node 'convolution'");
    let node = &m.nodes[m.kernels[conv_gemm].nodes[0]];
    assert_eq!(
        (node.target.as_str(), node.module.as_deref(), node.module_type.as_deref()),
        ("torch.ops.aten.convolution.default", Some("c1"), Some("Conv2d"))
    );
    assert!(times[conv_gemm] > 0.0);
    // Batch norm (into the weights) and relu (into the output pass) fold into the
    // convolution's call, which then names them too.
    let names =
        |k: &aotc_abi::manifest::KernelInfo| k.nodes.iter().map(|&n| m.nodes[n].name.as_str()).collect::<Vec<_>>();
    let conv = names(&m.kernels[conv_gemm]);
    assert!(conv.contains(&"_native_batch_norm_legit_no_training") && conv.contains(&"relu"), "{conv:?}");
}

#[test]
fn transformer_block_profile_covers_every_computing_node_on_two_threads() {
    let (m, _) = profile("transformer_block", 2, 3);
    check_nodes_covered("transformer_block", &m);
    // Softmax and layer norm are one library call each.
    for symbol in [aotc_abi::internal_symbols::SOFTMAX, aotc_abi::internal_symbols::LAYER_NORM] {
        assert!(m.kernels.iter().any(|k| k.kind == format!("extern {symbol}")), "no {symbol} call: {:?}", m.kernels);
    }
}

/// The profiling functions of the raw C ABI.
struct Raw {
    create: fn_types::ModelCreate,
    destroy: fn_types::ModelDestroy,
    last_error: fn_types::LastError,
    kernel_count: fn_types::Count,
    enable: fn_types::ProfileEnable,
    read: fn_types::ProfileRead,
    // Dropped last: the functions above point into it.
    _lib: libloading::Library,
}

impl Raw {
    fn load(so: &Path) -> Raw {
        fn get<T: Copy>(lib: &libloading::Library, name: &str) -> T {
            // SAFETY: each symbol has the type aotc.h declares for it.
            unsafe { *lib.get::<T>(name.as_bytes()).expect(name) }
        }
        // SAFETY: an aotc library; loading it runs no initialisers beyond libc's.
        let lib = unsafe { libloading::Library::new(so) }.expect("load");
        Raw {
            create: get(&lib, symbols::MODEL_CREATE),
            destroy: get(&lib, symbols::MODEL_DESTROY),
            last_error: get(&lib, symbols::LAST_ERROR),
            kernel_count: get(&lib, symbols::KERNEL_COUNT),
            enable: get(&lib, symbols::PROFILE_ENABLE),
            read: get(&lib, symbols::PROFILE_READ),
            _lib: lib,
        }
    }

    /// The status of a failing call and its message.
    fn fails(&self, rc: i32) -> (i32, String) {
        // SAFETY: aotc_last_error returns a valid C string.
        (rc, unsafe { CStr::from_ptr((self.last_error)()) }.to_string_lossy().into_owned())
    }
}

#[test]
fn profile_misuse_gets_a_status_and_a_message() {
    let (_d, so) = compile(&fixture("small_cnn").join("model.pt2"));
    let raw = Raw::load(&so);
    let mut m: *mut AotcModel = std::ptr::null_mut();
    // SAFETY: valid C string and out pointer.
    assert_eq!(unsafe { (raw.create)(c"cpu".as_ptr(), &mut m) }, status::OK);
    let null = std::ptr::null_mut();
    let (mut calls, mut call_ns) = (0i64, 0f64);
    // SAFETY: every pointer is valid or null, as each case says.
    unsafe {
        assert_eq!((raw.kernel_count)(null), -1);
        let n = (raw.kernel_count)(m);
        assert!(n > 0);
        let mut times = vec![-1.0f64; n as usize + 1];
        let bad = |what: &str, rc: i32, needle: &str| {
            let (code, message) = raw.fails(rc);
            assert_eq!(code, status::INVALID_ARGUMENT, "{what}: {message}");
            assert!(message.contains(needle), "{what}: {message:?} lacks {needle:?}");
        };
        bad("enable a null model", (raw.enable)(null, 1), "model is a null pointer");
        bad(
            "read a null model",
            (raw.read)(null, &mut calls, &mut call_ns, times.as_mut_ptr(), n),
            "model is a null pointer",
        );
        bad(
            "null calls",
            (raw.read)(m, std::ptr::null_mut(), &mut call_ns, times.as_mut_ptr(), n),
            "calls is a null pointer",
        );
        bad(
            "null call_ns",
            (raw.read)(m, &mut calls, std::ptr::null_mut(), times.as_mut_ptr(), n),
            "call_ns is a null pointer",
        );
        bad(
            "too small",
            (raw.read)(m, &mut calls, &mut call_ns, times.as_mut_ptr(), n - 1),
            &format!("room for {} kernels; the program has {n}", n - 1),
        );
        bad("negative count", (raw.read)(m, &mut calls, &mut call_ns, times.as_mut_ptr(), -1), "room for -1 kernels");
        bad(
            "null kernel_ns",
            (raw.read)(m, &mut calls, &mut call_ns, std::ptr::null_mut(), n),
            "kernel_ns is a null pointer",
        );
        assert_eq!(times, vec![-1.0; n as usize + 1], "a refused read writes nothing");
        // A larger array is fine: the first n entries are written (zeros: nothing ran yet).
        assert_eq!((raw.enable)(m, 1), status::OK);
        assert_eq!((raw.read)(m, &mut calls, &mut call_ns, times.as_mut_ptr(), n + 1), status::OK);
        assert_eq!(
            (calls, call_ns, &times[..n as usize], times[n as usize]),
            (0, 0.0, &vec![0.0; n as usize][..], -1.0)
        );
        (raw.destroy)(m);
    }
}
