//! rand, randn and randperm. Their numbers are not PyTorch's, so these tests check what
//! makes them random numbers of the right law: range and grid, moments and histograms over
//! a few thousand draws, permutations (each of the 24 orders of 4 about equally often),
//! fresh numbers on every call and for every node, and the seed buffer replaying a call.
//! The seed is fixed, so the statistics are the same on every run; the tolerances are
//! four to five standard errors, far from what a constant or a broken hash would give.

mod common;
mod one_node;

use aotc_abi::DType;
use aotc_runtime::{Device, Model, Tensor};
use common::{aotc, compiled, fails_with, succeeds};
use one_node::{dims, ints, sym, torch_code, Op};
use serde_json::{json, Value as Json};
use std::collections::HashMap;

const SEED: &str = "__aotc_rng_state";

/// A program of one random node, without inputs.
fn random_op(target: &'static str, args: Vec<(&'static str, Json)>, dtype: DType, shape: &[usize]) -> Op<'static> {
    Op {
        target,
        inputs: vec![],
        args,
        outputs: vec![(dtype, dims(shape))],
        sym_int_values: json!({}),
        range_constraints: json!({}),
    }
}

fn dtype_arg(d: DType) -> (&'static str, Json) {
    ("dtype", json!({"as_scalar_type": torch_code(d)}))
}

/// The output of one call on a fresh instance.
fn draw(op: &Op) -> Vec<f64> {
    op.run(&[vec![]]).remove(0).remove(0).to_f64_vec()
}

fn load(op: &Op) -> (tempfile::TempDir, Model) {
    let (dir, out) = op.compile();
    succeeds(&out);
    let model = Model::load(dir.path().join("op.so"), Device::Cpu).unwrap();
    (dir, model)
}

fn call(model: &mut Model) -> Vec<Vec<f64>> {
    model.run(&mut []).unwrap().iter().map(Tensor::to_f64_vec).collect()
}

fn seed(v: i64) -> Tensor {
    Tensor { dtype: DType::I64, shape: vec![], data: v.to_le_bytes().to_vec() }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn variance(v: &[f64]) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64
}

fn fraction(v: &[f64], f: impl Fn(f64) -> bool) -> f64 {
    v.iter().filter(|&&x| f(x)).count() as f64 / v.len() as f64
}

fn near(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!((got - want).abs() <= tolerance, "{what} is {got}, expected {want} +- {tolerance}");
}

fn distinct(v: &[f64]) -> usize {
    let mut bits: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
    bits.sort_unstable();
    bits.dedup();
    bits.len()
}

#[test]
fn rand_is_uniform_on_zero_one_in_every_float_dtype() {
    for (d, bits) in [(DType::F32, 24), (DType::F64, 53), (DType::F16, 11), (DType::BF16, 8)] {
        let mut args = vec![("size", ints(&[64, 64]))];
        if d != DType::F32 {
            args.push(dtype_arg(d));
        }
        let u = draw(&random_op("rand.default", args, d, &[64, 64]));
        let what = |s: &str| format!("rand {d}: {s}");
        assert!(u.iter().all(|x| (0.0..1.0).contains(x)), "{}", what("a value outside [0, 1)"));
        // k * 2^-bits: never rounded up to 1.0.
        assert!(u.iter().all(|x| (x * 2f64.powi(bits)).fract() == 0.0), "{}", what("a value off the grid"));
        // Standard errors: 0.0045 for the mean, 0.0011 for the variance, 19 per bin.
        near(&what("mean"), mean(&u), 0.5, 0.02);
        near(&what("variance"), variance(&u), 1.0 / 12.0, 0.006);
        for bin in 0..10 {
            let count = u.iter().filter(|&&x| (x * 10.0) as usize == bin).count() as f64;
            near(&what(&format!("bin {bin}")), count, 409.6, 80.0);
        }
        let grid = 1usize << bits.min(12);
        assert!(
            distinct(&u) as f64 >= 0.8 * grid.min(u.len()) as f64,
            "{}",
            what(&format!("{} distinct values", distinct(&u)))
        );
    }
}

#[test]
fn randn_is_standard_normal_and_finite_in_every_float_dtype() {
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let mut args = vec![("size", ints(&[4096]))];
        if d != DType::F32 {
            args.push(dtype_arg(d));
        }
        let z = draw(&random_op("randn.default", args, d, &[4096]));
        let what = |s: &str| format!("randn {d}: {s}");
        assert!(z.iter().all(|x| x.is_finite()), "{}", what("a value that is not finite"));
        // Standard errors: 0.016 for the mean, 0.011 for the standard deviation, 0.0073
        // and 0.0033 for the fractions within one and two standard deviations.
        near(&what("mean"), mean(&z), 0.0, 0.07);
        near(&what("standard deviation"), variance(&z).sqrt(), 1.0, 0.05);
        near(&what("fraction within 1"), fraction(&z, |x| x.abs() < 1.0), 0.6827, 0.035);
        near(&what("fraction within 2"), fraction(&z, |x| x.abs() < 2.0), 0.9545, 0.016);
        near(&what("fraction positive"), fraction(&z, |x| x > 0.0), 0.5, 0.04);
        assert!(distinct(&z) > 1000, "{}", what("few distinct values"));
    }
}

