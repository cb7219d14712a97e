//! The loop IR that lowering produces and code generation consumes.
//!
//! A [`program::Program`] is a list of buffers (weights, state, inputs, scratch) and an
//! ordered list of [`program::Kernel`]s that write them:
//! - `Pointwise`: `out[i...] = body(i...)`, one scalar expression per output element;
//! - `Reduction`: `out[i...] = combine_j body(i..., j...)`;
//! - `Matmul`: an extern GEMM call on strided operands;
//! - `Extern`: a call into the support library by name (convolution, max pool, row
//!   softmax/layer norm, GELU, `nonzero`'s scan, 1-D FFTs: the table is in docs/ir.md).
//!
//! Bodies are [`expr::Expr`] trees whose leaves load buffers at [`expr::Affine`] indices
//! of the loop variables. Views (permute, expand, slice...) only rewrite those indices;
//! fusion is substitution of one body into another's loads.
//!
//! **Architecture Invariant:** kernels write their `out` buffer contiguously and in full,
//! and never read it; a buffer is written by exactly one kernel. Two exceptions: a GEMM
//! with `accumulate` adds onto the addend the kernel just before it wrote into its `out`
//! ([`program::Kernel::reads_out`]), and every kernel that checks an index may write the
//! index-error record.
//!
//! [`verify`] checks what of this can be checked on a whole program; debug builds run it
//! after lowering and after every pass.

pub mod expr;
pub mod payload;
pub mod prims;
pub mod program;
pub mod verify;

pub use expr::{Affine, Expr, ExprKind, Scalar, E};
pub use payload::Payload;
pub use prims::Prim;
pub use program::{
    strided_elements, BufId, BufKind, Buffer, DataBinding, ExternArg, ExternCall, Kernel, LoopRegion, Matmul,
    Placement, Program, ReduceOp, StridedRef,
};
