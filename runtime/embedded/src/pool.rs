//! The worker threads of the support library, shared by every instance in the process.
//!
//! One pool per loaded library, started by the first instance that asks for more than
//! one thread and joined when the last such instance is destroyed, so that no thread runs
//! the library's code after its last instance is gone (a library may then be unloaded).
//! The workers are plain pthreads, not `std::thread`s: a `std::thread` would leave the
//! library pinned and a pthread key taken for good (see [`spawn_worker`]).
//! A parallel region takes workers only while cores are free: the pool has one worker
//! per core beyond the first, and concurrent calls (of several instances, on several
//! threads) share them, each caller running its own share on its own thread. So two
//! instances called at once on a two-core machine run one thread each, not four.
//!
//! A region nested in another (a GEMM inside a parallel kernel) runs on its caller alone.

use crate::spare::{self, Handle};
use aotc_abi::available_cores;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

// The threads the running call may use (set by [`with_threads`]; 1 outside calls and
// inside a parallel region).
thread_local! {
    static THREADS: Cell<usize> = const { Cell::new(1) };
}

/// Runs `f` with `threads` as the thread budget of the calling thread.
pub fn with_threads<T>(threads: usize, f: impl FnOnce() -> T) -> T {
    let previous = THREADS.with(|t| t.replace(threads.max(1)));
    let out = f();
    THREADS.with(|t| t.set(previous));
    out
}

/// The thread budget of the calling thread.
pub fn threads() -> usize {
    THREADS.with(|t| t.get())
}

/// A region handed to the workers: `f(i)` for every chunk `i < chunks`, claimed one at a
/// time through `next`; `done` counts finished chunks. It lives in the frame of
/// [`parallel_for`] (a region allocates nothing), which returns only once no worker
/// holds it.
struct Job {
    /// `&(dyn Fn(usize) + Sync)` with its lifetime erased: the caller of
    /// [`parallel_for`] keeps it alive until every chunk is done and every worker has
    /// let go of the job.
    f: *const (dyn Fn(usize) + Sync),
    chunks: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    /// Workers that may still join this job.
    seats: AtomicUsize,
    /// Workers that joined the job and have not let go of it yet.
    holders: AtomicUsize,
    /// A chunk panicked (on a worker): the caller panics in turn once all are done.
    panicked: std::sync::atomic::AtomicBool,
    /// The caller's spare buffers, lent to the workers for the region.
    spare: Handle,
}

/// A job in the pool's list; see [`Job`] for how long it lives.
#[derive(Clone, Copy)]
struct JobRef(*const Job);

// SAFETY: a Job is Sync (below), and the list holds a job only while its caller waits.
unsafe impl Send for JobRef {}

impl JobRef {
    fn get(&self) -> &Job {
        // SAFETY: a job is in the list only while its caller's frame holds it (it leaves
        // the list, under the lock, before its caller waits for the holders to go).
        unsafe { &*self.0 }
    }
}

// SAFETY: `f` is Sync and outlives the job (see `Job::f`); the rest is atomics.
unsafe impl Sync for Job {}

impl Job {
    /// Runs chunks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.chunks {
                return;
            }
            // SAFETY: the caller of parallel_for keeps f alive until done == chunks.
            let f = unsafe { &*self.f };
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Callers currently inside a parallel region (each holds a core).
    callers: AtomicUsize,
    /// The cores the pool was started for (asking the OS reads cgroup files: too slow
    /// for every region).
    cores: usize,
    /// Jobs posted so far: a worker that has just finished one watches this for a while
    /// before it sleeps (see [`SPIN`]).
    posted: AtomicUsize,
    /// Workers waiting on `wake` (changed under `state`'s lock): a region wakes them only
    /// when there are some, as the futex call costs as much as a small region.
    sleeping: AtomicUsize,
    /// Workers that have started (see [`start`]).
    started: AtomicUsize,
}

/// How long a worker watches for the next region before it sleeps. A model's kernels
/// follow each other microseconds apart, and waking a sleeping thread takes tens of
/// microseconds (more on a virtual machine), which small regions (a depthwise layer, a
/// GEMM of a few hundred microseconds) do not recover; spinning this briefly keeps the
/// worker at hand between them, as OpenMP runtimes do (their blocktime).
const SPIN: std::time::Duration = std::time::Duration::from_micros(200);

struct State {
    /// Jobs waiting for workers (most recent last).
    jobs: Vec<JobRef>,
    stop: bool,
}

