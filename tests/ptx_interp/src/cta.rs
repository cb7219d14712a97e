//! Running one CTA: each thread runs alone until it exits or waits at a `bar.sync` or
//! `shfl.sync`; a shuffle is resolved when every lane of its membermask waits at that
//! same instruction, a barrier when every thread of the CTA waits at that same one.
//! When nothing can be resolved and some thread still waits, the CTA is deadlocked and
//! the error says which thread is missing where.

use crate::error::ErrorKind;
use crate::exec::{run, Env, Fault, Registers, Stop};
use crate::inst::{Op, ShflMode};
use crate::kernel::special;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ready,
    Barrier,
    Shuffle,
    Exited,
}

/// An error of thread `thread` (linear index in its CTA) at instruction `pc`.
pub(crate) struct CtaFault {
    pub thread: u32,
    pub pc: u32,
    pub kind: ErrorKind,
}

/// The threads of a CTA: register files side by side, kept between CTAs to reuse memory.
#[derive(Default)]
pub(crate) struct Threads {
    values: Vec<u64>,
    written: Vec<bool>,
    pcs: Vec<u32>,
    status: Vec<Status>,
    steps: Vec<u64>,
    slots: usize,
}

const WARP: usize = 32;

impl Threads {
    fn registers(&mut self, thread: usize) -> Registers<'_> {
        let range = thread * self.slots..(thread + 1) * self.slots;
        Registers { values: &mut self.values[range.clone()], written: &mut self.written[range] }
    }

    fn read(&mut self, env: &Env, thread: usize, slot: u32) -> Result<u64, CtaFault> {
        let pc = self.pcs[thread];
        self.registers(thread).get(slot, env.kernel).map_err(|kind| CtaFault { thread: thread as u32, pc, kind })
    }

    /// Fresh threads for the CTA `env.cta`.
    fn start(&mut self, env: &Env) {
        let kernel = env.kernel;
        let count = env.block.iter().product::<u32>() as usize;
        self.slots = kernel.initial_values.len();
        self.values.clear();
        self.written.clear();
        for thread in 0..count {
            self.values.extend_from_slice(&kernel.initial_values);
            self.written.extend_from_slice(&kernel.initially_written);
            let tid = env.thread_index(thread as u32);
            let base = thread * self.slots;
            for axis in 0..3 {
                self.values[base + (special::TID + axis) as usize] = tid[axis as usize] as u64;
                self.values[base + (special::NTID + axis) as usize] = env.block[axis as usize] as u64;
                self.values[base + (special::CTAID + axis) as usize] = env.cta[axis as usize] as u64;
                self.values[base + (special::NCTAID + axis) as usize] = env.grid[axis as usize] as u64;
            }
            self.values[base + special::LANEID as usize] = (thread % WARP) as u64;
            self.values[base + special::WARPID as usize] = (thread / WARP) as u64;
        }
        self.pcs = vec![0; count];
        self.status = vec![Status::Ready; count];
        self.steps = vec![0; count];
    }
}

/// Runs the CTA `env.cta` to completion: the instructions its threads executed.
pub(crate) fn run_cta(env: &mut Env, threads: &mut Threads) -> Result<u64, CtaFault> {
    threads.start(env);
    env.shared.fill(0);
    if let Some(races) = env.races.as_mut() {
        races.shared.clear();
    }
    let count = threads.status.len();
    loop {
        for thread in 0..count {
            if threads.status[thread] != Status::Ready {
                continue;
            }
            let mut pc = threads.pcs[thread];
            let mut steps = threads.steps[thread];
            let slots = threads.slots;
            let range = thread * slots..(thread + 1) * slots;
            let mut regs =
                Registers { values: &mut threads.values[range.clone()], written: &mut threads.written[range] };
            let stop = run(env, &mut regs, thread as u32, &mut pc, &mut steps);
            threads.pcs[thread] = pc;
            threads.steps[thread] = steps;
            threads.status[thread] = match stop {
                Ok(Stop::Exit) => Status::Exited,
                Ok(Stop::Barrier) => Status::Barrier,
                Ok(Stop::Shuffle) => Status::Shuffle,
                Err(Fault { pc, kind }) => return Err(CtaFault { thread: thread as u32, pc, kind }),
            };
        }
        if threads.status.iter().all(|&s| s == Status::Exited) {
            return Ok(threads.steps.iter().sum());
        }
        if resolve_shuffles(env, threads)? {
            continue;
        }
        let first_pc = threads.pcs[0];
        if threads.status.iter().zip(&threads.pcs).all(|(&s, &pc)| s == Status::Barrier && pc == first_pc) {
            threads.status.fill(Status::Ready);
            threads.pcs.iter_mut().for_each(|pc| *pc += 1);
            if let Some(races) = env.races.as_mut() {
                races.shared.clear();
            }
            continue;
        }
        return Err(deadlock(env, threads));
    }
}

fn shuffle_error(thread: usize, pc: u32, why: String) -> CtaFault {
    CtaFault { thread: thread as u32, pc, kind: ErrorKind::ShuffleDivergence(why) }
}

