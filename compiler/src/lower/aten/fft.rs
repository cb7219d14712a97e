//! FFTs: aten._fft_r2c and aten._fft_c2r over float32 / complex64 values (see
//! [`super::complex`]). A multi-dimensional transform is one extern call of the support library's `__aotc_fft` per dimension,
//! each a call of the support library, in PyTorch's order: r2c along the last of `dim`
//! then c2c along the others; for c2r, c2c along all but the last, then c2r along it.
//! Each step scales by its own signal length, which multiplies out to torch's
//! normalization by the product of them.

use super::registry::LowerFn;
use crate::ir::{BufKind, ExternArg, ExternCall, Kernel};
use crate::lower::args::Args;
use crate::lower::tensor::{contiguous_strides, norm_dim, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::{fft, DType};

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[("_fft_r2c.default", r2c), ("_fft_c2r.default", c2r)];

/// `_fft_r2c(self, dim, normalization, onesided)`: the forward transform of a real input
/// over `dim`; with `onesided`, the last of `dim` keeps its first n / 2 + 1 outputs.
pub fn r2c(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    match (x.complex, x.dtype) {
        (true, _) => return Err("self is complex64; _fft_r2c transforms a real input".into()),
        (false, DType::F32) => {}
        (false, DType::F64) => {
            return Err("float64 FFTs (complex128 results) are not supported; aotc computes FFTs in float32".into())
        }
        (false, d @ (DType::F16 | DType::BF16)) => {
            return Err(format!("{d} FFTs are not supported (PyTorch has no CPU FFT for {d})"))
        }
        (false, d) => return Err(format!("_fft_r2c expects a floating-point input, got {d}")),
    }
    let dims = fft_dims(a, x.rank())?;
    let norm = normalization(a)?;
    let onesided = a.bool_or("onesided", true)?;
    let last = dims[dims.len() - 1];
    let n = x.sizes[last].clone();
    lw.require(
        SymExpr::Int(1),
        GuardOp::Le,
        n.clone(),
        &format!("the signal along dimension {last} has at least one element"),
    )?;
    let len_out = if onesided { half_spectrum(&n) } else { n };
    let name = a.node_name();
    let mut v = step(lw, &x, fft::REAL_TO_COMPLEX, norm, last, len_out, &name);
    for &d in &dims[..dims.len() - 1] {
        v = step(lw, &v, fft::FORWARD, norm, d, v.sizes[d].clone(), &name);
    }
    Ok(vec![v])
}

/// `_fft_c2r(self, dim, normalization, last_dim_size)`: the inverse transform over `dim`
/// of a spectrum whose last dimension holds the first last_dim_size / 2 + 1 entries of a
/// Hermitian one; the result has last_dim_size elements along it.
pub fn c2r(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    if !x.complex {
        return Err(format!("self is {}; _fft_c2r transforms a complex input", x.dtype));
    }
    let dims = fft_dims(a, x.logical_sizes().len())?;
    let norm = normalization(a)?;
    let n = a.sym_int(lw, "last_dim_size")?;
    let last = dims[dims.len() - 1];
    lw.require(SymExpr::Int(1), GuardOp::Le, n.clone(), "last_dim_size is at least 1")?;
    lw.require(
        half_spectrum(&n),
        GuardOp::Le,
        x.sizes[last].clone(),
        &format!("dimension {last} holds the last_dim_size / 2 + 1 entries of the half spectrum"),
    )?;
    let name = a.node_name();
    let mut v = x;
    for &d in &dims[..dims.len() - 1] {
        v = step(lw, &v, fft::INVERSE, norm, d, v.sizes[d].clone(), &name);
    }
    Ok(vec![step(lw, &v, fft::COMPLEX_TO_REAL, norm, last, n, &name)])
}

fn half_spectrum(n: &SymExpr) -> SymExpr {
    SymExpr::add([SymExpr::floor_div(n.clone(), SymExpr::Int(2)), SymExpr::Int(1)])
}

/// The transformed dimensions of a value of `rank` (torch's order: the last is the one
/// halved): at least one, in range, distinct.
fn fft_dims(a: &Args, rank: usize) -> Result<Vec<usize>, String> {
    let given = a.ints("dim")?;
    if rank == 0 || given.is_empty() {
        return Err(format!("an FFT needs at least one dimension to transform (dim {given:?}, rank {rank})"));
    }
    let mut dims = vec![];
    for d in given {
        let d = norm_dim(d, rank)?;
        if dims.contains(&d) {
            return Err(format!("dimension {d} is transformed twice"));
        }
        dims.push(d);
    }
    Ok(dims)
}

/// torch's normalization code, which is also the support library's (`aotc_abi::fft`).
fn normalization(a: &Args) -> Result<i64, String> {
    match a.int("normalization")? {
        v @ (fft::NORM_NONE | fft::NORM_BY_ROOT_N | fft::NORM_BY_N) => Ok(v),
        v => Err(format!("normalization must be 0 (none), 1 (1/sqrt(n)) or 2 (1/n), got {v}")),
    }
}

/// One 1-D transform of `x` along logical dimension `dim` into a new buffer, whose
/// dimension `dim` has `len_out` elements.
fn step(
    lw: &mut Lowerer,
    x: &TensorValue,
    kind: i64,
    norm: i64,
    dim: usize,
    len_out: SymExpr,
    name: &str,
) -> TensorValue {
    // The kernel reads [outer, len_in, inner] contiguously from an offset.
    let (x, r) = lw.strided(x, name);
    let (input, input_offset) = if r.strides == contiguous_strides(&x.sizes) {
        (r.buf, r.offset)
    } else {
        (lw.materialize(&x, name), SymExpr::Int(0))
    };
    let logical = x.logical_sizes();
    let complex = kind != fft::COMPLEX_TO_REAL;
    let mut sizes = logical.to_vec();
    sizes[dim] = len_out.clone();
    sizes.extend(complex.then_some(SymExpr::Int(2)));
    let out = lw.prog.add_buffer(name, DType::F32, sizes.clone(), BufKind::Scratch);
    let args = vec![
        ExternArg::Buf(input),
        ExternArg::Size(input_offset),
        ExternArg::Size(SymExpr::Int(kind)),
        ExternArg::Size(SymExpr::Int(norm)),
        ExternArg::Size(SymExpr::product(&logical[..dim])),
        ExternArg::Size(logical[dim].clone()),
        ExternArg::Size(len_out),
        ExternArg::Size(SymExpr::product(&logical[dim + 1..])),
    ];
    lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall { name: fft::SYMBOL, out, args, flops: SymExpr::Int(0) })));
    TensorValue { complex, ..TensorValue::view_of(out, DType::F32, sizes) }
}