fn is_permutation(p: &[f64]) -> bool {
    let mut sorted = p.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.iter().enumerate().all(|(i, &v)| v == i as f64)
}

#[test]
fn randperm_is_a_permutation_in_integer_and_float_dtypes() {
    for (d, n) in [
        (DType::I64, 1000),
        (DType::I32, 1000),
        (DType::F32, 1000),
        (DType::U8, 256),
        (DType::F16, 2049),
        (DType::I64, 0),
    ] {
        let mut args = vec![("n", json!({"as_int": n}))];
        if d != DType::I64 {
            args.push(dtype_arg(d));
        }
        let p = draw(&random_op("randperm.default", args, d, &[n]));
        assert!(is_permutation(&p), "randperm({n}) {d} is not a permutation: {p:?}");
        assert!(n < 2 || p.iter().enumerate().any(|(i, &v)| v != i as f64), "randperm({n}) {d} is the identity");
    }
}

#[test]
fn randperm_draws_every_order_about_equally_often() {
    let (_dir, mut model) = load(&random_op("randperm.default", vec![("n", json!({"as_int": 4}))], DType::I64, &[4]));
    let mut counts: HashMap<Vec<i64>, usize> = HashMap::new();
    for _ in 0..2400 {
        let p = call(&mut model).remove(0);
        assert!(is_permutation(&p), "{p:?}");
        *counts.entry(p.iter().map(|&v| v as i64).collect()).or_default() += 1;
    }
    assert_eq!(counts.len(), 24, "{counts:?}");
    // 100 each, standard deviation 9.8.
    assert!(counts.values().all(|&c| (55..=145).contains(&c)), "{counts:?}");
}

#[test]
fn randperm_of_a_symbolic_size() {
    let symbol = "Symbol('s0', positive=True, integer=True)";
    let op = Op {
        target: "randperm.default",
        inputs: vec![(DType::F32, vec![sym(symbol, 8)])],
        args: vec![("n", json!({"as_sym_int": {"as_name": "n"}}))],
        outputs: vec![(DType::I64, vec![sym(symbol, 8)])],
        sym_int_values: json!({"n": {"as_expr": {"expr_str": symbol, "hint": {"as_int": 8}}}}),
        range_constraints: json!({"s0": {"min_val": 2, "max_val": 100}}),
    };
    let got = op.run(&[vec![Tensor::zeros(DType::F32, &[5])], vec![Tensor::zeros(DType::F32, &[97])]]);
    for (g, n) in got.iter().zip([5, 97]) {
        let p = g[0].to_f64_vec();
        assert!(p.len() == n && is_permutation(&p), "randperm({n}): {p:?}");
    }
}

#[test]
fn every_call_draws_fresh_numbers_and_writing_the_seed_replays_them() {
    let (_dir, mut model) = load(&random_op("rand.default", vec![("size", ints(&[1000]))], DType::F32, &[1000]));
    let state: Vec<(&str, Option<DType>, &[i64])> =
        model.buffers().iter().map(|b| (b.name.as_str(), b.dtype, &b.sizes[..])).collect();
    assert_eq!(state, [(SEED, Some(DType::I64), &[][..])]);
    let start = model.read_buffer(SEED).unwrap();
    let first = call(&mut model);
    let second = call(&mut model);
    assert!(first[0].iter().zip(&second[0]).filter(|(a, b)| a == b).count() < 10, "two calls drew the same numbers");
    let s0 = i64::from_le_bytes(start.data[..].try_into().unwrap());
    assert_eq!(model.read_buffer(SEED).unwrap(), seed(s0 + 2), "the seed advances by one per call");
    model.write_buffer(SEED, &start).unwrap();
    assert_eq!(call(&mut model), first, "the same seed draws the same numbers");
    model.write_buffer(SEED, &seed(12345)).unwrap();
    let third = call(&mut model);
    model.write_buffer(SEED, &seed(12345)).unwrap();
    assert_eq!(call(&mut model), third);
    assert_ne!(third, first);
}