/// Resolves every shuffle whose lanes all wait at it: whether any was.
fn resolve_shuffles(env: &Env, threads: &mut Threads) -> Result<bool, CtaFault> {
    let count = threads.status.len();
    let mut progress = false;
    for warp_start in (0..count).step_by(WARP) {
        let lanes = WARP.min(count - warp_start);
        for lane in 0..lanes {
            let thread = warp_start + lane;
            if threads.status[thread] != Status::Shuffle {
                continue;
            }
            let pc = threads.pcs[thread];
            let Op::Shfl { mode, d, p, a, b, c, mask } = env.kernel.code[pc as usize].op else {
                continue;
            };
            let members = threads.read(env, thread, mask)? as u32;
            if members & (1 << lane) == 0 {
                return Err(shuffle_error(
                    thread,
                    pc,
                    format!("membermask {members:#x} does not include lane {lane} itself"),
                ));
            }
            let mut ready = true;
            for member in (0..WARP).filter(|m| members & (1 << m) != 0) {
                if member >= lanes {
                    let why = format!("membermask {members:#x} names lane {member}, but the warp has {lanes} threads");
                    return Err(shuffle_error(thread, pc, why));
                }
                let other = warp_start + member;
                match threads.status[other] {
                    Status::Exited => {
                        return Err(shuffle_error(
                            thread,
                            pc,
                            format!("lane {member} of membermask {members:#x} exited"),
                        ));
                    }
                    Status::Shuffle if threads.pcs[other] == pc => {
                        let theirs = threads.read(env, other, mask)? as u32;
                        if theirs != members {
                            let why = format!("lane {lane} has membermask {members:#x} but lane {member} {theirs:#x}");
                            return Err(shuffle_error(thread, pc, why));
                        }
                    }
                    _ => ready = false,
                }
            }
            if !ready {
                continue;
            }
            let mut results = [(0u64, false); WARP];
            for member in (0..WARP).filter(|m| members & (1 << m) != 0) {
                let other = warp_start + member;
                let offset = (threads.read(env, other, b)? & 31) as i32;
                let control = threads.read(env, other, c)? as i32;
                let segment = (control >> 8) & 31;
                let min_lane = member as i32 & segment;
                let max_lane = min_lane | (control & 31 & !segment);
                let (source, in_range) = match mode {
                    ShflMode::Up => (member as i32 - offset, member as i32 - offset >= max_lane),
                    ShflMode::Down => (member as i32 + offset, member as i32 + offset <= max_lane),
                    ShflMode::Bfly => (member as i32 ^ offset, (member as i32 ^ offset) <= max_lane),
                    ShflMode::Idx => (min_lane | (offset & !segment), (min_lane | (offset & !segment)) <= max_lane),
                };
                let source = if in_range { source as usize } else { member };
                if members & (1 << source) == 0 {
                    let why = format!("lane {member} reads lane {source}, outside membermask {members:#x}");
                    return Err(shuffle_error(other, pc, why));
                }
                results[member] = (threads.read(env, warp_start + source, a)?, in_range);
            }
            for member in (0..WARP).filter(|m| members & (1 << m) != 0) {
                let other = warp_start + member;
                let (value, in_range) = results[member];
                let mut regs = threads.registers(other);
                regs.set(d, value);
                if let Some(p) = p {
                    regs.set(p, in_range as u64);
                }
                threads.pcs[other] += 1;
                threads.status[other] = Status::Ready;
            }
            progress = true;
        }
    }
    Ok(progress)
}

/// Describes what thread `thread` is doing, for deadlock messages.
fn doing(env: &Env, threads: &Threads, thread: usize) -> String {
    let line = env.kernel.lines.get(threads.pcs[thread] as usize).copied().unwrap_or(0);
    match threads.status[thread] {
        Status::Exited => "exited".into(),
        Status::Barrier => format!("waits at the bar.sync on line {line}"),
        Status::Shuffle => format!("waits at the shfl.sync on line {line}"),
        Status::Ready => "is running".into(),
    }
}

/// The error for a CTA where no waiting thread can go on.
fn deadlock(env: &Env, threads: &Threads) -> CtaFault {
    let tid = |t: usize| env.thread_index(t as u32);
    if let Some(waiter) = threads.status.iter().position(|&s| s == Status::Shuffle) {
        let pc = threads.pcs[waiter];
        let warp_start = waiter - waiter % WARP;
        let lanes = WARP.min(threads.status.len() - warp_start);
        // The membermask was read when resolving, so its register is written.
        let members = match env.kernel.code[pc as usize].op {
            Op::Shfl { mask, .. } => threads.values[waiter * threads.slots + mask as usize] as u32,
            _ => u32::MAX,
        };
        let culprit = (0..lanes)
            .filter(|lane| members & (1 << lane) != 0)
            .map(|lane| warp_start + lane)
            .find(|&t| !(threads.status[t] == Status::Shuffle && threads.pcs[t] == pc))
            .unwrap_or(waiter);
        let why = format!(
            "lane {} (thread {:?}) {} instead",
            culprit - warp_start,
            tid(culprit),
            doing(env, threads, culprit)
        );
        return shuffle_error(waiter, pc, why);
    }
    let waiter = threads.status.iter().position(|&s| s == Status::Barrier).unwrap_or(0);
    let pc = threads.pcs[waiter];
    let culprit = (0..threads.status.len())
        .find(|&t| !(threads.status[t] == Status::Barrier && threads.pcs[t] == pc))
        .unwrap_or(waiter);
    let why = format!("thread {:?} {} instead of reaching it", tid(culprit), doing(env, threads, culprit));
    CtaFault { thread: waiter as u32, pc, kind: ErrorKind::BarrierDivergence(why) }
}