struct Pool {
    shared: Arc<Shared>,
    workers: Vec<libc::pthread_t>,
    /// Instances holding the pool.
    users: usize,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// An instance's claim on the pool: started with the first, joined with the last.
pub struct PoolUser(());

impl PoolUser {
    /// Starts the pool if needed (only when more than one thread is asked for).
    pub fn acquire(threads: usize) -> Option<PoolUser> {
        if threads <= 1 || available_cores() <= 1 {
            return None;
        }
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let p = pool.get_or_insert_with(start);
        p.users += 1;
        Some(PoolUser(()))
    }
}

impl Drop for PoolUser {
    fn drop(&mut self) {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let last = pool.as_mut().is_some_and(|p| {
            p.users -= 1;
            p.users == 0
        });
        if last {
            let p = pool.take().expect("the pool exists while it has users");
            p.shared.state.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            p.shared.wake.notify_all();
            for w in p.workers {
                // SAFETY: a thread spawn_worker started, joined once (never detached).
                unsafe { libc::pthread_join(w, std::ptr::null_mut()) };
            }
        }
    }
}

fn start() -> Pool {
    let cores = available_cores();
    let shared = Arc::new(Shared {
        state: Mutex::new(State { jobs: vec![], stop: false }),
        wake: Condvar::new(),
        callers: AtomicUsize::new(0),
        cores,
        posted: AtomicUsize::new(0),
        sleeping: AtomicUsize::new(0),
        started: AtomicUsize::new(0),
    });
    let workers: Vec<_> = (1..cores).filter_map(|i| spawn_worker(i, shared.clone())).collect();
    // A thread sets itself up (its thread-locals: heap allocations) once it first runs:
    // at the instance's creation, not in one of its calls.
    while shared.started.load(Ordering::Acquire) < workers.len() {
        std::thread::yield_now();
    }
    Pool { shared, workers, users: 0 }
}

/// Starts worker `index` on a plain pthread (None if the system refuses a thread: the
/// pool then has fewer workers).
///
/// Not `std::thread::spawn`, which would keep the library loaded after its last instance:
/// the spawning thread (a caller's) registers a destructor of std's thread-local spawn
/// hooks, and glibc keeps a library mapped while a live thread holds a thread-local
/// destructor from it (`__cxa_thread_atexit_impl`); and the new thread's std handle
/// takes a pthread key of this library's copy of std that nothing deletes (a process
/// has 1024). A worker runs only this module's code, whose thread-locals have no
/// destructor.
fn spawn_worker(index: usize, shared: Arc<Shared>) -> Option<libc::pthread_t> {
    /// The worker's stack: std's default for its threads.
    const STACK: usize = 2 << 20;
    extern "C" fn start(arg: *mut c_void) -> *mut c_void {
        // SAFETY: the Box spawn_worker leaked for this thread, taken back once.
        let shared = unsafe { Box::from_raw(arg.cast::<Arc<Shared>>()) };
        // A chunk's panic is caught in Job::work; nothing else in a worker panics.
        worker(&shared);
        std::ptr::null_mut()
    }
    let arg = Box::into_raw(Box::new(shared));
    let mut thread = std::mem::MaybeUninit::<libc::pthread_t>::uninit();
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: attr is initialised before use and destroyed after; `start` takes `arg`
    // back exactly once if the thread starts, and it is freed here if it does not.
    let rc = unsafe {
        libc::pthread_attr_init(attr.as_mut_ptr());
        libc::pthread_attr_setstacksize(attr.as_mut_ptr(), STACK);
        let rc = libc::pthread_create(thread.as_mut_ptr(), attr.as_ptr(), start, arg.cast());
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        rc
    };
    if rc != 0 {
        // SAFETY: no thread took arg.
        drop(unsafe { Box::from_raw(arg) });
        return None;
    }
    // SAFETY: pthread_create succeeded and wrote the thread's id.
    let thread = unsafe { thread.assume_init() };
    // The kernel keeps 15 bytes of a thread's name.
    let mut name = format!("aotc-worker-{index}").into_bytes();
    name.truncate(15);
    if let Ok(name) = std::ffi::CString::new(name) {
        // SAFETY: a live thread and a NUL-terminated name of at most 16 bytes.
        unsafe { libc::pthread_setname_np(thread, name.as_ptr()) };
    }
    Some(thread)
}

fn worker(shared: &Shared) {
    // This library's thread-locals, set up before the first region.
    with_threads(1, || spare::with_handle(Handle::current(), || ()));
    shared.started.fetch_add(1, Ordering::Release);
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    // Whether the worker last watched for a job in vain (no region was posted): only then
    // does finding none send it to sleep. (A worker that arrives after the caller took
    // every chunk would otherwise sleep at once and, while it wakes, miss the next region
    // too: one miss became every one.)
    let mut watched_in_vain = false;
    loop {
        if state.stop {
            return;
        }
        // Join the newest job with a free seat; jobs without seats leave the list.
        state.jobs.retain(|j| {
            j.get().seats.load(Ordering::Relaxed) > 0 && j.get().next.load(Ordering::Relaxed) < j.get().chunks
        });
        // Regions posted so far (posting takes the lock): one posted after this look is
        // what a watch waits for.
        let seen = shared.posted.load(Ordering::Relaxed);
        // The seat taken (helpers..=1; the caller is seat 0) picks the spare buffers.
        let job = state.jobs.iter().rev().find_map(|j| {
            let seat = j.get().seats.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |s| s.checked_sub(1));
            seat.ok().map(|seat| (*j, seat))
        });
        match job {
            Some((job, seat)) => {
                // Held from here (under the lock, while the job is listed) ...
                job.get().holders.fetch_add(1, Ordering::AcqRel);
                drop(state);
                let job = job.get();
                spare::with_handle(job.spare.seat(seat), || with_threads(1, || job.work()));
                // ... to here: the caller's frame may go once this is seen.
                job.holders.fetch_sub(1, Ordering::Release);
            }
            None if watched_in_vain => {
                watched_in_vain = false;
                shared.sleeping.fetch_add(1, Ordering::Relaxed);
                state = shared.wake.wait(state).unwrap_or_else(|e| e.into_inner());
                shared.sleeping.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            None => drop(state),
        }
        // After a job, or finding none: watch for the next before looking again.
        watched_in_vain = !spin_for_next(shared, seen);
        state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    }
}

/// Watches for a job posted after the `seen`th for up to [`SPIN`], while no other caller
/// holds the cores (a spinning worker would then only take time from them); whether one
/// was posted.
fn spin_for_next(shared: &Shared, seen: usize) -> bool {
    let start = std::time::Instant::now();
    loop {
        if shared.posted.load(Ordering::Acquire) != seen {
            return true;
        }
        if shared.callers.load(Ordering::Relaxed) >= shared.cores || start.elapsed() > SPIN {
            return false;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

/// Runs `f(0)`, ..., `f(chunks - 1)`, on up to `threads` threads (the caller is one) when
/// the pool runs and cores are free, else on the caller alone. Returns when all are done.
/// Inside `f`, [`threads`] is 1: nested regions run serially.
pub fn parallel_for(threads: usize, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
    let pool = POOL.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|p| p.shared.clone());
    let serial = || with_threads(1, || (0..chunks).for_each(f));
    let Some(shared) = pool.filter(|_| threads > 1 && chunks > 1) else { return serial() };
    // Cores not held by other callers, less the caller's own.
    let others = shared.callers.fetch_add(1, Ordering::AcqRel);
    let helpers = (threads - 1).min(chunks - 1).min(shared.cores.saturating_sub(others + 1));
    if helpers == 0 {
        shared.callers.fetch_sub(1, Ordering::AcqRel);
        return serial();
    }
    // SAFETY: only the lifetime is erased; this function does not return before every
    // chunk is done and every worker has dropped its reference to the job (see below).
    let f_static: *const (dyn Fn(usize) + Sync) =
        unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f) };
    let job = Job {
        f: f_static,
        chunks,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        seats: AtomicUsize::new(helpers),
        holders: AtomicUsize::new(0),
        panicked: Default::default(),
        spare: Handle::current(),
    };
    let listed = JobRef(&job);
    {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.jobs.push(listed);
        shared.posted.fetch_add(1, Ordering::Release);
        // Under the lock: a worker counts itself sleeping under it too, so none is missed.
        for _ in 0..helpers.min(shared.sleeping.load(Ordering::Relaxed)) {
            shared.wake.notify_one();
        }
    }
    with_threads(1, || job.work());
    // No new worker may join now; then wait for those that did to finish their chunks
    // and let go of the job.
    job.seats.store(0, Ordering::Release);
    shared.state.lock().unwrap_or_else(|e| e.into_inner()).jobs.retain(|j| !std::ptr::eq(j.0, listed.0));
    while job.done.load(Ordering::Acquire) < chunks || job.holders.load(Ordering::Acquire) > 0 {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
    shared.callers.fetch_sub(1, Ordering::AcqRel);
    assert!(!job.panicked.load(Ordering::Relaxed), "a parallel chunk panicked");
}

/// An output pointer that the chunks of a parallel region share, each writing its own
/// part (those of [`for_items`], a Winograd convolution's blocks).
#[derive(Clone, Copy)]
pub(crate) struct SharedOut(*mut f32);
// SAFETY: used only where the chunks' writes are disjoint (see each use).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    pub(crate) fn new(out: &mut [f32]) -> SharedOut {
        SharedOut(out.as_mut_ptr())
    }

