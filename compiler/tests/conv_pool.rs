//! Convolution and pooling against reference implementations written here (direct loops
//! following PyTorch's kernels), over argument combinations the recorded fixtures leave
//! out: groups with dilation, transposed convolutions with groups, their gradients,
//! NaN and all -inf windows in max pooling, partial windows of every pooling kind.
//!
//! Each case is a one-node program built from a fixture's archive, compiled with the CLI
//! and run through the loader.

mod common;

use aotc_abi::DType;
use aotc_runtime::{Device, Model, Tensor, Value};
use common::{aotc, fails_with, fixture, succeeds};
use serde_json::{json, Value as Json};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A dense float tensor for the references.
#[derive(Clone, Debug)]
struct Arr {
    shape: Vec<usize>,
    data: Vec<f64>,
}

impl Arr {
    fn zeros(shape: &[usize]) -> Arr {
        Arr { shape: shape.to_vec(), data: vec![0.0; shape.iter().product()] }
    }

    /// Deterministic values in [-1, 1), distinct enough that max pooling has no ties.
    fn random(shape: &[usize], seed: u64) -> Arr {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let data = (0..shape.iter().product::<usize>()).map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        }).collect();
        Arr { shape: shape.to_vec(), data }
    }

    fn at(&self, index: &[usize]) -> usize {
        index.iter().zip(&self.shape).fold(0, |acc, (i, s)| acc * s + i)
    }

    fn tensor(&self, dtype: DType) -> Tensor {
        let shape: Vec<i64> = self.shape.iter().map(|&s| s as i64).collect();
        match dtype {
            DType::F32 => Tensor::from_f32(&shape, &self.data.iter().map(|&v| v as f32).collect::<Vec<_>>()),
            DType::I64 => Tensor { dtype, shape, data: self.data.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect() },
            other => panic!("no test tensors of {other}"),
        }
    }
}

/// Calls `f` on every index of `shape`, row-major.
fn each(shape: &[usize], f: &mut dyn FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut index = vec![0; shape.len()];
    loop {
        f(&index);
        let Some(d) = (0..shape.len()).rev().find(|&d| index[d] + 1 < shape[d]) else { return };
        index[d] += 1;
        index[d + 1..].iter_mut().for_each(|i| *i = 0);
    }
}

fn ints(v: &[i64]) -> Json {
    json!({"as_ints": v})
}

/// The one-node program `target(args)` over inputs and outputs of the given dtypes and
/// shapes, written into a new directory: (the directory, its program).
fn program(target: &str, inputs: &[(DType, Vec<i64>)], args: &[(&str, Json)], outputs: &[(DType, Vec<usize>)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut zip = zip::ZipArchive::new(std::fs::File::open(fixture("ops/handwritten.convolution_transposed__float32__0").join("model.pt2")).unwrap()).unwrap();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap();
        let path = dir.path().join(Path::new(entry.name()).components().skip(1).collect::<std::path::PathBuf>());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut bytes = vec![];
        entry.read_to_end(&mut bytes).unwrap();
        std::fs::write(&path, bytes).unwrap();
    }
    let json_path = dir.path().join("models/model.json");
    let mut program: Json = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let code = |d: DType| match d {
        DType::F32 => 7,
        DType::I64 => 5,
        other => panic!("no test tensors of {other}"),
    };
    let meta = |d: DType, shape: &[i64]| {
        let mut strides = vec![1i64; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1].max(1);
        }
        let sym = |v: &[i64]| v.iter().map(|&s| json!({"as_int": s})).collect::<Vec<_>>();
        json!({"dtype": code(d), "sizes": sym(shape), "requires_grad": false, "device": {"type": "cpu", "index": null},
               "strides": sym(&strides), "storage_offset": {"as_int": 0}, "layout": 7})
    };
    let in_names: Vec<String> = (0..inputs.len()).map(|i| format!("x_{i}")).collect();
    let out_names: Vec<String> = (0..outputs.len()).map(|i| format!("y_{i}")).collect();
    let mut values = serde_json::Map::new();
    for (name, (d, shape)) in in_names.iter().zip(inputs) {
        values.insert(name.clone(), meta(*d, shape));
    }
    for (name, (d, shape)) in out_names.iter().zip(outputs) {
        values.insert(name.clone(), meta(*d, &shape.iter().map(|&s| s as i64).collect::<Vec<_>>()));
    }
    let tensor = |n: &String| json!({"as_tensor": {"name": n}});
    let node_inputs: Vec<Json> = args.iter().map(|(name, arg)| json!({"name": name, "arg": arg, "kind": 1})).collect();
    let g = &mut program["graph_module"];
    g["graph"]["inputs"] = in_names.iter().map(tensor).collect();
    g["graph"]["outputs"] = out_names.iter().map(tensor).collect();
    g["graph"]["tensor_values"] = Json::Object(values);
    g["graph"]["nodes"] = json!([{"target": format!("torch.ops.aten.{target}"), "name": "op", "inputs": node_inputs,
        "outputs": out_names.iter().map(tensor).collect::<Vec<_>>(), "metadata": {}}]);
    g["signature"]["input_specs"] = in_names.iter().map(|n| json!({"user_input": {"arg": tensor(n)}})).collect();
    g["signature"]["output_specs"] = out_names.iter().map(|n| json!({"user_output": {"arg": tensor(n)}})).collect();
    let leaf = json!({"type": null, "context": null, "children_spec": []});
    let tuple = |n: usize| json!({"type": "builtins.tuple", "context": "null", "children_spec": vec![leaf.clone(); n]});
    let in_spec = json!([1, {"type": "builtins.tuple", "context": "null", "children_spec": [tuple(inputs.len()), {"type": "builtins.dict", "context": "[]", "children_spec": []}]}]);
    let out_spec = json!([1, if outputs.len() == 1 { leaf.clone() } else { tuple(outputs.len()) }]);
    let sig = &mut g["module_call_graph"][0]["signature"];
    sig["in_spec"] = in_spec.to_string().into();
    sig["out_spec"] = out_spec.to_string().into();
    sig["forward_arg_names"] = json!(in_names);
    std::fs::write(&json_path, program.to_string()).unwrap();
    (dir, json_path)
}

