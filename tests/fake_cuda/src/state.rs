//! The one process-wide driver state every exported function works on (behind a mutex),
//! and each thread's stack of current contexts.

use crate::status::{self, CuContext, CuResult};
use aotc_ptx_interp::{Memory, Module};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

/// Device `d`'s primary context is the token `CONTEXT_TOKENS + d`: far from the module and
/// function handles, which count up from 1.
const CONTEXT_TOKENS: usize = 0xc0_0000_0000;

/// Why a call failed: the code it returns and a message for `aotc_fake_cuda_last_error`.
#[derive(Debug)]
pub struct Failure {
    pub code: CuResult,
    pub message: String,
}

pub type Outcome<T = ()> = Result<T, Failure>;

pub fn fail<T>(code: CuResult, message: impl Into<String>) -> Outcome<T> {
    Err(Failure { code, message: message.into() })
}

/// An entry of a loaded module, as `cuModuleGetFunction` found it.
pub struct Function {
    pub module: usize,
    pub entry: String,
}

#[derive(Default)]
pub struct State {
    /// The device count, once `cuInit` succeeded.
    devices: Option<i32>,
    /// Per device: how many times its primary context is retained.
    retained: Vec<u32>,
    /// Device memory of every device (addresses are unique across devices, as with
    /// unified addressing).
    pub memory: Memory,
    /// Per live allocation, by its start: the device whose context allocated it.
    pub owners: HashMap<u64, i32>,
    pub live_bytes: u64,
    pub modules: HashMap<usize, Module>,
    pub functions: HashMap<usize, Function>,
    last_handle: usize,
    /// The execution error of a launch, until a `cuStreamSynchronize` reports it.
    pub pending_failure: Option<String>,
    /// The message of the last call that failed.
    pub last_error: Option<String>,
    pub launches: u64,
    pub instructions: u64,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

thread_local! {
    /// This thread's pushed contexts, as device ordinals; the last one is current.
    static CURRENT: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// The state, locked. A panic while it was held (an interpreter bug, reported as
/// CUDA_ERROR_UNKNOWN) leaves it usable: its maps are only changed in whole steps.
pub fn lock() -> MutexGuard<'static, State> {
    STATE.clear_poison();
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The device count `AOTC_FAKE_CUDA_DEVICES` asks for (1 without it).
fn configured_devices() -> Outcome<i32> {
    match std::env::var("AOTC_FAKE_CUDA_DEVICES") {
        Err(_) => Ok(1),
        Ok(text) => match text.parse::<i32>() {
            Ok(n) if n >= 0 => Ok(n),
            _ => fail(status::INVALID_VALUE, format!("AOTC_FAKE_CUDA_DEVICES={text:?} is not a device count")),
        },
    }
}

impl State {
    /// Enumerates the devices once; with none, fails as the real driver's `cuInit` does.
    pub fn init(&mut self) -> Outcome {
        if self.devices.is_none() {
            let count = configured_devices()?;
            if count == 0 {
                return fail(status::NO_DEVICE, "no device (AOTC_FAKE_CUDA_DEVICES=0)");
            }
            self.devices = Some(count);
            self.retained = vec![0; count as usize];
        }
        Ok(())
    }

    pub fn device_count(&self) -> Outcome<i32> {
        self.devices.map_or_else(|| fail(status::NOT_INITIALIZED, "cuInit has not succeeded"), Ok)
    }

    pub fn check_device(&self, device: i32) -> Outcome {
        let count = self.device_count()?;
        if !(0..count).contains(&device) {
            return fail(status::INVALID_DEVICE, format!("device {device} of {count}"));
        }
        Ok(())
    }

    pub fn retain_primary(&mut self, device: i32) -> Outcome<CuContext> {
        self.check_device(device)?;
        self.retained[device as usize] += 1;
        Ok((CONTEXT_TOKENS + device as usize) as CuContext)
    }

    pub fn release_primary(&mut self, device: i32) -> Outcome {
        self.check_device(device)?;
        let count = &mut self.retained[device as usize];
        if *count == 0 {
            return fail(status::INVALID_CONTEXT, format!("device {device}'s primary context is not retained"));
        }
        *count -= 1;
        Ok(())
    }

    /// The device of context token `context`, whose primary context must be retained.
    fn context_device(&self, context: usize) -> Outcome<i32> {
        let device = context.checked_sub(CONTEXT_TOKENS).and_then(|d| i32::try_from(d).ok());
        match device {
            Some(d) if self.retained.get(d as usize).is_some_and(|&count| count > 0) => Ok(d),
            _ => fail(status::INVALID_CONTEXT, format!("{context:#x} is not a retained primary context")),
        }
    }

    pub fn push_current(&self, context: CuContext) -> Outcome {
        self.device_count()?;
        let device = self.context_device(context as usize)?;
        CURRENT.with(|stack| stack.borrow_mut().push(device));
        Ok(())
    }

    pub fn pop_current(&self) -> Outcome<CuContext> {
        self.device_count()?;
        match CURRENT.with(|stack| stack.borrow_mut().pop()) {
            Some(device) => Ok((CONTEXT_TOKENS + device as usize) as CuContext),
            None => fail(status::INVALID_CONTEXT, "no context is current on this thread"),
        }
    }

    /// The device of this thread's current context, which device work needs.
    pub fn current_device(&self) -> Outcome<i32> {
        self.device_count()?;
        match CURRENT.with(|stack| stack.borrow().last().copied()) {
            Some(device) => self.context_device(CONTEXT_TOKENS + device as usize),
            None => fail(status::INVALID_CONTEXT, "no context is current on this thread"),
        }
    }

    /// A fresh non-null module or function handle.
    pub fn new_handle(&mut self) -> usize {
        self.last_handle += 1;
        self.last_handle
    }
}