    /// The pointer (a method, so that closures capture the whole `SharedOut`).
    pub(crate) fn get(&self) -> *mut f32 {
        self.0
    }
}

/// Runs `f(begin, end, part)` over contiguous ranges of the `items` items of `out` (each
/// `item_len` floats), spread over the call's threads when `work` (multiply-adds, or
/// copies) is worth it.
pub fn for_items(
    out: &mut [f32],
    items: usize,
    item_len: usize,
    work: usize,
    f: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
) {
    let base = SharedOut(out.as_mut_ptr());
    for_ranges(items, work, &|range| {
        // SAFETY: items `range` of `out`, which the ranges partition.
        let part =
            unsafe { std::slice::from_raw_parts_mut(base.get().add(range.start * item_len), range.len() * item_len) };
        f(range.start, range.end, part)
    });
}

/// Runs `f` over contiguous ranges that partition `0..items`, spread over the call's
/// threads when `work` (multiply-adds, or copies) is worth it.
pub fn for_ranges(items: usize, work: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    let threads = threads();
    let chunks = if threads > 1 && work as i64 >= aotc_abi::internal_symbols::MIN_PARALLEL_WORK {
        (threads * 4).min(items)
    } else {
        1
    };
    if chunks <= 1 {
        return f(0..items);
    }
    parallel_for(threads, chunks, &|i| f(items * i / chunks..items * (i + 1) / chunks));
}

