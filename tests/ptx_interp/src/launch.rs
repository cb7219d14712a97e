//! The public face: a parsed `Module`, and launching one of its entries over a grid.

use crate::cta::{run_cta, CtaFault, Threads};
use crate::decode::decode_entry;
use crate::error::{ErrorKind, ExecError, ParseError, Site};
use crate::exec::Env;
use crate::kernel::{Kernel, ParamKind};
use crate::memory::Memory;
use crate::parse::parse_module;
use crate::race::RaceLogs;

/// The default step limit: instructions one thread may run before it is deemed stuck
/// (about ten seconds of a single thread's time).
pub const DEFAULT_STEP_LIMIT: u64 = 1 << 30;

/// A parsed and decoded PTX module.
#[derive(Debug)]
pub struct Module {
    kernels: Vec<Kernel>,
}

/// A launch configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Report shared-memory races between barriers and global-memory conflicts between
    /// threads (slower: every access is logged per byte).
    pub check_races: bool,
    /// The most instructions one thread may run.
    pub step_limit: u64,
}

impl Launch {
    /// `grid` CTAs of `block` threads, without race checking, with the default step limit.
    pub fn new(grid: [u32; 3], block: [u32; 3]) -> Launch {
        Launch { grid, block, check_races: false, step_limit: DEFAULT_STEP_LIMIT }
    }

    pub fn with_race_check(self) -> Launch {
        Launch { check_races: true, ..self }
    }
}

/// A kernel argument, matched against the entry's `.param` list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    U32(u32),
    S32(i32),
    U64(u64),
    S64(i64),
    F32(f32),
    F64(f64),
}

impl Arg {
    fn bytes(self) -> Vec<u8> {
        match self {
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::S32(v) => v.to_le_bytes().to_vec(),
            Arg::U64(v) => v.to_le_bytes().to_vec(),
            Arg::S64(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
            Arg::F64(v) => v.to_le_bytes().to_vec(),
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Arg::F32(_) | Arg::F64(_))
    }
}

/// What a launch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Instructions executed, summed over threads (predicated-off ones included).
    pub instructions: u64,
    pub ctas: u64,
    pub threads: u64,
}

impl Module {
    pub fn parse(ptx: &str) -> Result<Module, ParseError> {
        let entries = parse_module(ptx)?;
        let mut kernels: Vec<Kernel> = Vec::new();
        for entry in &entries {
            if kernels.iter().any(|k| k.name == entry.name) {
                return Err(ParseError { line: entry.line, message: format!("entry `{}` defined twice", entry.name) });
            }
            kernels.push(decode_entry(entry)?);
        }
        Ok(Module { kernels })
    }

    /// The entries' names, in source order.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.kernels.iter().map(|k| k.name.as_str())
    }

    /// Entry `entry`'s parameters as (name, type without the dot), in order.
    pub fn params(&self, entry: &str) -> Option<Vec<(&str, &str)>> {
        let kernel = self.kernels.iter().find(|k| k.name == entry)?;
        Some(kernel.params.iter().map(|p| (p.name.as_str(), p.ty.as_str())).collect())
    }

    /// Runs entry `entry` over `launch.grid` with `args`, to completion or the first error.
    pub fn launch(&self, memory: &mut Memory, entry: &str, launch: &Launch, args: &[Arg]) -> Result<Stats, ExecError> {
        let fail =
            |message: String| ExecError { kernel: entry.to_string(), site: None, kind: ErrorKind::Launch(message) };
        let kernel =
            self.kernels.iter().find(|k| k.name == entry).ok_or_else(|| fail(format!("no entry named `{entry}`")))?;
        check_dims(kernel, launch).map_err(fail)?;
        let params = pack_args(kernel, args).map_err(fail)?;
        let per_cta = launch.block.iter().product::<u32>() as u64;
        let ctas = launch.grid.iter().map(|&g| g as u64).product::<u64>();
        let total_threads = ctas.saturating_mul(per_cta);
        if launch.check_races && total_threads >= u32::MAX as u64 {
            return Err(fail(format!("race checking supports fewer than 2^32 threads, not {total_threads}")));
        }
        let races = launch.check_races.then(|| RaceLogs::new(kernel.shared_bytes as usize, memory.allocation_count()));
        let mut env = Env {
            kernel,
            memory,
            params: &params,
            shared: vec![0; kernel.shared_bytes as usize],
            races,
            step_limit: launch.step_limit,
            grid: launch.grid,
            block: launch.block,
            cta: [0; 3],
            first_global_thread: 0,
        };
        let mut threads = Threads::default();
        let mut stats = Stats { instructions: 0, ctas, threads: total_threads };
        let [gx, gy, gz] = launch.grid;
        for (linear, cta) in
            (0..gz).flat_map(|z| (0..gy).flat_map(move |y| (0..gx).map(move |x| [x, y, z]))).enumerate()
        {
            env.cta = cta;
            // Only used for race logs, where the thread count was checked to fit.
            env.first_global_thread = (linear as u64).wrapping_mul(per_cta) as u32;
            match run_cta(&mut env, &mut threads) {
                Ok(instructions) => stats.instructions += instructions,
                Err(CtaFault { thread, pc, kind }) => {
                    let site = Site {
                        line: kernel.lines[pc as usize],
                        instruction: kernel.texts[pc as usize].clone(),
                        cta,
                        thread: env.thread_index(thread),
                    };
                    return Err(ExecError { kernel: kernel.name.clone(), site: Some(site), kind });
                }
            }
        }
        Ok(stats)
    }
}

fn check_dims(kernel: &Kernel, launch: &Launch) -> Result<(), String> {
    let [bx, by, bz] = launch.block;
    let [gx, gy, gz] = launch.grid;
    if launch.block.contains(&0) || launch.grid.contains(&0) {
        return Err("grid and block dimensions must be positive".into());
    }
    if bx > 1024 || by > 1024 || bz > 64 || bx as u64 * by as u64 * bz as u64 > 1024 {
        return Err(format!("block {:?} exceeds the CUDA limits (1024 threads, z <= 64)", launch.block));
    }
    if gx > i32::MAX as u32 || gy > 65535 || gz > 65535 {
        return Err(format!("grid {:?} exceeds the CUDA limits", launch.grid));
    }
    if let Some(max) = kernel.maxntid {
        if (bx * by * bz) as u64 > max.iter().map(|&m| m as u64).product::<u64>() {
            return Err(format!("block {:?} exceeds the entry's .maxntid {max:?}", launch.block));
        }
    }
    Ok(())
}

/// The parameter buffer, after checking each argument against its `.param`.
fn pack_args(kernel: &Kernel, args: &[Arg]) -> Result<Vec<u8>, String> {
    if args.len() != kernel.params.len() {
        let which = match kernel.params.get(args.len()) {
            Some(missing) => format!("first missing: `{}`", missing.name),
            None => "too many".to_string(),
        };
        return Err(format!("{} arguments for {} parameters ({which})", args.len(), kernel.params.len()));
    }
    let mut buffer = vec![0u8; kernel.param_bytes as usize];
    for (param, &arg) in kernel.params.iter().zip(args) {
        let bytes = arg.bytes();
        let kind_ok = match param.kind {
            ParamKind::Bits => true,
            ParamKind::Float => arg.is_float(),
            ParamKind::Int => !arg.is_float(),
        };
        if bytes.len() != param.bytes as usize || !kind_ok {
            return Err(format!("parameter `{}` is .{}, but the argument is {arg:?}", param.name, param.ty));
        }
        buffer[param.offset as usize..][..bytes.len()].copy_from_slice(&bytes);
    }
    Ok(buffer)
}
