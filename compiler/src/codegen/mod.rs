//! Code generation. `cpu` emits one relocatable object with Cranelift: a function per
//! kernel, the graph driver `__aotc_graph_run`, the manifest and the weights. `cuda`
//! prints one PTX module with an entry per kernel and a launch descriptor for each.

pub mod cpu;
pub mod cuda;
