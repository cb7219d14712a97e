//! Passes over the lowered program before code generation.
//!
//! - [`plan`]: lays out the weights blob, gives every buffer a slot and every symbolic
//!   size the generated code needs an entry of the per-call dims table, and writes the
//!   manifest the support library reads;
//! - [`arena`]: which scratch slots share one allocation by lifetime, and where;
//! - [`fold`]: kernels that only copy a weight, computed at compile time;
//! - [`prepack`]: weights that are a GEMM's right operand, packed into its panels;
//! - [`epilogue`]: a Linear layer's bias and GELU fused into its packed GEMM's output pass,
//!   a hardswish into its convolution's.

pub mod arena;
pub mod epilogue;
pub mod fold;
pub mod plan;
pub mod prepack;

use crate::lower::Lowered;
use crate::Target;

/// The passes between lowering and planning, in order: folding for every target; packing
/// and the fusions that need the packed kernel for the CPU only (its layouts).
pub fn optimize(lowered: &mut Lowered, target: Target) {
    fold::fold_weight_copies(lowered);
    if target == Target::Cpu {
        prepack::prepack_weights(lowered);
        epilogue::fuse_epilogues(lowered);
    }
}
