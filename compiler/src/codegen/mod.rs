//! Code generation. `cpu` emits one relocatable object with Cranelift: a function per
//! kernel, the graph driver `__aotc_graph_run`, the manifest and the weights.

pub mod cpu;
