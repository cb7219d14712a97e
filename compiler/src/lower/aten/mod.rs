//! Lowerings of Core ATen operators, one file per family (`composite`: the operators
//! outside Core ATen that torch.export's default IR keeps, onto the Core ones). Each
//! family exports `OPS`, a table of (target without the `torch.ops.aten.` prefix,
//! lowering); [`registry`] joins them. Adding an operator is one entry plus its function.

pub mod activation;
pub mod complex;
pub mod composite;
pub mod conv;
pub mod creation;
pub mod data_dependent;
pub mod fft;
pub mod index;
pub mod linalg;
pub mod norm;
pub mod pad;
pub mod pointwise;
pub mod pool;
pub mod promote;
pub mod random;
pub mod reduction;
pub mod registry;
pub mod resize;
pub mod scan;
pub mod scatter;
pub mod signatures;
pub mod sort;
pub mod view;
