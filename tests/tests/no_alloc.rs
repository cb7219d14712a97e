//! A call in steady state allocates no heap memory: the instance keeps every buffer a
//! call needs (arena, slot table, checked descriptors, the kernels' packing buffers)
//! from one call to the next.
//!
//! This test binary interposes `malloc` and its kin (the compiled library's calls bind to
//! the executable's definitions first) and counts them, on every thread, while a call of
//! the C ABI runs. It holds a single test so that no other test's allocations count.

use aotc_runtime::{AotcTensor, Device, Model, Tensor, Value};
use aotc_tests::{compile, fixture, recorded};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
}

fn count() {
    if COUNTING.load(Ordering::Relaxed) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY (all four): glibc's own entry points under their internal names, with the same
// contracts; `free` stays glibc's, which takes memory from any of them.

/// # Safety
/// C's `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    count();
    unsafe { __libc_malloc(size) }
}

/// # Safety
/// C's `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    count();
    unsafe { __libc_calloc(n, size) }
}

/// # Safety
/// C's `realloc`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    count();
    unsafe { __libc_realloc(p, size) }
}

/// # Safety
/// C's `posix_memalign`: `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    count();
    let p = unsafe { __libc_memalign(align, size) };
    if p.is_null() {
        return 12; // ENOMEM
    }
    // SAFETY: `out` is the caller's pointer to write the result to.
    unsafe { *out = p };
    0
}

/// Allocations made (on any thread) while `f` runs.
fn allocations_during(f: impl FnOnce()) -> usize {
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    f();
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCATIONS.load(Ordering::SeqCst)
}

fn tensors(inputs: Vec<Value>) -> Vec<Tensor> {
    inputs
        .into_iter()
        .map(|v| match v {
            Value::Tensor(t) => t,
            other => panic!("these fixtures take tensors only, got {other:?}"),
        })
        .collect()
}

#[test]
fn steady_calls_allocate_nothing() {
    // The counter itself must see the library's allocations: the first call of a fresh
    // instance allocates its arena.
    let dir = fixture("mlp_buffer_mutation");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut model = Model::load_with_threads(&so, Device::Cpu, 1).expect("load");
    let mut inputs = tensors(recorded(&dir, 0).0);
    let raw: Vec<AotcTensor> = inputs.iter_mut().map(Tensor::as_raw).collect();
    // SAFETY: the descriptors point at the tensors, alive and unused elsewhere meanwhile.
    let first = allocations_during(|| drop(unsafe { model.run_descriptors(&raw) }.expect("first call")));
    assert!(first > 0, "the interposed malloc sees no allocation of a first call: the test cannot see any");

    // State, dynamic sizes, attention, convolutions (Winograd, columns, pooled,
    // depthwise), max pools, large GEMMs.
    for name in [
        "mlp_buffer_mutation",
        "dynamic_batch_mlp",
        "transformer_block",
        "small_cnn",
        "bench_convnet",
        "models/shufflenet_v2_x0_5",
        "models/efficientnet_b0_w040",
        "bench_mlp_slim",
    ] {
        let dir = fixture(name);
        let (_tmp, so) = compile(&dir.join("model.pt2"));
        for threads in [1, 2] {
            let mut model = Model::load_with_threads(&so, Device::Cpu, threads).expect("load");
            let mut inputs = tensors(recorded(&dir, 0).0);
            let shapes = model
                .output_shapes(&mut inputs.iter().cloned().map(Value::Tensor).collect::<Vec<_>>())
                .expect("output shapes");
            let mut outputs: Vec<Tensor> = model
                .outputs()
                .iter()
                .zip(&shapes)
                .map(|(info, s)| Tensor::zeros(info.dtype.expect("dtype"), s))
                .collect();
            let raw: Vec<AotcTensor> = inputs.iter_mut().map(Tensor::as_raw).collect();
            let raw_out: Vec<AotcTensor> = outputs.iter_mut().map(Tensor::as_raw).collect();
            let mut described = vec![raw_out[0]; raw_out.len()];
            let what = format!("{name} on {threads} thread(s)");
            // SAFETY (all calls): the descriptors point at the tensors above, alive and
            // not otherwise used until the calls return.
            let mut run = || unsafe {
                model.run_into_raw(&raw, &raw_out).expect("run_into");
                model.run_descriptors_into(&raw, &mut described).expect("aotc_run");
            };
            for _ in 0..10 {
                run();
            }
            let n = allocations_during(|| {
                for _ in 0..20 {
                    run()
                }
            });
            assert_eq!(n, 0, "{what}: 20 steady calls of aotc_run_into and aotc_run allocated {n} times");
        }
    }
}