fn compile(json: &Path) -> Output {
    aotc(&[&"compile", &json, &"-o", &json.with_extension("so")])
}

/// Compiles the one-node program `target(args)` over `inputs` with outputs of the given
/// dtypes and shapes, runs it, and returns the outputs.
fn run_op(target: &str, inputs: &[Tensor], args: &[(&str, Json)], outputs: &[(DType, Vec<usize>)]) -> Vec<Tensor> {
    let metas: Vec<(DType, Vec<i64>)> = inputs.iter().map(|t| (t.dtype, t.shape.clone())).collect();
    let (_dir, json) = program(target, &metas, args, outputs);
    succeeds(&compile(&json));
    let so = json.with_extension("so");
    let mut model = Model::load(&so, Device::Cpu).unwrap();
    let mut values: Vec<Value> = inputs.iter().cloned().map(Value::Tensor).collect();
    model.run(&mut values).unwrap_or_else(|e| panic!("{target}: {e}"))
}

/// `got` equals `want` (shape, and values to 1e-4 relative; NaN where NaN).
fn check(what: &str, got: &Tensor, want: &Arr) {
    let shape: Vec<i64> = want.shape.iter().map(|&s| s as i64).collect();
    assert_eq!(got.shape, shape, "{what}: shape");
    for (i, (g, w)) in got.to_f64_vec().iter().zip(&want.data).enumerate() {
        let close = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-4 * (1.0 + w.abs());
        assert!(close, "{what}: element {i} is {g}, expected {w}");
    }
}

// ---- convolution ----

/// A convolution's geometry. Its kernel slides over the wide side (the input of a
/// regular convolution, the output of a transposed one) with one window per position of
/// the narrow side; the weight is [narrow channels, wide channels / groups, kernel...].
struct Conv {
    batch: usize,
    wide_channels: usize,
    narrow_channels: usize,
    groups: usize,
    wide: Vec<usize>,
    narrow: Vec<usize>,
    kernel: Vec<usize>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
}

impl Conv {
    /// A regular convolution of `input` (the wide side).
    #[allow(clippy::too_many_arguments)]
    fn regular(batch: usize, channels: [usize; 2], groups: usize, input: &[usize], kernel: &[usize], stride: &[i64], padding: &[i64], dilation: &[i64]) -> Conv {
        let narrow = (0..input.len()).map(|d| ((input[d] as i64 + 2 * padding[d] - dilation[d] * (kernel[d] as i64 - 1) - 1) / stride[d] + 1) as usize).collect();
        Conv { batch, wide_channels: channels[0], narrow_channels: channels[1], groups, wide: input.to_vec(), narrow, kernel: kernel.to_vec(),
            stride: stride.to_vec(), padding: padding.to_vec(), dilation: dilation.to_vec() }
    }

