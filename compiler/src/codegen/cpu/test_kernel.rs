//! Test support: one pointwise kernel over a 1-D input, compiled into a library and run.

use crate::ir::expr::{load, Affine, E};
use crate::ir::{BufId, BufKind, Kernel, Program};
use crate::lower::{Lowered, LoweredInput};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use aotc_runtime::{Device, Model, Tensor, Value};

/// A library of one pointwise kernel `y = body(x)`, loaded.
pub struct PointwiseKernel {
    model: Model,
    from: DType,
    n: i64,
    // Last: the library is unloaded before its folder goes.
    _dir: tempfile::TempDir,
}

/// Compiles `y = body(x)` for a 1-D `x` of `n` elements of dtype `from` and a `y` of dtype
/// `to`. With `vector`, the kernel runs on f32x4 lanes where `body` allows (the last
/// `n % 4` elements on scalars); without, `y` is [n, 1] so that the inner loop is too
/// short for them.
pub fn compile_pointwise(from: DType, to: DType, n: i64, vector: bool, body: impl FnOnce(E) -> E) -> PointwiseKernel {
    let out_sizes = if vector { vec![n] } else { vec![n, 1] };
    compile(from, to, n, &out_sizes, |x| body(load(x, from, Affine::var(0))))
}

/// Compiles `y = body(x)` for a 1-D buffer `x` of `n` elements and a `y` of `out_sizes`
/// (`body` over its loop variables).
fn compile(from: DType, to: DType, n: i64, out_sizes: &[i64], body: impl FnOnce(BufId) -> E) -> PointwiseKernel {
    let sizes = vec![SymExpr::Int(n)];
    let out_sizes: Vec<SymExpr> = out_sizes.iter().map(|&s| SymExpr::Int(s)).collect();
    let mut program = Program::default();
    let x = program.add_buffer("x", from, sizes.clone(), BufKind::Input(0));
    let y = program.add_buffer("y", to, out_sizes.clone(), BufKind::Scratch);
    let body = body(x);
    assert_eq!(body.dtype, to, "the body computes {}, not {to}", body.dtype);
    program.kernels.push(Kernel::Pointwise { out: y, ranges: out_sizes, body });
    let lowered = Lowered {
        program,
        inputs: vec![LoweredInput::Tensor { name: "x".into(), dtype: from, sizes, buf: x }],
        outputs: vec![("y".into(), y)],
        ..Lowered::default()
    };
    let mut plan = crate::passes::plan::plan(&lowered, "codegen unit test").unwrap();
    let written = crate::weights_out::write(&lowered.program, &mut plan, None).unwrap();
    let object = super::emit_object(&lowered.program, &plan).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("kernel.so");
    crate::link::link(&object, written.object(), &so).unwrap();
    PointwiseKernel { model: Model::load(&so, Device::Cpu).unwrap(), from, n, _dir: dir }
}

impl PointwiseKernel {
    /// `y`'s bytes for `x`'s (little-endian elements).
    pub fn run(&mut self, input: Vec<u8>) -> Vec<u8> {
        let x = Tensor { dtype: self.from, shape: vec![self.n], data: input };
        self.model.run(&mut [Value::Tensor(x)]).unwrap().remove(0).data
    }
}

/// Compiles `y = body(x)` (see [`compile_pointwise`]) and runs it on `input`.
pub fn run_pointwise(from: DType, to: DType, input: Vec<u8>, vector: bool, body: impl FnOnce(E) -> E) -> Vec<u8> {
    let n = (input.len() / from.size()) as i64;
    compile_pointwise(from, to, n, vector, body).run(input)
}

/// Compiles `y[i, j] = body(x[i + rows * j])` for `y` of `[rows, cols]` (a transpose of `x`,
/// a row-major `[cols, rows]`) and runs it on `input`.
pub fn run_transposed(from: DType, to: DType, input: Vec<u8>, rows: i64, body: impl FnOnce(E) -> E) -> Vec<u8> {
    let n = (input.len() / from.size()) as i64;
    let index = Affine::var(0).plus(&Affine::var(1).scale(&SymExpr::Int(rows)));
    compile(from, to, n, &[rows, n / rows], |x| body(load(x, from, index))).run(input)
}

/// Compiles `y = body(x)` for `y` of `out_sizes`, `body` reading buffer `x` (any way: computed
/// offsets, too), and runs it on `input`.
pub fn run_on_buffer(
    from: DType,
    to: DType,
    input: Vec<u8>,
    out_sizes: &[i64],
    body: impl FnOnce(BufId) -> E,
) -> Vec<u8> {
    let n = (input.len() / from.size()) as i64;
    compile(from, to, n, out_sizes, body).run(input)
}
