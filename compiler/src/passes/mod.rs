//! Passes over the lowered program before code generation.
//!
//! - [`plan`]: lays out the weights blob, gives every buffer a slot and every symbolic
//!   size the generated code needs an entry of the per-call dims table, and writes the
//!   manifest the support library reads.

pub mod plan;
