//! One-node programs for operator tests: `target(args)` over user inputs, written into an
//! op fixture's archive layout, compiled with the CLI and run through the loader; and the
//! dense arrays their references compute with.
#![allow(dead_code)] // each test file uses its own subset

use super::common::{aotc, fixture, succeeds};
use aotc_abi::DType;
use aotc_runtime::{Device, Model, Tensor, Value};
use serde_json::{json, Value as Json};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A dense array for references, row-major, of values float32 can hold exactly (the
/// program computes on float32 copies).
#[derive(Clone, Debug)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Arr {
    pub fn zeros(shape: &[usize]) -> Arr {
        Arr { shape: shape.to_vec(), data: vec![0.0; shape.iter().product()] }
    }

    /// Deterministic values in [lo, hi).
    pub fn random(shape: &[usize], lo: f64, hi: f64, seed: u64) -> Arr {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let data = (0..shape.iter().product::<usize>())
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (lo + (state >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)) as f32 as f64
            })
            .collect();
        Arr { shape: shape.to_vec(), data }
    }

    /// The array of `shape` whose element at each index is `f(index)`.
    pub fn from_fn(shape: &[usize], f: &mut dyn FnMut(&[usize]) -> f64) -> Arr {
        let mut data = vec![];
        each(shape, &mut |i| data.push(f(i)));
        Arr { shape: shape.to_vec(), data }
    }

    pub fn offset(&self, index: &[usize]) -> usize {
        index.iter().zip(&self.shape).fold(0, |acc, (i, s)| acc * s + i)
    }

    pub fn get(&self, index: &[usize]) -> f64 {
        self.data[self.offset(index)]
    }

    pub fn tensor(&self) -> Tensor {
        self.tensor_of(DType::F32)
    }

    /// The array as a tensor of `dtype` (float32, or int64 of values that are integers).
    pub fn tensor_of(&self, dtype: DType) -> Tensor {
        let shape: Vec<i64> = self.shape.iter().map(|&s| s as i64).collect();
        match dtype {
            DType::F32 => Tensor::from_f32(&shape, &self.data.iter().map(|&v| v as f32).collect::<Vec<_>>()),
            DType::I64 => {
                Tensor { dtype, shape, data: self.data.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect() }
            }
            other => panic!("no test tensors of {other}"),
        }
    }
}