/// A generated kernel over `[begin, end)` of its split loop.
type KernelFn = unsafe extern "C" fn(slots: *const *mut u8, dims: *const i64, begin: i64, end: i64);

/// The generated driver's entry for a large kernel (`aotc_abi::internal_symbols::PARALLEL`):
/// `kernel` over `[0, extent)`, split into contiguous ranges across the call's threads
/// when `extent * work` is worth it.
///
/// # Safety
/// `kernel` is a generated kernel whose iterations of the split loop write disjoint
/// memory, and `slots`/`dims` are the call's tables.
#[no_mangle]
pub unsafe extern "C" fn __aotc_parallel(
    kernel: KernelFn,
    slots: *const *mut u8,
    dims: *const i64,
    extent: i64,
    work: i64,
) {
    let threads = threads();
    let total = extent.saturating_mul(work.max(1));
    if threads <= 1 || extent <= 1 || total < aotc_abi::internal_symbols::MIN_PARALLEL_WORK {
        // SAFETY: the caller's contract.
        return unsafe { kernel(slots, dims, 0, extent) };
    }
    // A few chunks per thread even out uneven iterations; each is worth waking for.
    let per_chunk_min = (aotc_abi::internal_symbols::MIN_PARALLEL_WORK / work.max(1)).max(1);
    let chunks = (threads as i64 * 4).min(extent).min((extent / per_chunk_min).max(1));
    let (slots, dims) = (slots as usize, dims as usize);
    parallel_for(threads, chunks as usize, &|i| {
        let (begin, end) = (extent * i as i64 / chunks, extent * (i as i64 + 1) / chunks);
        // SAFETY: the caller's contract; the chunks' ranges are disjoint and cover [0, extent).
        unsafe { kernel(slots as *const *mut u8, dims as *const i64, begin, end) }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_chunk_runs_once_with_and_without_the_pool() {
        for threads in [1, 2, 4] {
            let user = PoolUser::acquire(threads);
            for chunks in [0, 1, 2, 7, 100] {
                let hits: Vec<AtomicU64> = (0..chunks).map(|_| AtomicU64::new(0)).collect();
                parallel_for(threads, chunks, &|i| {
                    assert_eq!(super::threads(), 1, "regions do not nest");
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "threads {threads} chunks {chunks}");
            }
            drop(user);
        }
    }

    #[test]
    fn concurrent_callers_share_the_pool_and_it_stops_with_its_last_user() {
        let users: Vec<_> = (0..2).map(|_| PoolUser::acquire(2)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let sum = AtomicU64::new(0);
                        parallel_for(2, 16, &|i| {
                            sum.fetch_add(i as u64, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 120);
                    }
                });
            }
        });
        drop(users);
        // (Other tests of this process may hold the pool meanwhile: what must hold is that
        // it exists only while it has users.)
        assert!(POOL.lock().unwrap().as_ref().is_none_or(|p| p.users > 0));
    }
}
