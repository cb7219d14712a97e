//! An interpreter for the PTX subset aotc's CUDA backend emits (see `SUBSET.md`), so that
//! generated kernels can be executed and checked on machines without a GPU.
//!
//! ```text
//!  PTX text ── lex.rs ── parse.rs ── decode/ ──► Module (Kernel per entry: Vec<Inst>)
//!                                                   │ launch.rs: args checked, CTAs in order
//!                                                   ▼
//!                       cta.rs: threads of one CTA, bar.sync and shfl.sync resolved
//!                                                   │
//!                       exec/: one thread's instructions (ops/: the semantics)
//! ```
//!
//! ```
//! use aotc_ptx_interp::{Arg, Launch, Memory, Module};
//! let ptx = r#"
//! .version 7.8
//! .target sm_80
//! .address_size 64
//! .visible .entry fill(.param .u64 out)
//! {
//!     .reg .b32 %r<2>;
//!     .reg .b64 %rd<4>;
//!     ld.param.u64 %rd1, [out];
//!     mov.u32 %r1, %tid.x;
//!     mul.wide.u32 %rd2, %r1, 4;
//!     add.s64 %rd3, %rd1, %rd2;
//!     st.global.u32 [%rd3], %r1;
//!     ret;
//! }
//! "#;
//! let module = Module::parse(ptx).unwrap();
//! let mut memory = Memory::new();
//! let out = memory.alloc(4 * 64, 4).unwrap();
//! let stats = module.launch(&mut memory, "fill", &Launch::new([1, 1, 1], [64, 1, 1]), &[Arg::U64(out)]).unwrap();
//! assert_eq!(memory.download::<u32>(out, 64).unwrap()[63], 63);
//! assert_eq!(stats.threads, 64);
//! ```
//!
//! # Execution model
//!
//! - Instructions are decoded once into `inst::Inst`, an enum whose operands are all slots
//!   of the thread's register file: immediates and special registers (`%tid.x`, ...) get
//!   slots filled when a thread starts, labels become instruction indices. Nothing is
//!   looked up by name while running.
//! - Every register is a 64-bit bit pattern; typed instructions read the low bits they
//!   need and write results zero-extended (sign-extended for signed narrow loads). Each
//!   register has a written bit: reading a register no instruction wrote is an error.
//! - CTAs run one after another. Inside a CTA, threads (warps of 32 by linear thread id,
//!   x fastest) run one at a time until they exit or reach `bar.sync` or `shfl.sync`.
//!   A shuffle is resolved when every lane of its membermask waits at the same
//!   instruction with the same mask; a barrier when every thread of the CTA waits at the
//!   same `bar.sync`. If neither can happen the CTA is deadlocked, and the error names a
//!   thread that is missing and what it does instead (exited, another barrier, ...).
//!   This is the behaviour of independent thread scheduling (sm_70+) minus any ordering
//!   between threads that PTX does not guarantee: a kernel whose result depends on such
//!   an order (a race) gets one arbitrary order here; `check_races` reports those.
//! - Global memory (`Memory`) is a set of allocations with unmapped gaps between them;
//!   shared memory is per CTA, addressed from 0 by `ld/st.shared`. Generic addresses are
//!   the same numbers (`cvta` is a move); the state space of the instruction decides.
//!
//! # Limits
//!
//! - Only the subset in `SUBSET.md`; anything else is a `ParseError` naming the line.
//! - The approximate instructions (`ex2.approx`, `sin.approx`, `div.approx`, ...) return
//!   the correctly rounded result, not the hardware's approximation.
//! - NaN results are the canonical NaN (all exponent and mantissa bits set).
//! - Shared memory starts zeroed in every CTA (on a GPU it is undefined); reads of shared
//!   bytes no thread wrote are not reported.
//! - No memory-model effects: a thread sees every store as soon as it is made.
//! - CTAs run on one thread. Release builds run about 150-200 M instructions/s
//!   (`examples/bench.rs`), unoptimised builds about 6 M/s.
//! - The race check logs 12 bytes per byte of every global allocation a launch touches.

mod cta;
mod decode;
mod error;
mod exec;
mod float16;
mod inst;
mod kernel;
mod launch;
mod lex;
mod memory;
mod ops;
mod parse;
mod race;
mod rounding;

pub use error::{ErrorKind, ExecError, ParseError, Site};
pub use launch::{Arg, Launch, Module, Stats, DEFAULT_STEP_LIMIT};
pub use memory::{Element, Memory, MemoryError};
