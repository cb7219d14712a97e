//! Kernel timings of one instance (`aotc_profile_enable`, `aotc_profile_read`).
//!
//! While profiling is on, a call hands the generated driver a [`Recorder`], and the driver
//! calls [`__aotc_profile_mark`] after each kernel: a kernel's time is the gap since the
//! previous mark, or since its stage began. A kernel split across the pool's threads is
//! timed on the calling thread, which waits for the others: its wall time. Only calls that
//! succeed are counted. Off, the driver tests a null pointer once per kernel.

use std::ffi::c_void;
use std::time::Instant;

/// The kernel times of the call in progress.
pub struct Recorder {
    kernel_ns: Vec<u64>,
    /// When the last kernel ended (or the stage began).
    last: Instant,
}

pub struct Profile {
    on: bool,
    /// Totals over the calls that succeeded since profiling was turned on.
    calls: u64,
    call_ns: u64,
    kernel_ns: Vec<u64>,
    /// The call in progress, and when it began.
    call: Recorder,
    call_start: Instant,
}

impl Profile {
    pub fn new(kernels: usize) -> Profile {
        let now = Instant::now();
        Profile {
            on: false,
            calls: 0,
            call_ns: 0,
            kernel_ns: vec![0; kernels],
            call: Recorder { kernel_ns: vec![0; kernels], last: now },
            call_start: now,
        }
    }

    /// Turns profiling on (from zero) or off (keeping the totals for reading).
    pub fn set(&mut self, on: bool) {
        if on {
            self.calls = 0;
            self.call_ns = 0;
            self.kernel_ns.fill(0);
        }
        self.on = on;
    }

    /// A call begins.
    pub fn begin_call(&mut self) {
        if self.on {
            self.call.kernel_ns.fill(0);
            self.call_start = Instant::now();
        }
    }

    /// What the driver gets for a stage that begins now: the recorder, or null when off.
    pub fn stage_recorder(&mut self) -> *mut c_void {
        if !self.on {
            return std::ptr::null_mut();
        }
        self.call.last = Instant::now();
        (&mut self.call as *mut Recorder).cast()
    }

    /// The call succeeded: its times count.
    pub fn end_call(&mut self) {
        if self.on {
            self.calls += 1;
            self.call_ns = self.call_ns.saturating_add(nanos(self.call_start, Instant::now()));
            for (total, t) in self.kernel_ns.iter_mut().zip(&self.call.kernel_ns) {
                *total = total.saturating_add(*t);
            }
        }
    }

    /// Calls counted, their total time inside the library, and each kernel's total (ns).
    pub fn totals(&self) -> (u64, u64, &[u64]) {
        (self.calls, self.call_ns, &self.kernel_ns)
    }
}

fn nanos(from: Instant, to: Instant) -> u64 {
    u64::try_from(to.saturating_duration_since(from).as_nanos()).unwrap_or(u64::MAX)
}

/// The generated driver's mark (`aotc_abi::internal_symbols::PROFILE_MARK`): kernel
/// `kernel` has just finished.
///
/// # Safety
/// `recorder` comes from [`Profile::stage_recorder`] for the stage now running, on this thread.
#[no_mangle]
pub unsafe extern "C" fn __aotc_profile_mark(recorder: *mut c_void, kernel: i64) {
    // SAFETY: the driver passes back the recorder of the running stage; nothing else
    // touches it until the stage returns.
    let r = unsafe { &mut *recorder.cast::<Recorder>() };
    let now = Instant::now();
    if let Some(t) = usize::try_from(kernel).ok().and_then(|k| r.kernel_ns.get_mut(k)) {
        *t = t.saturating_add(nanos(r.last, now));
    }
    r.last = now;
}