    /// A transposed convolution of `input` (the narrow side).
    #[allow(clippy::too_many_arguments)]
    fn transposed(batch: usize, channels: [usize; 2], groups: usize, input: &[usize], kernel: &[usize], stride: &[i64], padding: &[i64], dilation: &[i64], output_padding: &[i64]) -> Conv {
        let wide = (0..input.len()).map(|d| ((input[d] as i64 - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel[d] as i64 - 1) + output_padding[d] + 1) as usize).collect();
        Conv { batch, wide_channels: channels[1], narrow_channels: channels[0], groups, wide, narrow: input.to_vec(), kernel: kernel.to_vec(),
            stride: stride.to_vec(), padding: padding.to_vec(), dilation: dilation.to_vec() }
    }

    fn wide_shape(&self) -> Vec<usize> {
        [self.batch, self.wide_channels].into_iter().chain(self.wide.iter().copied()).collect()
    }

    fn narrow_shape(&self) -> Vec<usize> {
        [self.batch, self.narrow_channels].into_iter().chain(self.narrow.iter().copied()).collect()
    }

    fn weight_shape(&self) -> Vec<usize> {
        [self.narrow_channels, self.wide_channels / self.groups].into_iter().chain(self.kernel.iter().copied()).collect()
    }

    /// Every (wide, weight, narrow) element triple the convolution multiplies.
    fn terms(&self) -> Vec<(usize, usize, usize)> {
        let (wide, weight, narrow) = (Arr::zeros(&self.wide_shape()), Arr::zeros(&self.weight_shape()), Arr::zeros(&self.narrow_shape()));
        let (wg, ng) = (self.wide_channels / self.groups, self.narrow_channels / self.groups);
        let mut out = vec![];
        each(&narrow.shape, &mut |n| {
            let group = n[1] / ng;
            each(&weight.shape[1..], &mut |wk| {
                let pos: Vec<i64> = (0..self.kernel.len()).map(|d| n[2 + d] as i64 * self.stride[d] - self.padding[d] + wk[1 + d] as i64 * self.dilation[d]).collect();
                if pos.iter().zip(&self.wide).all(|(&p, &s)| p >= 0 && (p as usize) < s) {
                    let wi: Vec<usize> = [n[0], group * wg + wk[0]].into_iter().chain(pos.iter().map(|&p| p as usize)).collect();
                    let ki: Vec<usize> = [n[1]].into_iter().chain(wk.iter().copied()).collect();
                    out.push((wide.at(&wi), weight.at(&ki), narrow.at(n)));
                }
            });
        });
        out
    }
}

fn conv_args(c: &Conv, transposed: bool, output_padding: &[i64]) -> Vec<(&'static str, Json)> {
    vec![("stride", ints(&c.stride)), ("padding", ints(&c.padding)), ("dilation", ints(&c.dilation)),
        ("transposed", json!({"as_bool": transposed})), ("output_padding", ints(output_padding)), ("groups", json!({"as_int": c.groups}))]
}

fn tensor_arg(i: usize) -> Json {
    json!({"as_tensor": {"name": format!("x_{i}")}})
}

/// A regular convolution: x is the wide side, the result the narrow one.
fn check_regular(c: &Conv, bias: bool) {
    let (x, w, b) = (Arr::random(&c.wide_shape(), 1), Arr::random(&c.weight_shape(), 2), Arr::random(&[c.narrow_channels], 3));
    let mut y = Arr::zeros(&c.narrow_shape());
    for (xi, wi, yi) in c.terms() {
        y.data[yi] += x.data[xi] * w.data[wi];
    }
    if bias {
        each(&y.shape.clone(), &mut |i| { let at = y.at(i); y.data[at] += b.data[i[1]] });
    }
    let mut args = vec![("input", tensor_arg(0)), ("weight", tensor_arg(1)), ("bias", if bias { tensor_arg(2) } else { json!({"as_none": true}) })];
    args.extend(conv_args(c, false, &vec![0; c.kernel.len()]));
    let inputs: Vec<Tensor> = [&x, &w].into_iter().chain(bias.then_some(&b)).map(|a| a.tensor(DType::F32)).collect();
    check("convolution", &run_op("convolution.default", &inputs, &args, &[(DType::F32, y.shape.clone())])[0], &y);
}

