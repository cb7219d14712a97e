//! Running one thread from an instruction until it exits or reaches a synchronisation
//! point (`bar.sync`, `shfl.sync`), which the CTA scheduler (`cta.rs`) resolves.

mod access;

use crate::error::ErrorKind;
use crate::inst::{CmpTy, FloatTy, Op, Slot, Space, UNGUARDED};
use crate::kernel::Kernel;
use crate::memory::Memory;
use crate::ops::{cvt, float, int};
use crate::race::RaceLogs;

/// What a thread runs against: the kernel, memory, and where it is in the launch.
pub(crate) struct Env<'a> {
    pub kernel: &'a Kernel,
    pub memory: &'a mut Memory,
    pub params: &'a [u8],
    /// The running CTA's shared memory.
    pub shared: Vec<u8>,
    pub races: Option<RaceLogs>,
    /// The most instructions one thread may run.
    pub step_limit: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub cta: [u32; 3],
    /// The launch-wide id of the running CTA's first thread.
    pub first_global_thread: u32,
}

impl Env<'_> {
    /// `%tid` of the thread with linear index `linear` in its CTA (x fastest).
    pub(crate) fn thread_index(&self, linear: u32) -> [u32; 3] {
        let [x, y, _] = self.block;
        [linear % x, linear / x % y, linear / (x * y)]
    }

    /// `%ctaid` and `%tid` of a launch-wide thread id.
    pub(crate) fn global_thread_index(&self, id: u32) -> ([u32; 3], [u32; 3]) {
        let per_cta = self.block.iter().product::<u32>();
        let cta = id / per_cta;
        let [x, y, _] = self.grid;
        ([cta % x, cta / x % y, cta / (x * y)], self.thread_index(id % per_cta))
    }
}

/// Why a thread stopped (its pc then points at the instruction it waits at).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Exit,
    Barrier,
    Shuffle,
}

/// An error at instruction `pc` of the running thread.
#[derive(Debug)]
pub(crate) struct Fault {
    pub pc: u32,
    pub kind: ErrorKind,
}

/// One thread's registers and whether each was written.
pub(crate) struct Registers<'r> {
    pub values: &'r mut [u64],
    pub written: &'r mut [bool],
}

impl Registers<'_> {
    #[inline(always)]
    pub(crate) fn get(&self, slot: Slot, kernel: &Kernel) -> Result<u64, ErrorKind> {
        let index = slot as usize;
        if !self.written[index] {
            return Err(ErrorKind::Uninitialised { register: kernel.slot_name(slot).to_string() });
        }
        Ok(self.values[index])
    }

    #[inline(always)]
    pub(crate) fn set(&mut self, slot: Slot, value: u64) {
        self.values[slot as usize] = value;
        self.written[slot as usize] = true;
    }
}

/// Runs `thread` from `*pc` until it stops; `*pc` and `*steps` are kept up to date.
pub(crate) fn run(
    env: &mut Env,
    regs: &mut Registers,
    thread: u32,
    pc: &mut u32,
    steps: &mut u64,
) -> Result<Stop, Fault> {
    let budget = env.step_limit.saturating_sub(*steps);
    let (result, at, ran) = run_inner(env, regs, thread, *pc, budget);
    *pc = at;
    *steps += ran;
    result.map_err(|kind| Fault { pc: at, kind })
}

