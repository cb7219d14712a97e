//! The one registry of lowerings.

use super::super::args::Args;
use super::super::tensor::TensorValue;
use super::super::Lowerer;

/// Lowers one node: its results, in the order of the node's (flattened) outputs.
pub type LowerFn = fn(&mut Lowerer, &Args) -> Result<Vec<TensorValue>, String>;

const FAMILIES: &[&[(&str, LowerFn)]] = &[
    super::pointwise::OPS,
    super::reduction::OPS,
    super::view::OPS,
    super::linalg::OPS,
    super::creation::OPS,
    super::index::OPS,
    super::activation::OPS,
    super::conv::OPS,
    super::pool::OPS,
    super::norm::OPS,
    super::resize::OPS,
    super::pad::OPS,
    super::scatter::OPS,
    super::scan::OPS,
    super::sort::OPS,
    super::data_dependent::OPS,
    super::random::OPS,
    super::fft::OPS,
    super::composite::math::OPS,
    super::composite::nn::OPS,
    super::composite::rnn::OPS,
    super::composite::shape::OPS,
    super::composite::tensor::OPS,
];

/// The lowering of `target` and its operator name ("add.Tensor").
pub fn lookup(target: &str) -> Option<(&'static str, LowerFn)> {
    let op = target.strip_prefix("torch.ops.aten.")?;
    FAMILIES.iter().flat_map(|f| f.iter()).find(|(name, _)| *name == op).copied()
}

/// Every operator with a lowering.
pub fn operators() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().flat_map(|f| f.iter()).map(|(name, _)| *name)
}
