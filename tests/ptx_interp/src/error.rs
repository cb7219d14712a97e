//! The two error types: PTX the interpreter will not accept, and a launch that failed.

use std::fmt;

/// PTX outside the subset (SUBSET.md) or malformed: where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based source line.
    pub line: u32,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// The instruction and thread an execution error happened at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// 1-based PTX source line.
    pub line: u32,
    /// The instruction's source text.
    pub instruction: String,
    /// `%ctaid` and `%tid` of the thread.
    pub cta: [u32; 3],
    pub thread: [u32; 3],
}

/// A failed launch: the kernel, where (absent for errors in the launch itself), and why.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecError {
    pub kernel: String,
    pub site: Option<Site>,
    pub kind: ErrorKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ErrorKind {
    /// Bad launch configuration or arguments (no site).
    Launch(String),
    /// A global access outside every allocation or straddling an allocation's end.
    OutOfBounds {
        address: u64,
        bytes: u64,
    },
    /// A shared access outside the declared shared variables.
    SharedOutOfBounds {
        address: u64,
        bytes: u64,
        shared_bytes: u64,
    },
    Misaligned {
        address: u64,
        bytes: u64,
    },
    /// A read of a register no instruction of this thread wrote.
    Uninitialised {
        register: String,
    },
    DivisionByZero,
    /// A thread ran more instructions than the launch's step limit.
    StepLimit {
        limit: u64,
    },
    /// `bar.sync` that not every thread of the CTA reached.
    BarrierDivergence(String),
    /// `shfl.sync` whose membermask lanes did not all arrive.
    ShuffleDivergence(String),
    /// A shared-memory byte written by one thread and accessed by another between barriers.
    SharedRace {
        address: u64,
        other_cta: [u32; 3],
        other_thread: [u32; 3],
        other_wrote: bool,
    },
    /// A global byte written by one thread and accessed by another in one launch.
    GlobalRace {
        address: u64,
        other_cta: [u32; 3],
        other_thread: [u32; 3],
        other_wrote: bool,
    },
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Launch(message) => write!(f, "{message}"),
            ErrorKind::OutOfBounds { address, bytes } => {
                write!(f, "global access of {bytes} bytes at {address:#x} is outside every allocation")
            }
            ErrorKind::SharedOutOfBounds { address, bytes, shared_bytes } => write!(
                f,
                "shared access of {bytes} bytes at {address:#x} is outside the {shared_bytes} declared shared bytes"
            ),
            ErrorKind::Misaligned { address, bytes } => {
                write!(f, "access of {bytes} bytes at {address:#x} is misaligned")
            }
            ErrorKind::Uninitialised { register } => write!(f, "register {register} is read before written"),
            ErrorKind::DivisionByZero => write!(f, "integer division by zero"),
            ErrorKind::StepLimit { limit } => write!(f, "thread ran past the step limit of {limit} instructions"),
            ErrorKind::BarrierDivergence(why) => write!(f, "bar.sync divergence: {why}"),
            ErrorKind::ShuffleDivergence(why) => write!(f, "shfl.sync divergence: {why}"),
            ErrorKind::SharedRace { address, other_cta: _, other_thread, other_wrote } => write!(
                f,
                "shared-memory race at {address:#x}: thread {other_thread:?} {} it with no bar.sync between",
                if *other_wrote { "wrote" } else { "read" }
            ),
            ErrorKind::GlobalRace { address, other_cta, other_thread, other_wrote } => write!(
                f,
                "global-memory race at {address:#x}: thread {other_thread:?} of CTA {other_cta:?} {} it in the same launch",
                if *other_wrote { "wrote" } else { "read" }
            ),
        }
    }
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel {}: ", self.kernel)?;
        if let Some(site) = &self.site {
            write!(f, "line {} `{}`, CTA {:?} thread {:?}: ", site.line, site.instruction, site.cta, site.thread)?;
        }
        write!(f, "{}", self.kind)
    }
}

impl std::error::Error for ExecError {}
