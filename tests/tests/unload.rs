//! Unloading: a library whose last instance is gone leaves nothing in the process (no
//! thread, mapping, file descriptor, pthread key or memory), so a process may load,
//! run and unload distinct libraries without end (a hot reload of new model versions).
//!
//! Each cycle loads its own byte-identical copy of one compiled library under a new
//! name: dlopen tells libraries apart by file (device and inode), so every copy is a
//! distinct library, loaded and unloaded like a new model version. The full run is
//! 10,000 cycles per thread count (`AOTC_UNLOAD_CYCLES=10000`); CI runs fewer.

use aotc_runtime::{Device, Model};
use aotc_tests::{check_call, compile, fixture, recorded, tolerance};
use std::path::{Path, PathBuf};

/// Cycles per thread count unless `AOTC_UNLOAD_CYCLES` says otherwise.
const DEFAULT_CYCLES: usize = 1000;
/// The cycles after which the process is measured first: what the first loads set up
/// once (glibc's stack cache, the loader's tables) is there by then.
const WARM_UP: usize = 100;

/// What the process holds.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    rss_kib: i64,
    threads: i64,
    fds: i64,
    mappings: i64,
    /// Mappings of the copies' folder (loaded libraries).
    copies_mapped: i64,
    /// pthread keys still free (a process has 1024).
    free_keys: i64,
}

fn entries(dir: &str) -> i64 {
    std::fs::read_dir(dir).expect(dir).count() as i64
}

fn footprint(copies: &Path) -> Footprint {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: i64 = statm.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("statm's resident pages");
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let folder = copies.to_string_lossy();
    Footprint {
        // SAFETY: sysconf has no preconditions.
        rss_kib: pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64 / 1024,
        threads: entries("/proc/self/task"),
        fds: entries("/proc/self/fd"),
        mappings: maps.lines().count() as i64,
        copies_mapped: maps.lines().filter(|l| l.contains(&*folder)).count() as i64,
        free_keys: free_pthread_keys(),
    }
}

fn free_pthread_keys() -> i64 {
    let mut keys = vec![];
    loop {
        let mut key = 0;
        // SAFETY: a key without destructor, deleted below.
        if unsafe { libc::pthread_key_create(&mut key, None) } != 0 {
            break;
        }
        keys.push(key);
    }
    for &key in &keys {
        // SAFETY: created above and never used.
        unsafe { libc::pthread_key_delete(key) };
    }
    keys.len() as i64
}

/// Whether the library at `path` is still mapped in the process.
fn still_loaded(path: &Path) -> bool {
    // SAFETY: RTLD_NOLOAD maps nothing and runs no initialiser: it only finds a library
    // that is already loaded (and takes a reference to it, given back by the drop).
    unsafe { libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_NOLOAD) }.is_ok()
}

/// A temporary folder in memory when there is one (the copies are written and deleted
/// at every cycle).
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("temporary directory")
}

#[test]
fn distinct_libraries_load_run_and_unload_without_a_trace() {
    let cycles: usize = std::env::var("AOTC_UNLOAD_CYCLES")
        .map(|v| v.parse().expect("AOTC_UNLOAD_CYCLES is a number of cycles"))
        .unwrap_or(DEFAULT_CYCLES);
    assert!(cycles > WARM_UP, "AOTC_UNLOAD_CYCLES must exceed {WARM_UP}");
    let dir = fixture("dynamic_batch_mlp");
    let (inputs, expected) = recorded(&dir, 0);
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let copies = scratch_dir();
    for threads in [1, 2] {
        let start = std::time::Instant::now();
        let mut warm = None;
        for cycle in 0..cycles {
            let copy: PathBuf = copies.path().join(format!("model_{threads}_{cycle}.so"));
            std::fs::copy(&so, &copy).expect("copy of the library");
            let mut model = Model::load_with_threads(&copy, Device::Cpu, threads).expect("load");
            let what = format!("copy {cycle} on {threads} threads");
            check_call(&mut model, &inputs, &expected, tolerance(&dir), &what);
            // A failed call sets the calling thread's last error: that must not pin it.
            assert!(model.run(&mut []).is_err(), "{what}: a call without inputs fails");
            drop(model);
            assert!(!still_loaded(&copy), "{what}: still loaded after its last instance and dlclose");
            std::fs::remove_file(&copy).expect("remove the copy");
            if cycle + 1 == WARM_UP {
                warm = Some(footprint(copies.path()));
            }
        }
        let (warm, end) = (warm.expect("measured after the warm-up"), footprint(copies.path()));
        eprintln!(
            "{threads} threads: {cycles} libraries in {:.1} s; after {WARM_UP}: {warm:?}; after {cycles}: {end:?}",
            start.elapsed().as_secs_f64()
        );
        let what = format!("{threads} threads, after {WARM_UP} and {cycles} libraries: {warm:?} vs {end:?}");
        assert_eq!((end.threads, end.fds, end.copies_mapped), (warm.threads, warm.fds, 0), "{what}");
        assert_eq!(end.free_keys, warm.free_keys, "pthread keys: {what}");
        // A few mappings and pages of the allocator's and loader's own come and go; what
        // a library leaves (5 mappings, ~1 MiB mapped, kilobytes of heap) would add up.
        assert!(end.mappings <= warm.mappings + 8, "mappings: {what}");
        assert!(end.rss_kib <= warm.rss_kib + 2048, "resident memory: {what}");
    }
}
