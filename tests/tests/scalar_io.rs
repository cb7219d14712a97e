//! Python scalars in and out of a compiled program, as torch.export records them:
//! `raw/scalar_args` is `forward(x, n: int, s: float)` with `n` a dynamic int (a SymInt
//! user input: calls use 3 then 5) and `s` specialised to 0.5 (a constant input);
//! `raw/symint_output` returns `(tanh(x) * 2, x.shape[0] * 2)` with a dynamic batch (a
//! SymInt user output). Inputs and PyTorch's outputs are the recorded ones, python
//! scalars in the safetensors metadata "scalars".

use aotc_runtime::pytree::PyValue;
use aotc_runtime::{DType, Model, Tensor, Value};
use aotc_tests::{calls, compare, compile, fixture, run_with, tolerance, Outputs};
use std::path::Path;

/// One recorded call: its flat inputs (tensors and python scalars), and PyTorch's outputs
/// by flat index: tensors, and the python scalars of the metadata.
type Recorded = (Vec<Value>, Vec<(usize, Tensor)>, Vec<(usize, Value)>);

/// The recorded call `call` of the fixture in `dir`, whose program takes `inputs` inputs.
fn recorded(dir: &Path, call: usize, inputs: usize) -> Recorded {
    let values = aotc::tensor_io::read_inputs(&dir.join(format!("inputs_{call}.safetensors")), inputs)
        .unwrap_or_else(|e| panic!("call {call}: {e}"));
    let (tensors, scalars) =
        aotc::tensor_io::read(&dir.join(format!("expected_{call}.safetensors"))).expect("expected outputs");
    let index = |k: &str| k.parse::<usize>().expect("outputs are keyed by flat index");
    let tensors = tensors.into_iter().map(|(k, t)| (index(&k), t)).collect();
    let scalars = scalars
        .into_iter()
        .map(|(k, v)| {
            let value = aotc::tensor_io::scalar(&v).unwrap_or_else(|| panic!("expected scalar {k} is {v}"));
            (index(&k), value)
        })
        .collect();
    (values, tensors, scalars)
}

/// The python scalar a 0-dim output holds, whatever kind the library reports for it.
fn scalar_of(t: &Tensor, kind: i32) -> Value {
    assert!(t.shape.is_empty(), "a scalar output is 0-dim, got shape {:?}", t.shape);
    if let Some(v) = t.scalar(kind) {
        return v;
    }
    match t.dtype {
        DType::I64 => Value::Int(i64::from_le_bytes(t.data[..8].try_into().unwrap())),
        DType::F64 => Value::Float(f64::from_le_bytes(t.data[..8].try_into().unwrap())),
        DType::Bool => Value::Bool(t.data[0] != 0),
        other => panic!("a scalar output of dtype {other}"),
    }
}

/// Every recorded call, in order on one instance, through `aotc_run` and through
/// `aotc_run_into` (on outputs `aotc_output_shapes` sized): every tensor and every python
/// scalar PyTorch returned. Returns how many values were compared.
fn check_every_call(name: &str) -> usize {
    let dir = fixture(name);
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let (rtol, atol) = tolerance(&dir);
    let mut compared = 0;
    for into in [false, true] {
        let mut model = Model::load_with_threads(&so, aotc_runtime::Device::Cpu, 1).expect("load");
        let kinds: Vec<i32> = model.outputs().iter().map(|o| o.kind).collect();
        for call in 0..calls(&dir) {
            let (mut inputs, tensors, scalars) = recorded(&dir, call, model.inputs().len());
            let what = format!("{name} call {call}{}", if into { " (run_into)" } else { "" });
            let how = if into { Outputs::IntoCaller } else { Outputs::Returned };
            let outputs = run_with(&mut model, &mut inputs, how).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(outputs.len(), tensors.len() + scalars.len(), "{what}: output count");
            for (i, want) in &tensors {
                compare(&format!("{what} output {i}"), want, &outputs[*i], rtol, atol).unwrap();
                compared += 1;
            }
            for (i, want) in &scalars {
                assert_eq!(&scalar_of(&outputs[*i], kinds[*i]), want, "{what}: python scalar output {i}");
                compared += 1;
            }
        }
    }
    compared
}