/// A transposed convolution: x is the narrow side, the result the wide one.
fn check_transposed(c: &Conv, output_padding: &[i64]) {
    let (x, w) = (Arr::random(&c.narrow_shape(), 4), Arr::random(&c.weight_shape(), 5));
    let mut y = Arr::zeros(&c.wide_shape());
    for (yi, wi, xi) in c.terms() {
        y.data[yi] += x.data[xi] * w.data[wi];
    }
    let mut args = vec![("input", tensor_arg(0)), ("weight", tensor_arg(1)), ("bias", json!({"as_none": true}))];
    args.extend(conv_args(c, true, output_padding));
    check("transposed convolution", &run_op("convolution.default", &[x.tensor(DType::F32), w.tensor(DType::F32)], &args, &[(DType::F32, y.shape.clone())])[0], &y);
}

/// All three gradients, of a regular or a transposed convolution.
fn check_backward(c: &Conv, transposed: bool, output_padding: &[i64]) {
    let (wide, narrow) = (Arr::random(&c.wide_shape(), 6), Arr::random(&c.narrow_shape(), 7));
    let w = Arr::random(&c.weight_shape(), 8);
    // The forward's input x and output gradient g.
    let (x, g) = if transposed { (&narrow, &wide) } else { (&wide, &narrow) };
    let mut grad_x = Arr::zeros(&x.shape);
    let mut grad_w = Arr::zeros(&w.shape);
    let mut grad_b = Arr::zeros(&[g.shape[1]]);
    for (wi, ki, ni) in c.terms() {
        let (xi, gi) = if transposed { (ni, wi) } else { (wi, ni) };
        grad_x.data[xi] += g.data[gi] * w.data[ki];
        grad_w.data[ki] += g.data[gi] * x.data[xi];
    }
    each(&g.shape, &mut |i| grad_b.data[i[1]] += g.data[g.at(i)]);
    let mut args = vec![("grad_output", tensor_arg(0)), ("input", tensor_arg(1)), ("weight", tensor_arg(2)), ("bias_sizes", ints(&[g.shape[1] as i64]))];
    args.extend(conv_args(c, transposed, output_padding));
    args.push(("output_mask", json!({"as_bools": [true, true, true]})));
    let outputs = [(DType::F32, grad_x.shape.clone()), (DType::F32, grad_w.shape.clone()), (DType::F32, grad_b.shape.clone())];
    let got = run_op("convolution_backward.default", &[g.tensor(DType::F32), x.tensor(DType::F32), w.tensor(DType::F32)], &args, &outputs);
    check("grad_input", &got[0], &grad_x);
    check("grad_weight", &got[1], &grad_w);
    check("grad_bias", &got[2], &grad_b);
}

/// Groups 2 (4 → 6 channels), stride (2, 1), dilation (2, 1), padding 1: 7x6 → 3x7.
fn grouped_dilated_2d() -> Conv {
    Conv::regular(2, [4, 6], 2, &[7, 6], &[3, 2], &[2, 1], &[1, 1], &[2, 1])
}

/// Groups 2 (4 → 6 channels), stride (2, 3), dilation (2, 1), output_padding (1, 2): 3x4 → 8x13.
fn grouped_dilated_transposed_2d() -> Conv {
    Conv::transposed(2, [4, 6], 2, &[3, 4], &[3, 2], &[2, 3], &[1, 0], &[2, 1], &[1, 2])
}

#[test]
fn regular_convolutions_match_the_reference() {
    check_regular(&grouped_dilated_2d(), true);
    // Depthwise 1-D, padding 2, stride 3, dilation 2: 10 → 4.
    check_regular(&Conv::regular(1, [3, 3], 3, &[10], &[3], &[3], &[2], &[2]), true);
    // 3-D, padding along one dimension only.
    check_regular(&Conv::regular(1, [2, 2], 1, &[4, 5, 3], &[2, 3, 1], &[1, 1, 1], &[1, 0, 0], &[1, 1, 1]), false);
}

