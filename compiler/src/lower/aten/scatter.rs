//! (being written)

use super::registry::LowerFn;

pub const OPS: &[(&str, LowerFn)] = &[];
