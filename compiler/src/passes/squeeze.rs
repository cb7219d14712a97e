//! Leading unit dimensions of pointwise and reduction kernels dropped: the driver splits a
//! kernel across threads along its first loop (`Kernel::split`), so a batch-1 result
//! ([1, C, H, W], every kernel of an inference at batch 1) would run on one thread. Row-major
//! order, and so the element each iteration writes, is unchanged.

use crate::ir::expr::{substitute, Affine};
use crate::ir::Kernel;
use crate::lower::Lowered;
use aotc_abi::sym::SymExpr;

pub fn squeeze_leading_units(lowered: &mut Lowered) {
    for k in lowered.program.kernels.iter_mut() {
        let (ranges, body, reduced) = match k {
            Kernel::Pointwise { ranges, body, .. } => (ranges, body, 0),
            Kernel::Reduction { ranges, body, reduce, .. } => (ranges, body, reduce.len()),
            Kernel::Matmul(_) | Kernel::Extern(_) => continue,
        };
        let units = ranges.iter().take_while(|r| **r == SymExpr::Int(1)).count().min(ranges.len().saturating_sub(1));
        if units == 0 {
            continue;
        }
        // Body variables: the output's, then (a reduction's) the reduced ones; the first
        // `units` become 0 and the others move down.
        let vars = ranges.len() + reduced;
        let map: Vec<Affine> = (0..vars)
            .map(|v| if v < units { Affine::constant(SymExpr::Int(0)) } else { Affine::var(v - units) })
            .collect();
        *body = substitute(body, &map);
        ranges.drain(..units);
    }
}