#[test]
fn a_dynamic_int_input_and_a_specialised_float_match_pytorch_on_every_call() {
    // Two calls (n = 3, then 5), two tensors each, both ways.
    assert_eq!(check_every_call("raw/scalar_args"), 8);
}

#[test]
fn a_symint_output_is_computed_from_the_batch_on_every_call() {
    // Two calls (batch 3 -> 6, batch 7 -> 14), a tensor and the int each, both ways.
    assert_eq!(check_every_call("raw/symint_output"), 8);
}

#[test]
fn scalar_inputs_are_described_as_python_scalars() {
    let dir = fixture("raw/scalar_args");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let model = Model::load(&so, aotc_runtime::Device::Cpu).expect("load");
    let described: Vec<(&str, i32)> = model.inputs().iter().map(|i| (i.name.as_str(), i.kind)).collect();
    use aotc_abi::value_kind::{FLOAT, INT, TENSOR};
    assert_eq!(described, [("x", TENSOR), ("n", INT), ("s", FLOAT)]);
}

/// Runs `scalar_args` once with `n` and `s` as given (x = ones), returning the error.
fn scalar_args_error(n: Value, s: Value) -> aotc_runtime::Error {
    let dir = fixture("raw/scalar_args");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut model = Model::load(&so, aotc_runtime::Device::Cpu).expect("load");
    let x = Value::Tensor(Tensor::from_f32(&[4, 6], &[1.0; 24]));
    match model.run(&mut [x, n, s]) {
        Ok(_) => panic!("the call was expected to fail"),
        Err(e) => e,
    }
}

#[test]
fn a_dynamic_int_outside_its_range_fails_the_call_naming_the_input() {
    // Export recorded n in [0, inf].
    let e = scalar_args_error(Value::Int(-1), Value::Float(0.5));
    assert_eq!(e.code, aotc_abi::status::RANGE, "{e}");
    assert!(e.message.contains("input 1 ('n')") && e.message.contains("-1") && e.message.contains("[0, inf]"), "{e}");
}

#[test]
fn a_dynamic_int_must_be_an_int() {
    let e = scalar_args_error(Value::Float(3.0), Value::Float(0.5));
    assert_eq!(e.code, aotc_abi::status::DTYPE, "{e}");
    assert!(e.message.contains("input 1 ('n')") && e.message.contains("int64"), "{e}");
}

#[test]
fn a_specialised_float_must_hold_the_exported_value_and_be_a_float() {
    // As torch: a specialised python scalar of another value, or of another type, is refused.
    let e = scalar_args_error(Value::Int(3), Value::Float(0.7));
    assert_eq!(e.code, aotc_abi::status::CONSTANT, "{e}");
    assert!(e.message.contains("input 2 ('s')") && e.message.contains("0.5") && e.message.contains("0.7"), "{e}");
    let e = scalar_args_error(Value::Int(3), Value::Int(1));
    assert_eq!(e.code, aotc_abi::status::DTYPE, "{e}");
    assert!(e.message.contains("input 2 ('s')") && e.message.contains("float"), "{e}");
}

/// forward(x, reduction: str, scale: float, extra=None), specialised to ("mean", 2.0,
/// None): the str and None are inputs of their own kinds; the str must be the exported one.
#[test]
fn a_specialised_str_and_none_are_inputs_the_call_checks() {
    assert_eq!(check_every_call("raw/constant_args"), 4);
    let dir = fixture("raw/constant_args");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut model = Model::load(&so, aotc_runtime::Device::Cpu).expect("load");
    let described: Vec<(&str, i32)> = model.inputs().iter().map(|i| (i.name.as_str(), i.kind)).collect();
    use aotc_abi::value_kind::{FLOAT, NONE, STR, TENSOR};
    assert_eq!(described, [("x", TENSOR), ("reduction", STR), ("scale", FLOAT), ("extra", NONE)]);
    let x = || Value::Tensor(Tensor::from_f32(&[4, 3], &[1.0; 12]));
    let out = model.run(&mut [x(), Value::Str("mean".into()), Value::Float(2.0), Value::None]).expect("the call");
    assert_eq!(out[0].to_f64_vec(), [2.0; 3], "mean over the rows of 2 * ones");
    let e = model.run(&mut [x(), Value::Str("sum".into()), Value::Float(2.0), Value::None]).unwrap_err();
    assert_eq!(e.code, aotc_abi::status::CONSTANT, "{e}");
    assert!(
        e.message.contains("input 1 ('reduction')") && e.message.contains("\"mean\"") && e.message.contains("\"sum\""),
        "{e}"
    );
    let e = model.run(&mut [x(), Value::Float(1.0), Value::Float(2.0), Value::None]).unwrap_err();
    assert_eq!(e.code, aotc_abi::status::DTYPE, "{e}");
    assert!(e.message.contains("input 1 ('reduction')") && e.message.contains("uint8"), "{e}");
}