/// The loop proper: `pc` and the step count live in locals (not behind references) so
/// they stay in registers; returns them with the outcome.
fn run_inner(
    env: &mut Env,
    regs: &mut Registers,
    thread: u32,
    start: u32,
    budget: u64,
) -> (Result<Stop, ErrorKind>, u32, u64) {
    let kernel = env.kernel;
    let code = &kernel.code[..];
    let mut pc = start;
    let mut ran = 0u64;
    let result = 'run: loop {
        // Defined inside the loop so that their `break 'run` sees the label.
        macro_rules! attempt {
            ($result:expr) => {
                match $result {
                    Ok(value) => value,
                    Err(kind) => break 'run Err(kind),
                }
            };
        }
        macro_rules! get {
            ($slot:expr) => {
                attempt!(regs.get($slot, kernel))
            };
        }
        let Some(inst) = code.get(pc as usize) else {
            break Ok(Stop::Exit);
        };
        if ran == budget {
            break Err(ErrorKind::StepLimit { limit: env.step_limit });
        }
        ran += 1;
        if inst.guard != UNGUARDED && (get!(inst.guard) != 0) == inst.guard_negated {
            pc += 1;
            continue;
        }
        match inst.op {
            Op::Mov { d, a } => regs.set(d, get!(a)),
            Op::IntBin { op, ty, d, a, b } => {
                let value = attempt!(int::binary(op, ty, get!(a), get!(b)).ok_or(ErrorKind::DivisionByZero));
                regs.set(d, value);
            }
            Op::FloatBin { op, ty: FloatTy::F32, rnd, ftz, d, a, b } => {
                regs.set(d, float::f32_binary(op, rnd, ftz, get!(a) as u32, get!(b) as u32) as u64)
            }
            Op::FloatBin { op, ty: FloatTy::F64, rnd, d, a, b, .. } => {
                regs.set(d, float::f64_binary(op, rnd, get!(a), get!(b)))
            }
            Op::Fma { ty, ftz, d, a, b, c } => regs.set(d, float::fma(ty, ftz, get!(a), get!(b), get!(c))),
            Op::Ld { space, ty, d, count, addr, offset } => {
                let address = get!(addr).wrapping_add(offset as u64);
                let mut values = [0u64; 4];
                let values = &mut values[..count as usize];
                attempt!(env.load(space == Space::Shared, address, ty, values, thread));
                for (&slot, &value) in d.iter().zip(values.iter()) {
                    regs.set(slot, value);
                }
            }
            Op::St { space, bytes, src, count, addr, offset } => {
                let address = get!(addr).wrapping_add(offset as u64);
                let mut values = [0u64; 4];
                for (value, &slot) in values.iter_mut().zip(&src[..count as usize]) {
                    *value = get!(slot);
                }
                attempt!(env.store(space == Space::Shared, address, bytes as usize, &values[..count as usize], thread));
            }
            Op::Setp { cmp, ty, d, a, b, combine } => {
                let (x, y) = (get!(a), get!(b));
                let mut result = match ty {
                    CmpTy::Int(int) => compare_int(cmp, int.extend(x), int.extend(y)),
                    CmpTy::F32 { ftz } => {
                        let widen = |bits: u64| {
                            let value = f32::from_bits(bits as u32);
                            (if ftz { float::flush(value) } else { value }) as f64
                        };
                        float::compare(cmp, widen(x), widen(y))
                    }
                    CmpTy::F64 => float::compare(cmp, f64::from_bits(x), f64::from_bits(y)),
                };
                if let Some(combine) = combine {
                    let other = (get!(combine.pred) != 0) != combine.negate;
                    result = match combine.op {
                        crate::inst::BoolOp::And => result && other,
                        crate::inst::BoolOp::Or => result || other,
                        crate::inst::BoolOp::Xor => result != other,
                    };
                }
                regs.set(d, result as u64);
            }
            Op::Selp { d, a, b, p } => {
                let value = if get!(p) != 0 { get!(a) } else { get!(b) };
                regs.set(d, value);
            }
            Op::Bra { target } => {
                pc = target;
                continue;
            }
            Op::LdParam { d, offset, ty } => regs.set(d, env.load_param(offset, ty)),
            Op::Mad { ty, part, d, a, b, c } => regs.set(d, int::mad(ty, part, get!(a), get!(b), get!(c))),
            Op::MulWide { ty, d, a, b } => regs.set(d, int::mul_wide(ty, get!(a), get!(b))),
            Op::IntUn { op, ty, d, a } => regs.set(d, int::unary(op, ty, get!(a))),
            Op::FloatUn { op, ty: FloatTy::F32, ftz, d, a } => {
                regs.set(d, float::f32_unary(op, ftz, get!(a) as u32) as u64)
            }
            Op::FloatUn { op, ty: FloatTy::F64, d, a, .. } => regs.set(d, float::f64_unary(op, get!(a))),
            Op::Cvt { to, from, rnd, sat, ftz, d, a } => regs.set(d, cvt::cvt(to, from, rnd, sat, ftz, get!(a))),
            Op::Testp { class, ty, d, a } => regs.set(d, float::testp(class, ty, get!(a)) as u64),
            Op::Pack { d, lo, hi, half_bits } => {
                let mask = (1u64 << half_bits) - 1;
                regs.set(d, (get!(lo) & mask) | (get!(hi) & mask) << half_bits);
            }
            Op::Unpack { lo, hi, a, half_bits } => {
                let value = get!(a);
                let mask = (1u64 << half_bits) - 1;
                regs.set(lo, value & mask);
                regs.set(hi, (value >> half_bits) & mask);
            }
            Op::Atom { op, ty, d, addr, offset, b, c } => {
                let address = get!(addr).wrapping_add(offset as u64);
                let old = attempt!(env.atomic(op, ty, address, get!(b), get!(c)));
                regs.set(d, old);
            }
            Op::Exit => break Ok(Stop::Exit),
            Op::BarSync => break Ok(Stop::Barrier),
            Op::Shfl { .. } => break Ok(Stop::Shuffle),
            Op::Nop => {}
        }
        pc += 1;
    };
    (result, pc, ran)
}

#[inline(always)]
fn compare_int(cmp: crate::inst::CmpOp, x: i128, y: i128) -> bool {
    use crate::inst::CmpOp::*;
    match cmp {
        Eq => x == y,
        Ne => x != y,
        Lt => x < y,
        Le => x <= y,
        Gt => x > y,
        Ge => x >= y,
        // Decoding allows only the six above for integers.
        _ => false,
    }
}
