//! Lowerings of Core ATen operators, one file per family. Each family exports `OPS`, a
//! table of (target without the `torch.ops.aten.` prefix, lowering); [`registry`] joins
//! them. Adding an operator is one entry plus its function.

pub mod creation;
pub mod index;
pub mod linalg;
pub mod pointwise;
pub mod promote;
pub mod reduction;
pub mod registry;
pub mod signatures;
pub mod view;