/// Calls `f` on every index of `shape`, row-major.
pub fn each(shape: &[usize], f: &mut dyn FnMut(&[usize])) {
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

/// `got` equals `want` (shape, and values to 1e-4 relative; NaN where NaN).
pub fn check(what: &str, got: &Tensor, want: &Arr) {
    let shape: Vec<i64> = want.shape.iter().map(|&s| s as i64).collect();
    assert_eq!(got.shape, shape, "{what}: shape");
    for (i, (g, w)) in got.to_f64_vec().iter().zip(&want.data).enumerate() {
        let close = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-4 * (1.0 + w.abs());
        assert!(close, "{what}: element {i} is {g}, expected {w}");
    }
}

/// torch.export's ScalarType code of `d`.
pub fn torch_code(d: DType) -> i64 {
    (0..64).find(|&c| DType::from_torch_code(c) == Some(d)).expect("every dtype has a torch code")
}

/// Static sizes as torch.export records them.
pub fn dims(shape: &[usize]) -> Vec<Json> {
    shape.iter().map(|&s| json!({"as_int": s})).collect()
}

/// A symbolic size: a sympy expression and its value in the example inputs.
pub fn sym(expr: &str, hint: i64) -> Json {
    json!({"as_expr": {"expr_str": expr, "hint": {"as_int": hint}}})
}

/// An int list argument.
pub fn ints(v: &[i64]) -> Json {
    json!({"as_ints": v})
}

pub fn tensor_arg(i: usize) -> Json {
    json!({"as_tensor": {"name": format!("x_{i}")}})
}

/// A one-node program: `target` without the `torch.ops.aten.` prefix, user inputs
/// `x_0...` and outputs `y_0...` with their dtypes and recorded sizes, the node's
/// arguments, and, for symbolic sizes, the graph's `sym_int_values` and the program's
/// `range_constraints`.
pub struct Op<'a> {
    pub target: &'a str,
    pub inputs: Vec<(DType, Vec<Json>)>,
    pub args: Vec<(&'a str, Json)>,
    pub outputs: Vec<(DType, Vec<Json>)>,
    pub sym_int_values: Json,
    pub range_constraints: Json,
}

impl<'a> Op<'a> {
    /// A program over static float32 inputs and outputs.
    pub fn new(target: &'a str, inputs: &[&Arr], args: Vec<(&'a str, Json)>, outputs: &[&[usize]]) -> Op<'a> {
        Op {
            target,
            inputs: inputs.iter().map(|a| (DType::F32, dims(&a.shape))).collect(),
            args,
            outputs: outputs.iter().map(|s| (DType::F32, dims(s))).collect(),
            sym_int_values: json!({}),
            range_constraints: json!({}),
        }
    }

    /// Writes the program into a new directory: (the directory, its model.json).
    pub fn write(&self) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let mut zip = zip::ZipArchive::new(
            std::fs::File::open(fixture("ops/handwritten.grid_sampler_2d_bicubic_zeros__float32__0").join("model.pt2"))
                .unwrap(),
        )
        .unwrap();
        for i in 0..zip.len() {
            let mut entry = zip.by_index(i).unwrap();
            let path = dir.path().join(Path::new(entry.name()).components().skip(1).collect::<PathBuf>());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let mut bytes = vec![];
            entry.read_to_end(&mut bytes).unwrap();
            std::fs::write(&path, bytes).unwrap();
        }
        let json_path = dir.path().join("models/model.json");
        let mut program: Json = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
        // Strides are recorded but only sizes matter to a user input.
        let meta = |d: DType, sizes: &[Json]| {
            json!({"dtype": torch_code(d), "sizes": sizes, "requires_grad": false, "device": {"type": "cpu", "index": null},
            "strides": vec![json!({"as_int": 1}); sizes.len()], "storage_offset": {"as_int": 0}, "layout": 7})
        };
        let in_names: Vec<String> = (0..self.inputs.len()).map(|i| format!("x_{i}")).collect();
        let out_names: Vec<String> = (0..self.outputs.len()).map(|i| format!("y_{i}")).collect();
        let mut values = serde_json::Map::new();
        for (name, (d, sizes)) in in_names.iter().zip(&self.inputs).chain(out_names.iter().zip(&self.outputs)) {
            values.insert(name.clone(), meta(*d, sizes));
        }
        let tensor = |n: &String| json!({"as_tensor": {"name": n}});
        let node_inputs: Vec<Json> =
            self.args.iter().map(|(name, arg)| json!({"name": name, "arg": arg, "kind": 1})).collect();
        program["range_constraints"] = self.range_constraints.clone();
        let g = &mut program["graph_module"];
        g["graph"]["inputs"] = in_names.iter().map(tensor).collect();
        g["graph"]["outputs"] = out_names.iter().map(tensor).collect();
        g["graph"]["tensor_values"] = Json::Object(values);
        g["graph"]["sym_int_values"] = self.sym_int_values.clone();
        g["graph"]["nodes"] = json!([{"target": format!("torch.ops.aten.{}", self.target), "name": "op", "inputs": node_inputs,
            "outputs": out_names.iter().map(tensor).collect::<Vec<_>>(), "metadata": {}}]);
        g["signature"]["input_specs"] = in_names.iter().map(|n| json!({"user_input": {"arg": tensor(n)}})).collect();
        g["signature"]["output_specs"] = out_names.iter().map(|n| json!({"user_output": {"arg": tensor(n)}})).collect();
        let leaf = json!({"type": null, "context": null, "children_spec": []});
        let tuple =
            |n: usize| json!({"type": "builtins.tuple", "context": "null", "children_spec": vec![leaf.clone(); n]});
        let in_spec = json!([1, {"type": "builtins.tuple", "context": "null", "children_spec": [tuple(in_names.len()), {"type": "builtins.dict", "context": "[]", "children_spec": []}]}]);
        let out_spec = json!([1, if out_names.len() == 1 { leaf.clone() } else { tuple(out_names.len()) }]);
        let sig = &mut g["module_call_graph"][0]["signature"];
        sig["in_spec"] = in_spec.to_string().into();
        sig["out_spec"] = out_spec.to_string().into();
        sig["forward_arg_names"] = json!(in_names);
        std::fs::write(&json_path, program.to_string()).unwrap();
        (dir, json_path)
    }

    pub fn compile(&self) -> (tempfile::TempDir, Output) {
        let (dir, json) = self.write();
        let out = aotc(&[&"compile", &json, &"-o", &dir.path().join("op.so")]);
        (dir, out)
    }

    /// Compiles the program and runs it once per call: the outputs of each call.
    pub fn run(&self, calls: &[Vec<Tensor>]) -> Vec<Vec<Tensor>> {
        let (dir, out) = self.compile();
        succeeds(&out);
        let mut model = Model::load(dir.path().join("op.so"), Device::Cpu).unwrap();
        calls
            .iter()
            .map(|inputs| {
                let mut values: Vec<Value> = inputs.iter().cloned().map(Value::Tensor).collect();
                model.run(&mut values).unwrap_or_else(|e| panic!("{}: {e}", self.target))
            })
            .collect()
    }

    /// Runs the program once on `inputs` (as tensors of the inputs' dtypes) and checks its
    /// outputs against `want`.
    pub fn check(&self, what: &str, inputs: &[&Arr], want: &[&Arr]) {
        assert_eq!(inputs.len(), self.inputs.len(), "{what}: number of inputs");
        let got = self.run(&[inputs.iter().zip(&self.inputs).map(|(a, (d, _))| a.tensor_of(*d)).collect()]).remove(0);
        assert_eq!(got.len(), want.len(), "{what}: number of outputs");
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            check(&format!("{what}, output {k}"), g, w);
        }
    }
}