#[test]
fn two_random_nodes_draw_different_numbers() {
    let op = random_op("randn.default", vec![("size", ints(&[1000]))], DType::F32, &[1000]);
    let (dir, json_path) = op.write();
    let mut program: Json = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let g = &mut program["graph_module"];
    let mut second = g["graph"]["nodes"][0].clone();
    second["name"] = "op_1".into();
    second["outputs"] = json!([{"as_tensor": {"name": "y_1"}}]);
    g["graph"]["nodes"].as_array_mut().unwrap().push(second);
    g["graph"]["tensor_values"]["y_1"] = g["graph"]["tensor_values"]["y_0"].clone();
    g["graph"]["outputs"].as_array_mut().unwrap().push(json!({"as_tensor": {"name": "y_1"}}));
    g["signature"]["output_specs"]
        .as_array_mut()
        .unwrap()
        .push(json!({"user_output": {"arg": {"as_tensor": {"name": "y_1"}}}}));
    let leaf = json!({"type": null, "context": null, "children_spec": []});
    g["module_call_graph"][0]["signature"]["out_spec"] =
        json!([1, {"type": "builtins.tuple", "context": "null", "children_spec": [leaf.clone(), leaf]}])
            .to_string()
            .into();
    std::fs::write(&json_path, program.to_string()).unwrap();
    let so = dir.path().join("two.so");
    succeeds(&aotc(&[&"compile", &json_path, &"-o", &so]));
    let mut model = Model::load(&so, Device::Cpu).unwrap();
    let out = call(&mut model);
    assert!(out[0].iter().zip(&out[1]).filter(|(a, b)| a == b).count() < 10, "the two nodes drew the same numbers");
    // Unrelated streams: their correlation is about 0 (standard error 0.03).
    let (m0, m1) = (mean(&out[0]), mean(&out[1]));
    let cov = out[0].iter().zip(&out[1]).map(|(a, b)| (a - m0) * (b - m1)).sum::<f64>() / 1000.0;
    near("correlation", cov / (variance(&out[0]) * variance(&out[1])).sqrt(), 0.0, 0.15);
}

#[test]
fn a_program_without_random_nodes_has_no_seed_buffer() {
    let (_dir, model) = compiled("handwritten.grid_sampler_2d_bicubic_zeros__float32__0");
    assert!(model.buffers().is_empty());
}

#[test]
fn the_generator_overloads_take_no_torch_generator() {
    let gen = |g: Json| vec![("size", ints(&[100])), ("generator", g)];
    let u = draw(&random_op("rand.generator", gen(json!({"as_none": true})), DType::F32, &[100]));
    assert!(u.iter().all(|x| (0.0..1.0).contains(x)) && distinct(&u) > 90);
    let (_dir, out) = random_op(
        "rand.generator",
        gen(json!({"as_custom_obj": {"name": "g", "class_fqn": "torch.Generator"}})),
        DType::F32,
        &[100],
    )
    .compile();
    fails_with(&out, "node 'op' (torch.ops.aten.rand.generator): a torch.Generator argument is not supported");
}

#[test]
fn bad_dtypes_layouts_and_sizes_are_refused() {
    let size = || ("size", ints(&[3]));
    let cases = [
        (
            random_op("rand.default", vec![size(), dtype_arg(DType::I64)], DType::I64, &[3]),
            "rand makes floating point tensors; dtype int64 is not one",
        ),
        (
            random_op("randn.default", vec![size(), ("layout", json!({"as_layout": 1}))], DType::F32, &[3]),
            "argument 'layout' should be torch.strided",
        ),
        (
            random_op("randn.default", vec![size(), ("pin_memory", json!({"as_int": 1}))], DType::F32, &[3]),
            "argument 'pin_memory' should be a bool",
        ),
        (
            random_op("randperm.default", vec![("n", json!({"as_int": 3})), dtype_arg(DType::Bool)], DType::Bool, &[3]),
            "randperm is not defined for dtype bool",
        ),
        (
            random_op(
                "randperm.default",
                vec![("n", json!({"as_int": 2050})), dtype_arg(DType::F16)],
                DType::F16,
                &[2050],
            ),
            "randperm: n must be at most 2049 for dtype float16",
        ),
        (
            random_op("randperm.default", vec![("n", json!({"as_int": 257})), dtype_arg(DType::U8)], DType::U8, &[257]),
            "randperm: n must be at most 256 for dtype uint8",
        ),
        (
            random_op(
                "randperm.default",
                vec![("n", json!({"as_int": 3})), ("seed", json!({"as_int": 1}))],
                DType::I64,
                &[3],
            ),
            "unknown argument 'seed'",
        ),
    ];
    for (op, needle) in cases {
        fails_with(&op.compile().1, needle);
    }
}
