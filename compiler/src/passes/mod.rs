//! Passes over the lowered program before code generation.
//!
//! - [`plan`]: lays out the weights blob, gives every buffer a slot and every symbolic
//!   size the generated code needs an entry of the per-call dims table, and writes the
//!   manifest the support library reads;
//! - [`arena`]: which scratch slots share one allocation by lifetime, and where;
//! - [`fold`]: kernels that only copy a weight, computed at compile time;
//! - [`prepack`]: weights that are a GEMM's right operand, packed into its panels;
//! - [`epilogue`]: a Linear layer's bias and GELU fused into its packed GEMM's output pass,
//!   a hardswish or SiLU into its convolution's;
//! - [`squeeze`]: leading unit dimensions of loop kernels dropped, so that batch-1 kernels
//!   split across threads;
//! - [`collapse`]: adjacent loops that every index walks as one merged (and unit loops
//!   dropped), so that the vectorized innermost loop is long;
//! - [`hoist`]: expensive work of a pointwise kernel that depends only on its outer loop
//!   (squeeze-and-excite's per-channel sigmoid) computed once per outer index, by a kernel
//!   of its own;
//! - [`gate`]: a squeeze-and-excite gate's product folded into the pointwise convolution
//!   that reads it (the support library scales the input channels);
//! - [`concat_in_place`]: the parts of a concatenation placed inside its buffer, so that
//!   their producers write them there and the copy goes;
//! - [`concat_reorder`]: a concatenation whose only reader reorders it by whole runs (a
//!   channel shuffle) writes that order itself, and the copy goes;
//! - [`copy_in_place`]: a copy of a contiguous run of a buffer placed over that run.

pub mod arena;
pub mod collapse;
pub mod concat_in_place;
pub mod concat_reorder;
pub mod copy_in_place;
pub mod epilogue;
pub mod fold;
pub mod gate;
pub mod hoist;
pub mod plan;
pub mod prepack;
pub mod squeeze;

use crate::lower::Lowered;
use crate::Target;

/// A pass: its name (for the verifier's message), whether it runs for the CPU target only,
/// and the pass.
type Pass = (&'static str, bool, fn(&mut Lowered));

/// The passes between lowering and planning, in order: folding for every target; packing
/// and the fusions that need the packed kernel for the CPU only (its layouts); squeezing,
/// collapsing loops and hoisting for every target, then for the CPU (whose concatenations
/// are calls) the gates, the concatenations in place or reordered, the contiguous copies
/// in place.
const PASSES: [Pass; 10] = [
    ("fold", false, fold::fold_weight_copies),
    ("prepack", true, prepack::prepack_weights),
    ("epilogue", true, epilogue::fuse_epilogues),
    ("squeeze", false, squeeze::squeeze_leading_units),
    ("collapse", false, collapse::collapse_loops),
    ("hoist", false, hoist::hoist_outer_invariants),
    ("gate", true, gate::fold_input_maps),
    ("concat_in_place", true, concat_in_place::place_concat_parts),
    ("concat_reorder", true, concat_reorder::fold_reordering_copies),
    ("copy_in_place", true, copy_in_place::place_contiguous_copies),
];

/// Runs [`PASSES`] for `target`. Debug builds (the tests) verify the program after
/// lowering and after each pass.
pub fn optimize(lowered: &mut Lowered, target: Target) {
    verified(lowered, "lowering");
    for (name, cpu_only, pass) in PASSES {
        if !cpu_only || target == Target::Cpu {
            pass(lowered);
            verified(lowered, name);
        }
    }
}

/// Panics, in debug builds, when `stage` left a program that breaks the IR's invariants
/// (`ir::verify`): a compiler bug, caught where it was made.
fn verified(lowered: &Lowered, stage: &str) {
    if cfg!(debug_assertions) {
        if let Err(e) = crate::ir::verify::verify(&lowered.program) {
            panic!("the IR after {stage} breaks its invariants:\n{e}");
        }
    }
}