#[test]
fn a_pytree_call_takes_the_int_and_returns_the_scalar_output() {
    let dir = fixture("raw/symint_output");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut model = Model::load(&so, aotc_runtime::Device::Cpu).expect("load");
    let x = Tensor::from_f32(&[5, 4], &[0.5; 20]);
    let mut args = PyValue::Tuple(vec![PyValue::Tensor(x)]);
    let out = model.call(&mut args, &mut PyValue::Dict(vec![])).expect("call");
    let PyValue::Tuple(items) = out else { panic!("expected a tuple, got {out:?}") };
    let kind = model.outputs()[1].kind;
    let n = match &items[1] {
        PyValue::Int(v) => Value::Int(*v),
        PyValue::Tensor(t) => scalar_of(t, kind),
        other => panic!("output 1 is {other:?}"),
    };
    assert_eq!(n, Value::Int(10), "x.shape[0] * 2 for a batch of 5");

    let dir = fixture("raw/scalar_args");
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut model = Model::load(&so, aotc_runtime::Device::Cpu).expect("load");
    let (inputs, tensors, _) = recorded(&dir, 1, 3);
    let leaves: Vec<PyValue> = inputs
        .into_iter()
        .map(|v| match v {
            Value::Tensor(t) => PyValue::Tensor(t),
            Value::Int(i) => PyValue::Int(i),
            Value::Float(f) => PyValue::Float(f),
            Value::Bool(b) => PyValue::Bool(b),
            Value::Str(s) => PyValue::Str(s),
            Value::None => PyValue::None,
        })
        .collect();
    let out = model.call(&mut PyValue::Tuple(leaves), &mut PyValue::Dict(vec![])).expect("call");
    let PyValue::Tuple(items) = out else { panic!("expected a tuple") };
    let PyValue::Tensor(got) = &items[1] else { panic!("output 1 is a tensor") };
    compare("scalar_args call 1 output 1", &tensors[1].1, got, 1e-3, 1e-4).unwrap();
}

#[test]
fn the_cli_writes_python_scalar_outputs_into_the_metadata() {
    use aotc_abi::value_kind::{BOOL, FLOAT, INT, TENSOR};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outputs_0.safetensors");
    let t = Tensor::from_f32(&[2], &[1.0, 2.0]);
    let int = Tensor { dtype: DType::I64, shape: vec![], data: 14i64.to_le_bytes().to_vec() };
    let float = Tensor { dtype: DType::F64, shape: vec![], data: 0.25f64.to_le_bytes().to_vec() };
    let flag = Tensor { dtype: DType::Bool, shape: vec![], data: vec![1] };
    let zero_dim = Tensor { dtype: DType::I64, shape: vec![], data: 7i64.to_le_bytes().to_vec() };
    aotc::tensor_io::write_outputs(
        &path,
        &[t.clone(), int, float, flag, zero_dim.clone()],
        &[TENSOR, INT, FLOAT, BOOL, TENSOR],
    )
    .unwrap();
    let (tensors, scalars) = aotc::tensor_io::read(&path).unwrap();
    assert_eq!(tensors.keys().collect::<Vec<_>>(), ["0", "4"], "tensor outputs (a 0-dim tensor stays one)");
    assert_eq!((&tensors["0"], &tensors["4"]), (&t, &zero_dim));
    assert_eq!(serde_json::to_string(&scalars).unwrap(), r#"{"1":14,"2":0.25,"3":true}"#);
}