#[test]
fn transposed_convolutions_match_the_reference() {
    check_transposed(&grouped_dilated_transposed_2d(), &[1, 2]);
    // An output_padding beyond the stride (allowed below the dilation): 5 → 11.
    check_transposed(&Conv::transposed(1, [2, 2], 1, &[5], &[3], &[1], &[1], &[3], &[2]), &[2]);
}

#[test]
fn convolution_gradients_match_the_reference() {
    check_backward(&grouped_dilated_2d(), false, &[0, 0]);
    check_backward(&grouped_dilated_transposed_2d(), true, &[1, 2]);
}

// ---- pooling ----

/// Pooling windows along the trailing dims (torch's pooling_output_shape).
struct Pool {
    kernel: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    ceil_mode: bool,
}

impl Pool {
    fn output(&self, input: &[usize]) -> Vec<usize> {
        input.iter().enumerate().map(|(d, &n)| {
            let (k, s, p, dl) = (self.kernel[d], self.stride[d], self.padding[d], self.dilation[d]);
            let span = n as i64 + 2 * p - dl * (k - 1) - 1 + if self.ceil_mode { s - 1 } else { 0 };
            let mut out = span.div_euclid(s) + 1;
            if self.ceil_mode && (out - 1) * s >= n as i64 + p {
                out -= 1;
            }
            out as usize
        }).collect()
    }

    fn args(&self) -> Vec<(&'static str, Json)> {
        vec![("kernel_size", ints(&self.kernel)), ("stride", ints(&self.stride)), ("padding", ints(&self.padding)), ("ceil_mode", json!({"as_bool": self.ceil_mode}))]
    }
}

/// Splits a shape into its leading dims and `nd` spatial ones.
fn split(shape: &[usize], nd: usize) -> (&[usize], &[usize]) {
    shape.split_at(shape.len() - nd)
}

/// torch's max pooling: values and flat spatial indices (the last NaN wins; an all -inf
/// window reports its first element inside the input).
fn max_pool_reference(x: &Arr, p: &Pool) -> (Arr, Arr) {
    let nd = p.kernel.len();
    let (lead, input) = split(&x.shape, nd);
    let out_shape: Vec<usize> = lead.iter().copied().chain(p.output(input)).collect();
    let (mut values, mut indices) = (Arr::zeros(&out_shape), Arr::zeros(&out_shape));
    each(&out_shape, &mut |o| {
        let (mut best, mut best_at) = (f64::NEG_INFINITY, None);
        let kernel: Vec<usize> = p.kernel.iter().map(|&k| k as usize).collect();
        each(&kernel, &mut |k| {
            let pos: Vec<i64> = (0..nd).map(|d| o[lead.len() + d] as i64 * p.stride[d] - p.padding[d] + k[d] as i64 * p.dilation[d]).collect();
            if pos.iter().zip(input).all(|(&q, &n)| q >= 0 && (q as usize) < n) {
                let flat = pos.iter().zip(input).fold(0, |acc, (&q, &n)| acc * n + q as usize);
                let v = x.data[x.at(&o[..lead.len()].iter().copied().chain(pos.iter().map(|&q| q as usize)).collect::<Vec<_>>())];
                if best_at.is_none() {
                    best_at = Some(flat);
                }
                if v > best || v.is_nan() {
                    (best, best_at) = (v, Some(flat));
                }
            }
        });
        let at = values.at(o);
        values.data[at] = best;
        indices.data[at] = best_at.expect("every window holds an input element") as f64;
    });
    (values, indices)
}

fn check_max_pool(x: &Arr, p: &Pool) {
    let nd = p.kernel.len();
    let (values, indices) = max_pool_reference(x, p);
    let mut args = vec![("self", tensor_arg(0))];
    args.extend(p.args());
    args.push(("dilation", ints(&p.dilation)));
    let target = format!("max_pool{nd}d_with_indices.default");
    let got = run_op(&target, &[x.tensor(DType::F32)], &args, &[(DType::F32, values.shape.clone()), (DType::I64, indices.shape.clone())]);
    check("max pool values", &got[0], &values);
    check("max pool indices", &got[1], &indices);
}

