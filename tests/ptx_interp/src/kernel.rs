//! A decoded entry: its code, parameter layout, shared-memory size and the layout of a
//! thread's register file.

use crate::inst::{Inst, Slot};

/// The special registers' slots, first in every register file.
pub(crate) mod special {
    pub const TID: u32 = 0; // .x .y .z at 0, 1, 2
    pub const NTID: u32 = 3;
    pub const CTAID: u32 = 6;
    pub const NCTAID: u32 = 9;
    pub const LANEID: u32 = 12;
    pub const WARPID: u32 = 13;
    pub const COUNT: u32 = 14;
}

/// How a parameter's argument must look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParamKind {
    Int,
    Float,
    /// `.bN`: any argument of the width.
    Bits,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Param {
    pub name: String,
    pub ty: String,
    pub kind: ParamKind,
    pub bytes: u32,
    /// Offset in the parameter buffer `ld.param` reads.
    pub offset: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
    pub param_bytes: u32,
    pub maxntid: Option<[u32; 3]>,
    pub shared_bytes: u32,
    pub code: Vec<Inst>,
    /// Per instruction: its source line and text (for errors only).
    pub lines: Vec<u32>,
    pub texts: Vec<String>,
    /// Per slot: the register's name (or the immediate's text).
    pub slot_names: Vec<String>,
    /// A fresh thread's register file: immediates filled in, everything else 0.
    pub initial_values: Vec<u64>,
    /// Which slots count as written when a thread starts: immediates and special registers.
    pub initially_written: Vec<bool>,
}

impl Kernel {
    pub(crate) fn slot_name(&self, slot: Slot) -> &str {
        self.slot_names.get(slot as usize).map_or("?", String::as_str)
    }
}
