//! Passes over the lowered program before code generation.
//!
//! - [`plan`]: lays out the weights blob, gives every buffer a slot and every symbolic
//!   size the generated code needs an entry of the per-call dims table, and writes the
//!   manifest the support library reads;
//! - [`arena`]: which scratch slots share one allocation by lifetime, and where;
//! - [`fold`]: kernels that only copy a weight, computed at compile time;
//! - [`prepack`]: weights that are a GEMM's right operand, packed into its panels.

pub mod arena;
pub mod fold;
pub mod plan;
pub mod prepack;