#[test]
fn max_pooling_matches_the_reference() {
    // Dilation, padding and ceil mode together, one NaN.
    let mut x = Arr::random(&[2, 3, 7, 8], 9);
    x.data[17] = f64::NAN;
    check_max_pool(&x, &Pool { kernel: vec![3, 2], stride: vec![2, 3], padding: vec![1, 1], dilation: vec![2, 1], ceil_mode: true });
    // Windows of -inf only: the index of their first element inside the input.
    let mut x = Arr::random(&[1, 1, 5, 5], 10);
    x.data.iter_mut().take(12).for_each(|v| *v = f64::NEG_INFINITY);
    check_max_pool(&x, &Pool { kernel: vec![3, 3], stride: vec![2, 2], padding: vec![1, 1], dilation: vec![1, 1], ceil_mode: false });
    let x = Arr::random(&[2, 5, 4, 6], 11);
    check_max_pool(&x, &Pool { kernel: vec![2, 3, 2], stride: vec![1, 2, 2], padding: vec![1, 1, 0], dilation: vec![1, 1, 2], ceil_mode: true });
}

/// torch's avg pooling divisor of window `o` and its clipped range per dimension.
fn avg_window(p: &Pool, input: &[usize], o: &[usize], include_pad: bool, divisor: Option<i64>) -> (Vec<(usize, usize)>, f64) {
    let mut size = 1;
    let mut clipped = 1;
    let ranges = (0..input.len()).map(|d| {
        let start = o[d] as i64 * p.stride[d] - p.padding[d];
        let end = (start + p.kernel[d]).min(input[d] as i64 + p.padding[d]);
        size *= end - start;
        let (start, end) = (start.max(0), end.min(input[d] as i64));
        clipped *= end - start;
        (start as usize, end as usize)
    }).collect();
    (ranges, divisor.unwrap_or(if include_pad { size } else { clipped }) as f64)
}

fn avg_pool_reference(x: &Arr, p: &Pool, include_pad: bool, divisor: Option<i64>) -> Arr {
    let nd = p.kernel.len();
    let (lead, input) = split(&x.shape, nd);
    let out_shape: Vec<usize> = lead.iter().copied().chain(p.output(input)).collect();
    let mut y = Arr::zeros(&out_shape);
    each(&out_shape, &mut |o| {
        let (ranges, div) = avg_window(p, input, &o[lead.len()..], include_pad, divisor);
        let extent: Vec<usize> = ranges.iter().map(|(s, e)| e - s).collect();
        let mut sum = 0.0;
        each(&extent, &mut |k| sum += x.data[x.at(&o[..lead.len()].iter().copied().chain((0..nd).map(|d| ranges[d].0 + k[d])).collect::<Vec<_>>())]);
        let at = y.at(o);
        y.data[at] = sum / div;
    });
    y
}

fn avg_args(p: &Pool, include_pad: bool, divisor: Option<i64>) -> Vec<(&'static str, Json)> {
    let mut args = p.args();
    args.push(("count_include_pad", json!({"as_bool": include_pad})));
    args.push(("divisor_override", divisor.map_or(json!({"as_none": true}), |d| json!({"as_int": d}))));
    args
}

#[test]
fn avg_pooling_matches_the_reference() {
    let p = Pool { kernel: vec![3, 3], stride: vec![2, 3], padding: vec![1, 1], dilation: vec![1, 1], ceil_mode: true };
    let x = Arr::random(&[1, 2, 8, 7], 12);
    for (include_pad, divisor) in [(true, None), (false, None), (false, Some(4))] {
        let y = avg_pool_reference(&x, &p, include_pad, divisor);
        let mut args = vec![("self", tensor_arg(0))];
        args.extend(avg_args(&p, include_pad, divisor));
        check("avg_pool2d", &run_op("avg_pool2d.default", &[x.tensor(DType::F32)], &args, &[(DType::F32, y.shape.clone())])[0], &y);
    }
    let p = Pool { kernel: vec![2, 3, 2], stride: vec![2, 1, 3], padding: vec![1, 1, 0], dilation: vec![1, 1, 1], ceil_mode: true };
    let x = Arr::random(&[3, 5, 4, 7], 13);
    let y = avg_pool_reference(&x, &p, false, None);
    let mut args = vec![("self", tensor_arg(0))];
    args.extend(avg_args(&p, false, None));
    check("avg_pool3d", &run_op("avg_pool3d.default", &[x.tensor(DType::F32)], &args, &[(DType::F32, y.shape.clone())])[0], &y);
}

/// Adaptive window `i` of `n` elements split `out` ways.
fn adaptive(i: usize, n: usize, out: usize) -> (usize, usize) {
    (i * n / out, ((i + 1) * n).div_ceil(out))
}

