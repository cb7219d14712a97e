//! Hot reload (README "Replacing a model while it serves"): threads call the model in
//! service without pause while another thread swaps new library versions in; every call
//! succeeds and gives the outputs of the version that served it, and each old version
//! is unloaded once its last call is done.

use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{check_call, compile, fixture, recorded, tolerance};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// One version in service: an instance per serving thread (an instance serves one call
/// at a time), all of one library file.
struct Served {
    version: usize,
    instances: Vec<Mutex<Model>>,
}

impl Served {
    fn load(version: usize, library: &Path, servers: usize) -> Served {
        let instances = (0..servers)
            .map(|_| Mutex::new(Model::load_with_threads(library, Device::Cpu, 2).expect("load")))
            .collect();
        Served { version, instances }
    }
}

/// What a version must answer: its inputs and PyTorch's outputs.
struct Expected {
    inputs: Vec<Value>,
    outputs: Vec<(String, Tensor)>,
    tolerance: (f64, f64),
}

fn still_loaded(path: &Path) -> bool {
    // SAFETY: RTLD_NOLOAD only finds a library already loaded (the drop gives it back).
    unsafe { libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_NOLOAD) }.is_ok()
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Waits until `done` (failing after a minute: a server that panicked stops calling).
fn wait_for(done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed().as_secs() < 60, "no progress for a minute (did a server fail?)");
        std::thread::yield_now();
    }
}

#[test]
fn threads_keep_calling_while_new_versions_are_swapped_in() {
    const SERVERS: usize = 3;
    const VERSIONS: usize = 8;
    // Two different models take turns as versions (distinct outputs), each version its
    // own file: a new library for the loader, as a new build of a model would be.
    let models: Vec<(PathBuf, Expected, tempfile::TempDir)> = ["dynamic_batch_mlp", "small_cnn"]
        .iter()
        .map(|name| {
            let dir = fixture(name);
            let (inputs, outputs) = recorded(&dir, 0);
            let (tmp, so) = compile(&dir.join("model.pt2"));
            (so, Expected { inputs, outputs, tolerance: tolerance(&dir) }, tmp)
        })
        .collect();
    let versions = tempfile::tempdir().expect("temporary directory");
    let library = |v: usize| versions.path().join(format!("model_v{v}.so"));
    for v in 0..VERSIONS {
        std::fs::copy(&models[v % 2].0, library(v)).expect("copy");
    }

    let current = RwLock::new(Arc::new(Served::load(0, &library(0), SERVERS)));
    let stop = AtomicBool::new(false);
    let calls: Vec<AtomicUsize> = (0..VERSIONS).map(|_| AtomicUsize::new(0)).collect();
    std::thread::scope(|s| {
        for server in 0..SERVERS {
            let (current, stop, calls, models) = (&current, &stop, &calls, &models);
            s.spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    // Take the version in service (a clone of the Arc: the read lock is
                    // held only for that), then call it without any lock but its instance's.
                    let served = current.read().unwrap().clone();
                    let want = &models[served.version % 2].1;
                    let mut model = served.instances[server].lock().unwrap();
                    let what = format!("server {server}, version {}", served.version);
                    check_call(&mut model, &want.inputs, &want.outputs, want.tolerance, &what);
                    calls[served.version].fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // The servers stop when the swapping ends, however it ends (a failed check too).
        let _stop = StopOnDrop(&stop);
        for v in 1..VERSIONS {
            // Let every server call the version in service a few times.
            wait_for(|| calls[v - 1].load(Ordering::Relaxed) >= 3 * SERVERS);
            // Loaded (and checked) before it serves: a version that fails to load never
            // replaces the one in service.
            let next = Arc::new(Served::load(v, &library(v), SERVERS));
            let old = std::mem::replace(&mut *current.write().unwrap(), next);
            // The old version drains: the calls that took it finish, then the last clone
            // of its Arc goes (on whichever thread held it) and its library unloads.
            wait_for(|| Arc::strong_count(&old) == 1);
            drop(old);
            assert!(!still_loaded(&library(v - 1)), "version {} still loaded after it drained", v - 1);
        }
        wait_for(|| calls[VERSIONS - 1].load(Ordering::Relaxed) >= 3 * SERVERS);
    });
    let calls: Vec<usize> = calls.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    eprintln!("calls per version: {calls:?}");
    assert!(calls.iter().all(|&c| c >= 3 * SERVERS), "every version served: {calls:?}");
}
