//! Random numbers: rand, randn, randperm.
//!
//! A counter-based generator: each random bit pattern is a pure function of (seed, node,
//! element), computed inside the kernels that use it. A value can therefore be fused into
//! any consumer and recomputed there (sort compares every element with every other) and
//! still be the same number, and no kernel needs sequential state.
//!
//! The seed is hidden model state: the int64 scalar buffer `__aotc_rng_state`, created
//! with the first random node (a program without one has no such buffer) and advanced by
//! one after every call, so each call draws fresh numbers; writing the buffer reseeds.
//! Each random node of a program gets a stream of its own (its ordinal), so two `rand`
//! nodes differ. The numbers are not PyTorch's: its generator cannot be reproduced from
//! a compiled program (nor is it promised across PyTorch versions).

use super::registry::LowerFn;
use super::scatter::{flat_position, reduce_where, var_value};
use crate::error::Error;
use crate::frontend::schema::Argument;
use crate::ir::expr::{binary, cast, constant, int, load, unary, Affine, E};
use crate::ir::{BufId, Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::{LoweredBuffer, Lowerer};
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

/// The name of the seed buffer in the library's interface.
pub const STATE_NAME: &str = "__aotc_rng_state";

/// The seed a new instance starts from (PyTorch's default seed; the numbers still differ
/// from PyTorch's).
const DEFAULT_SEED: i64 = 67280421310721;

/// torch.export's code for `torch.strided` (its serialized `Layout` enum).
const STRIDED: i64 = 7;

/// The generator of a program: its seed buffer and how many streams nodes have taken.
#[derive(Clone, Copy)]
pub struct Rng {
    state: BufId,
    streams: u64,
}

pub const OPS: &[(&str, LowerFn)] = &[
    ("rand.default", rand),
    ("rand.generator", rand),
    ("randn.default", randn),
    ("randn.generator", randn),
    ("randperm.default", randperm),
    ("randperm.generator", randperm),
];

/// splitmix64's finalizer on a u64 known now.
fn mix_now(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The same on an int64 expression (the multiplications wrap): a bijection of 64 bits in
/// which every output bit depends on every input bit.
fn mix(z: E) -> E {
    let xor_shift = |z: E, k: i64| binary(Prim::BitXor, z.clone(), binary(Prim::ShrU, z, int(k)));
    let z = binary(Prim::Mul, xor_shift(z, 30), int(0xbf58_476d_1ce4_e5b9_u64 as i64));
    let z = binary(Prim::Mul, xor_shift(z, 27), int(0x94d0_49bb_1331_11eb_u64 as i64));
    xor_shift(z, 31)
}

/// One node's random bits.
struct Stream {
    /// `mix(seed ^ salt)`, the salt a constant of the node's stream number.
    key: E,
}

impl Stream {
    /// 64 random bits for `counter` (int64): `mix(key + counter * golden gamma)`, the
    /// construction of SplitMix64, whose output sequence passes BigCrush; keys apart by
    /// anything but a small multiple of the gamma give unrelated sequences.
    fn bits(&self, counter: E) -> E {
        const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
        mix(binary(Prim::Add, self.key.clone(), binary(Prim::Mul, counter, int(GAMMA as i64))))
    }
}

/// A new stream for the node being lowered, creating the seed buffer on first use.
fn stream(lw: &mut Lowerer) -> Stream {
    let rng = match lw.rng {
        Some(rng) => rng,
        // State (add_weight only asks whether it is), listed as a buffer by `finish`.
        None => Rng {
            state: lw.add_weight(STATE_NAME, Some(0), DType::I64, vec![], DEFAULT_SEED.to_le_bytes().to_vec().into()),
            streams: 0,
        },
    };
    lw.rng = Some(Rng { streams: rng.streams + 1, ..rng });
    let salt = int(mix_now(rng.streams + 1) as i64);
    Stream { key: mix(binary(Prim::BitXor, seed(rng.state), salt)) }
}

/// The seed this call reads (the state buffer's one element).
fn seed(state: BufId) -> E {
    load(state, DType::I64, Affine::constant(SymExpr::Int(0)))
}

/// If any node drew random numbers: lists the seed as a model buffer and adds the
/// mutation that advances it by one per call (applied after the call, so every kernel of
/// the call reads the same seed).
pub fn finish(
    lw: &mut Lowerer,
    buffers: &mut Vec<LoweredBuffer>,
    mutations: &mut Vec<(BufId, usize)>,
) -> Result<(), Error> {
    let Some(rng) = lw.rng else { return Ok(()) };
    if buffers.iter().any(|b| b.fqn == STATE_NAME) {
        return Err(Error::Unsupported(format!(
            "the program has a buffer named '{STATE_NAME}', the name of aotc's random generator state"
        )));
    }
    let next = TensorValue::lazy(DType::I64, vec![], binary(Prim::Add, seed(rng.state), int(1)));
    let buf = lw.materialize(&next, &format!("{STATE_NAME}.next"));
    buffers.push(LoweredBuffer { fqn: STATE_NAME.into(), buf: rng.state });
    mutations.push((buf, buffers.len() - 1));
    Ok(())
}

/// Significand bits (with the implicit one) of a float dtype.
fn significand_bits(d: DType) -> Option<u32> {
    match d {
        DType::BF16 => Some(8),
        DType::F16 => Some(11),
        DType::F32 => Some(24),
        DType::F64 => Some(53),
        _ => None,
    }
}

/// The top `m` bits of `bits` times 2^-m, in float64: uniform on a grid of 2^m points of
/// [0, 1) that a dtype with `m` significand bits holds exactly, so rounding to it can never
/// give 1.0 (PyTorch's rand uses 24 bits for float32 the same way).
fn top_bits_fraction(bits: E, m: u32) -> E {
    let k = binary(Prim::ShrU, bits, int(64 - m as i64));
    binary(Prim::Mul, cast(k, DType::F64), constant(Scalar::F((-(m as f64)).exp2()), DType::F64))
}

/// Arguments every random op shares besides its dtype: a dense tensor on the library's
/// device is what it makes (as for every factory op, the device the export named is not
/// where the library runs), and no torch.Generator can reach a compiled program.
fn check_options(a: &Args) -> Result<(), String> {
    match a.get("layout") {
        None | Some(Argument::None(_)) | Some(Argument::Layout(STRIDED)) => {}
        Some(other) => {
            return Err(format!(
                "argument 'layout' should be torch.strided (aotc makes dense tensors only), got {other:?}"
            ))
        }
    }
    match a.get("device") {
        None | Some(Argument::None(_)) | Some(Argument::Device(_)) => {}
        Some(other) => return Err(format!("argument 'device' should be a device, got {other:?}")),
    }
    a.bool_or("pin_memory", false)?;
    match a.get("generator") {
        None | Some(Argument::None(_)) => Ok(()),
        Some(_) => Err(format!("a torch.Generator argument is not supported: the compiled library has its own generator, seeded by writing its buffer '{STATE_NAME}'")),
    }
}

/// The output dtype of rand and randn (a float dtype, float32 by default) and its
/// significand bits.
fn float_dtype(a: &Args, op: &str) -> Result<(DType, u32), String> {
    let d = a.opt_dtype("dtype")?.unwrap_or(DType::F32);
    match significand_bits(d) {
        Some(m) => Ok((d, m)),
        None => Err(format!("{op} makes floating point tensors; dtype {d} is not one (PyTorch refuses it too)")),
    }
}

/// Uniform on [0, 1).
fn rand(lw: &mut Lowerer, a: &Args) -> R {
    check_options(a)?;
    let sizes = a.sym_ints(lw, "size")?;
    let (d, m) = float_dtype(a, "rand")?;
    let s = stream(lw);
    let u = top_bits_fraction(s.bits(flat_position(&sizes, &vars(sizes.len()))), m);
    Ok(vec![TensorValue::lazy(d, sizes, u)])
}

/// Standard normal, by the Box-Muller transform of two 53-bit uniforms computed in
/// float64: `sqrt(-2 ln u1) * cos(2 pi u2)` with u1 in (0, 1], so the logarithm never
/// sees 0 and every value is finite (|z| <= 8.6).
fn randn(lw: &mut Lowerer, a: &Args) -> R {
    check_options(a)?;
    let sizes = a.sym_ints(lw, "size")?;
    let (d, _) = float_dtype(a, "randn")?;
    let s = stream(lw);
    let f64c = |v: f64| constant(Scalar::F(v), DType::F64);
    // Two draws per element: counters 2i and 2i + 1.
    let twice = binary(Prim::Mul, flat_position(&sizes, &vars(sizes.len())), int(2));
    let u0 = top_bits_fraction(s.bits(twice.clone()), 53);
    let u1 = binary(Prim::Sub, f64c(1.0), u0);
    let u2 = top_bits_fraction(s.bits(binary(Prim::Add, twice, int(1))), 53);
    let radius = unary(Prim::Sqrt, binary(Prim::Mul, f64c(-2.0), unary(Prim::Log, u1)));
    let angle = binary(Prim::Mul, f64c(std::f64::consts::TAU), u2);
    Ok(vec![TensorValue::lazy(d, sizes, binary(Prim::Mul, radius, unary(Prim::Cos, angle)))])
}

/// The largest n PyTorch's randperm accepts for `d`: n - 1 must convert to the dtype
/// without overflow, and a float dtype must hold every integer up to n - 1 exactly
/// (PyTorch checks float16, float32 and float64, not bfloat16).
fn randperm_limit(d: DType) -> Result<Option<i64>, String> {
    Ok(match d {
        DType::Bool => return Err("randperm is not defined for dtype bool (PyTorch refuses it too)".into()),
        DType::U8 => Some(u8::MAX as i64 + 1),
        DType::I8 => Some(i8::MAX as i64 + 1),
        DType::I16 => Some(i16::MAX as i64 + 1),
        DType::I32 => Some(i32::MAX as i64 + 1),
        DType::F16 => Some((1 << 11) + 1),
        DType::F32 => Some((1 << 24) + 1),
        DType::F64 => Some((1 << 53) + 1),
        DType::I64 | DType::BF16 => None,
    })
}

/// A uniformly random permutation of 0..n: element i is the rank of key i among n random
/// 64-bit keys (the rank vector of i.i.d. keys is a uniform permutation; ties, of
/// probability below n^2 / 2^65, are broken by position). The ranks are one masked count
/// over n x n pairs, as sort does: O(n^2) time and O(n) memory (0.5 s for n = 10^4, 4.5 s
/// for 3 * 10^4, on one core).
fn randperm(lw: &mut Lowerer, a: &Args) -> R {
    check_options(a)?;
    let n = a.sym_int(lw, "n")?;
    let d = a.opt_dtype("dtype")?.unwrap_or(DType::I64);
    lw.require(SymExpr::Int(0), GuardOp::Le, n.clone(), "randperm: n must not be negative")?;
    if let Some(limit) = randperm_limit(d)? {
        lw.require(
            n.clone(),
            GuardOp::Le,
            SymExpr::Int(limit),
            &format!("randperm: n must be at most {limit} for dtype {d}"),
        )?;
    }
    let s = stream(lw);
    let name = a.node_name();
    // Realized, so that the n^2 comparisons read the keys instead of hashing again.
    let keys = TensorValue::view_of(
        lw.materialize(&TensorValue::lazy(DType::I64, vec![n.clone()], s.bits(var_value(0))), &format!("{name}.keys")),
        DType::I64,
        vec![n.clone()],
    );
    let (key_i, key_j) = (keys.load(&[Affine::var(0)]), keys.load(&[Affine::var(1)]));
    let tie_before =
        binary(Prim::And, binary(Prim::Eq, key_j.clone(), key_i.clone()), binary(Prim::Lt, var_value(1), var_value(0)));
    let before = binary(Prim::Or, binary(Prim::Lt, key_j, key_i), tie_before);
    let ranks = reduce_where(
        lw,
        &format!("{name}.rank"),
        std::slice::from_ref(&n),
        std::slice::from_ref(&n),
        ReduceOp::Sum,
        before,
        int(1),
    );
    Ok(vec![TensorValue::lazy(d, vec![n], ranks.load(&vars(1)))])
}