fn adaptive_reference(x: &Arr, out: &[usize]) -> Arr {
    let (lead, input) = split(&x.shape, out.len());
    let out_shape: Vec<usize> = lead.iter().chain(out).copied().collect();
    let mut y = Arr::zeros(&out_shape);
    each(&out_shape, &mut |o| {
        let ranges: Vec<(usize, usize)> = (0..out.len()).map(|d| adaptive(o[lead.len() + d], input[d], out[d])).collect();
        let extent: Vec<usize> = ranges.iter().map(|(s, e)| e - s).collect();
        let mut sum = 0.0;
        each(&extent, &mut |k| sum += x.data[x.at(&o[..lead.len()].iter().copied().chain((0..out.len()).map(|d| ranges[d].0 + k[d])).collect::<Vec<_>>())]);
        let at = y.at(o);
        y.data[at] = sum / extent.iter().product::<usize>() as f64;
    });
    y
}

#[test]
fn adaptive_pooling_matches_the_reference() {
    for (target, shape, out) in [("_adaptive_avg_pool2d.default", vec![2, 3, 7, 5], vec![3, 4]), ("adaptive_avg_pool1d.default", vec![2, 10], vec![4]),
        ("_adaptive_avg_pool3d.default", vec![1, 2, 6, 5, 9], vec![4, 5, 3])] {
        let x = Arr::random(&shape, 14);
        let y = adaptive_reference(&x, &out);
        let args = [("self", tensor_arg(0)), ("output_size", ints(&out.iter().map(|&o| o as i64).collect::<Vec<_>>()))];
        check(target, &run_op(target, &[x.tensor(DType::F32)], &args, &[(DType::F32, y.shape.clone())])[0], &y);
    }
}

#[test]
fn pooling_gradients_match_the_reference() {
    // max: each window's gradient goes to the element its index names.
    let p = Pool { kernel: vec![3, 2], stride: vec![2, 1], padding: vec![1, 1], dilation: vec![2, 1], ceil_mode: true };
    let x = Arr::random(&[2, 2, 7, 5], 15);
    let (values, indices) = max_pool_reference(&x, &p);
    let g = Arr::random(&values.shape, 16);
    let mut want = Arr::zeros(&x.shape);
    let plane: usize = x.shape[2..].iter().product();
    each(&g.shape, &mut |o| want.data[(o[0] * x.shape[1] + o[1]) * plane + indices.data[indices.at(o)] as usize] += g.data[g.at(o)]);
    let mut args = vec![("grad_output", tensor_arg(0)), ("self", tensor_arg(1))];
    args.extend(p.args());
    args.extend([("dilation", ints(&p.dilation)), ("indices", tensor_arg(2))]);
    let got = run_op("max_pool2d_with_indices_backward.default", &[g.tensor(DType::F32), x.tensor(DType::F32), indices.tensor(DType::I64)], &args, &[(DType::F32, want.shape.clone())]);
    check("max_pool2d backward", &got[0], &want);

    // avg: each window's gradient spread over its clipped range, over its divisor.
    let p = Pool { kernel: vec![3, 2], stride: vec![2, 2], padding: vec![1, 1], dilation: vec![1, 1], ceil_mode: true };
    let x = Arr::random(&[1, 2, 6, 7], 17);
    let out_shape: Vec<usize> = x.shape[..2].iter().copied().chain(p.output(&x.shape[2..])).collect();
    let g = Arr::random(&out_shape, 18);
    for (include_pad, divisor) in [(true, None), (false, None), (false, Some(3))] {
        let mut want = Arr::zeros(&x.shape);
        each(&g.shape, &mut |o| {
            let (ranges, div) = avg_window(&p, &x.shape[2..], &o[2..], include_pad, divisor);
            for h in ranges[0].0..ranges[0].1 {
                for w in ranges[1].0..ranges[1].1 {
                    let at = want.at(&[o[0], o[1], h, w]);
                    want.data[at] += g.data[g.at(o)] / div;
                }
            }
        });
        let mut args = vec![("grad_output", tensor_arg(0)), ("self", tensor_arg(1))];
        args.extend(avg_args(&p, include_pad, divisor));
        let got = run_op("avg_pool2d_backward.default", &[g.tensor(DType::F32), x.tensor(DType::F32)], &args, &[(DType::F32, want.shape.clone())]);
        check("avg_pool2d backward", &got[0], &want);
    }

    // adaptive: each window's gradient spread over it, over its size.
    let x = Arr::random(&[2, 3, 7, 5], 19);
    let g = Arr::random(&[2, 3, 3, 4], 20);
    let mut want = Arr::zeros(&x.shape);
    each(&g.shape, &mut |o| {
        let (h, w) = (adaptive(o[2], 7, 3), adaptive(o[3], 5, 4));
        let size = ((h.1 - h.0) * (w.1 - w.0)) as f64;
        for i in h.0..h.1 {
            for j in w.0..w.1 {
                let at = want.at(&[o[0], o[1], i, j]);
                want.data[at] += g.data[g.at(o)] / size;
            }
        }
    });
    let args = [("grad_output", tensor_arg(0)), ("self", tensor_arg(1))];
    let got = run_op("_adaptive_avg_pool2d_backward.default", &[g.tensor(DType::F32), x.tensor(DType::F32)], &args, &[(DType::F32, want.shape.clone())]);
    check("adaptive_avg_pool2d backward", &got[0], &want);
}

// ---- shape rules ----

/// Operands that do not fit together are refused with an error naming the rule.
#[test]
fn inconsistent_operands_are_refused() {
    let f32 = |shape: &[i64]| (DType::F32, shape.to_vec());
    let conv = |x: &[i64], w: &[i64], stride: i64, padding: i64, groups: i64, out: &[usize]| {
        let args = [("input", tensor_arg(0)), ("weight", tensor_arg(1)), ("bias", json!({"as_none": true})), ("stride", ints(&[stride])),
            ("padding", ints(&[padding])), ("dilation", ints(&[1])), ("transposed", json!({"as_bool": false})), ("output_padding", ints(&[0])),
            ("groups", json!({"as_int": groups}))];
        program("convolution.default", &[f32(x), f32(w)], &args, &[(DType::F32, out.to_vec())])
    };
    let pool = |x: &[i64], kernel: i64, padding: i64, out: &[usize]| {
        let args = [("self", tensor_arg(0)), ("kernel_size", ints(&[kernel])), ("stride", ints(&[1])), ("padding", ints(&[padding]))];
        program("max_pool2d_with_indices.default", &[f32(x)], &args, &[(DType::F32, out.to_vec()), (DType::I64, out.to_vec())])
    };
    let cases = [
        (conv(&[1, 4, 8], &[2, 3, 3], 1, 0, 1, &[1, 2, 6]), "the input has weight.size(1) * groups channels: 4 == 3 does not hold"),
        (conv(&[1, 4, 8], &[3, 2, 3], 1, 0, 2, &[1, 3, 6]), "the output channels (weight.size(0)) (3) must divide by groups (2)"),
        (conv(&[1, 4, 2], &[2, 4, 5], 1, 1, 1, &[1, 2, 1]), "spatial dimension 0 of size 2 (padding 1) must hold at least one window of 5"),
        (conv(&[1, 4, 8], &[2, 4, 3], 0, 0, 1, &[1, 2, 6]), "stride and dilation must be positive"),
        (conv(&[1, 4, 8], &[2, 4, 3], 1, 0, 0, &[1, 2, 6]), "groups must be positive, got 0"),
        (pool(&[1, 2, 8, 8], 3, 2, &[1, 2, 10, 10]), "padding 2 of spatial dimension 0 must be at most half of the kernel (1)"),
        (pool(&[1, 8, 8], 0, 0, &[1, 9, 9]), "kernel_size and dilation must be positive"),
    ];
    for ((_dir, json), needle) in cases {
        fails_with(&compile(&json), needle);
    }
    // A gradient of another shape than the pooled output.
    let args = [("grad_output", tensor_arg(0)), ("self", tensor_arg(1)), ("kernel_size", ints(&[2])), ("stride", ints(&[2])), ("padding", ints(&[0])),
        ("ceil_mode", json!({"as_bool": false})), ("count_include_pad", json!({"as_bool": true})), ("divisor_override", json!({"as_none": true}))];
    let (_dir, json) = program("avg_pool2d_backward.default", &[f32(&[1, 2, 5, 4]), f32(&[1, 2, 8, 8])], &args, &[(DType::F32, vec![1, 2, 8, 8])]);
    fails_with(&compile(&json), "grad_output has the pooled shape at dimension 2: 5 == 4 does not hold");
}
