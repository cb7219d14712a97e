//! Programs whose recorded shapes lie: every shape rule is computed from the inputs and
//! checked for consistency, so a damaged or hostile archive is refused with an error
//! naming the node (or, for symbolic sizes, the call is refused at run time) instead of
//! compiling into a library that reads or writes out of bounds. Complex values (FFTs) are
//! checked here too: they must stay inside the graph, and FFT sizes may be dynamic.

mod common;

use common::{aotc, fails_with, fixture};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Output;

/// Unpacks fixture `name` into `dir` (the archive layout: models/model.json beside
/// data/), edits the program with `edit`, and returns the path of the edited model.json.
fn edited(name: &str, dir: &Path, edit: impl Fn(&mut Value)) -> PathBuf {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(fixture(name).join("model.pt2")).unwrap()).unwrap();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap();
        let rel: PathBuf = Path::new(entry.name()).components().skip(1).collect();
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut bytes = vec![];
        entry.read_to_end(&mut bytes).unwrap();
        std::fs::write(&path, bytes).unwrap();
    }
    let path = dir.join("models/model.json");
    let mut program: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut program);
    std::fs::File::create(&path).unwrap().write_all(program.to_string().as_bytes()).unwrap();
    path
}

fn compile(json: &Path, dir: &Path) -> Output {
    aotc(&[&"compile", &json, &"-o", &dir.join("m.so")])
}

/// The first node with `target` (without the torch.ops.aten. prefix).
fn node<'a>(program: &'a mut Value, target: &str) -> &'a mut Value {
    let target = format!("torch.ops.aten.{target}");
    program["graph_module"]["graph"]["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n["target"] == target.as_str())
        .unwrap_or_else(|| panic!("no {target} node"))
}

fn arg<'a>(node: &'a mut Value, name: &str) -> &'a mut Value {
    node["inputs"].as_array_mut().unwrap().iter_mut().find(|a| a["name"] == name).map(|a| &mut a["arg"]).unwrap()
}

/// Records `sizes` as the shape of graph value `name`, so the lie is consistent with
/// the metadata and only the shape rule can catch it.
fn record_sizes(program: &mut Value, name: &str, sizes: &[i64]) {
    program["graph_module"]["graph"]["tensor_values"][name]["sizes"] =
        sizes.iter().map(|&s| json!({"as_int": s})).collect();
}

fn output_name(node: &Value, i: usize) -> String {
    let outs = &node["outputs"];
    outs[0]["as_tensors"].get(i).unwrap_or(&outs[i]["as_tensor"])["name"].as_str().unwrap().to_string()
}

#[test]
fn a_view_must_keep_the_element_count() {
    let dir = tempfile::tempdir().unwrap();
    let json = edited("transformer_block", dir.path(), |p| {
        let n = node(p, "view.default");
        *arg(n, "size") = json!({"as_ints": [16, 64]});
        let out = output_name(n, 0);
        record_sizes(p, &out, &[16, 64]);
    });
    fails_with(
        &compile(&json, dir.path()),
        "(torch.ops.aten.view.default): a view keeps the number of elements: 1024 == 512 does not hold",
    );
}

#[test]
fn split_sizes_must_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let json = edited("transformer_block", dir.path(), |p| {
        let n = node(p, "split_with_sizes.default");
        *arg(n, "split_sizes") = json!({"as_ints": [32, 32, 64]});
        let out = output_name(n, 2);
        let mut sizes: Vec<i64> = p["graph_module"]["graph"]["tensor_values"][&out]["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["as_int"].as_i64().unwrap())
            .collect();
        *sizes.last_mut().unwrap() = 64;
        record_sizes(p, &out, &sizes);
    });
    fails_with(&compile(&json, dir.path()), "split sizes add up to the size of dimension 2: 128 == 96 does not hold");
}

#[test]
fn negative_and_overflowing_sizes_are_refused() {
    for (sizes, needle) in [
        (vec![8, -8], "dimension 1 must not be negative"),
        // 2^31 x 2^31 float32: the byte size wraps around in 64 bits, which used to give a 0-byte buffer.
        (vec![1 << 31, 1 << 31], "the tensor must fit in 64 GiB"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let json = edited("transformer_block", dir.path(), |p| {
            let n = node(p, "full.default");
            *arg(n, "size") = json!({"as_ints": sizes});
            let out = output_name(n, 0);
            record_sizes(p, &out, &sizes);
        });
        fails_with(&compile(&json, dir.path()), needle);
    }
}

#[test]
fn layer_norm_shape_must_be_the_trailing_shape() {
    let dir = tempfile::tempdir().unwrap();
    let json = edited("transformer_block", dir.path(), |p| {
        *arg(node(p, "native_layer_norm.default"), "normalized_shape") = json!({"as_ints": [16]})
    });
    fails_with(&compile(&json, dir.path()), "normalized_shape [16] is not the trailing shape of the input [2, 8, 32]");
}

#[test]
fn arguments_are_parsed_strictly() {
    type Case<'a> = (&'a str, &'a dyn Fn(&mut Value), &'a str);
    let cases: [Case; 4] = [
        // half_to_float has no default: a program without it is damaged, not "False".
        (
            "dynamic_batch_mlp",
            &|p| {
                let n = node(p, "_log_softmax.default");
                n["inputs"].as_array_mut().unwrap().retain(|a| a["name"] != "half_to_float");
            },
            "missing required argument 'half_to_float'",
        ),
        (
            "transformer_block",
            &|p| {
                let n = node(p, "native_layer_norm.default");
                n["inputs"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "epsilon", "arg": {"as_float": 0.1}, "kind": 1}));
            },
            "unknown argument 'epsilon'",
        ),
        (
            "dynamic_batch_mlp",
            &|p| {
                let n = node(p, "gelu.default");
                n["inputs"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "approximate", "arg": {"as_string": "bogus"}, "kind": 2}));
            },
            "approximate must be 'none' or 'tanh', got 'bogus'",
        ),
        (
            "dynamic_batch_mlp",
            &|p| {
                let n = node(p, "permute.default");
                let dims = n["inputs"][1].clone();
                n["inputs"].as_array_mut().unwrap().push(dims);
            },
            "argument 'dims' is passed twice",
        ),
    ];
    for (fixture, edit, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        fails_with(&compile(&edited(fixture, dir.path(), edit), dir.path()), needle);
    }
}

#[test]
fn range_constraints_must_be_sane() {
    for (min, max, needle) in [
        (10, 2, "range constraint of s77: minimum 10 is larger than maximum 2"),
        (-4, 8, "range constraint of s77: minimum -4 is negative"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let json = edited("dynamic_batch_mlp", dir.path(), |p| {
            p["range_constraints"]["s77"] = json!({"min_val": min, "max_val": max})
        });
        fails_with(&compile(&json, dir.path()), needle);
    }
}

#[test]
fn a_mutated_input_gets_a_value_of_its_own_shape() {
    let dir = tempfile::tempdir().unwrap();
    // Write the 1-element `select` result back into the 4-element input x.
    let json = edited("user_input_mutation", dir.path(), |p| {
        let select = output_name(node(p, "select.int"), 0);
        p["graph_module"]["signature"]["output_specs"][0]["user_input_mutation"]["arg"]["name"] = select.into();
    });
    fails_with(&compile(&json, dir.path()), "user input 'x'");
}

/// A view whose element count is right only for odd batch sizes: the compiler cannot
/// decide it, so the library checks it on every call and refuses even batches.
#[test]
fn symbolic_shape_rules_are_checked_on_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let odd = "Add(Mul(Integer(2), FloorDiv(Symbol('s77', positive=True, integer=True), Integer(2))), Integer(1))";
    let json = edited("dynamic_batch_mlp", dir.path(), |p| {
        let g = &mut p["graph_module"]["graph"];
        g["sym_int_values"]["odd_batch"] = json!({"as_expr": {"expr_str": odd, "hint": {"as_int": 3}}});
        let mut x = g["tensor_values"]["x"].clone();
        x["sizes"][0] = json!({"as_expr": {"expr_str": odd, "hint": {"as_int": 3}}});
        g["tensor_values"]["x_view"] = x;
        let nodes = g["nodes"].as_array_mut().unwrap();
        nodes.insert(
            0,
            json!({
                "target": "torch.ops.aten.view.default", "name": "x_view",
                "inputs": [
                    {"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                    {"name": "size", "arg": {"as_sym_ints": [{"as_name": "odd_batch"}, {"as_int": 8}]}, "kind": 1}
                ],
                "outputs": [{"as_tensor": {"name": "x_view"}}]
            }),
        );
        let addmm = nodes.iter_mut().find(|n| n["target"] == "torch.ops.aten.addmm.default").unwrap();
        *arg(addmm, "mat1") = json!({"as_tensor": {"name": "x_view"}});
    });
    let so = dir.path().join("m.so");
    let out = aotc(&[&"compile", &json, &"-o", &so]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let input = |batch: i64| {
        let p = dir.path().join(format!("x{batch}.safetensors"));
        aotc::tensor_io::write(&p, &[("0".into(), &aotc_runtime::Tensor::zeros(aotc_abi::DType::F32, &[batch, 8]))])
            .unwrap();
        p
    };
    let run = |batch: i64| aotc(&[&"run", &so, &"--input", &input(batch), &"--output-dir", &dir.path()]);
    let ok = run(3);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    fails_with(&run(4), "node 'x_view' (torch.ops.aten.view.default): a view keeps the number of elements");
}

/// Complex values exist only inside a graph, as a float32 pair per element: a complex
/// input or output, an operator without a complex lowering, a cast aotc cannot do, and a
/// half spectrum too short for last_dim_size are refused with errors naming them.
#[test]
fn complex_values_stay_inside_the_graph_and_fft_sizes_are_checked() {
    type Case<'a> = (&'a str, &'a dyn Fn(&mut Value), &'a str);
    let cases: [Case; 5] = [
        ("ops/handwritten.fft_r2c_abs__float32__0", &|p| {
            p["graph_module"]["graph"]["outputs"][0]["as_tensor"]["name"] = "_fft_r2c".into();
            p["graph_module"]["signature"]["output_specs"][0]["user_output"]["arg"]["as_tensor"]["name"] = "_fft_r2c".into();
        }, "graph output '_fft_r2c' is complex64: complex tensors are supported only as intermediates"),
        ("ops/handwritten.fft_r2c_abs__float32__0", &|p| p["graph_module"]["graph"]["tensor_values"]["x_0"]["dtype"] = 10.into(),
            "'x_0' is complex64: complex tensors are supported only as intermediates"),
        ("ops/handwritten.fft_r2c_abs__float32__0", &|p| node(p, "abs.default")["target"] = "torch.ops.aten.neg.default".into(),
            "node 'abs_1' (torch.ops.aten.neg.default): complex inputs are not supported by aten.neg.default"),
        ("ops/fft.irfft__float32__0", &|p| *arg(node(p, "_to_copy.default"), "dtype") = json!({"as_scalar_type": 11}),
            "_to_copy to complex128 (complex tensors are supported as complex64 only) is not supported"),
        ("ops/fft.irfft__float32__0", &|p| {
            *arg(node(p, "_fft_c2r.default"), "last_dim_size") = json!({"as_int": 14});
            record_sizes(p, "_fft_c2r", &[5, 14, 7]);
        }, "(torch.ops.aten._fft_c2r.default): dimension 1 holds the last_dim_size / 2 + 1 entries of the half spectrum: 8 <= 6 does not hold"),
    ];
    for (fixture, edit, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        fails_with(&compile(&edited(fixture, dir.path(), edit), dir.path()), needle);
    }
}

/// An FFT whose signal length is dynamic: r2c, a scale, c2r (each normalized by 1/n)
/// give x * 0.5 / n for every length the library is called with, odd or even.
#[test]
fn fft_lengths_may_be_dynamic() {
    let dir = tempfile::tempdir().unwrap();
    let sym = |expr: &str, hint: i64| json!({"as_expr": {"expr_str": expr, "hint": {"as_int": hint}}});
    let n = "Symbol('s1', positive=True, integer=True)";
    let half = format!("Add(FloorDiv({n}, Integer(2)), Integer(1))");
    let json = edited("ops/handwritten.fft_r2c_c2r_roundtrip__float32__0", dir.path(), |p| {
        let g = &mut p["graph_module"]["graph"];
        for (value, size) in
            [("x_0", sym(n, 8)), ("_fft_r2c", sym(&half, 5)), ("mul", sym(&half, 5)), ("_fft_c2r", sym(n, 8))]
        {
            g["tensor_values"][value]["sizes"][1] = size;
        }
        g["sym_int_values"]["n"] = sym(n, 8);
        *arg(node(p, "_fft_c2r.default"), "last_dim_size") = json!({"as_sym_int": {"as_name": "n"}});
        p["range_constraints"]["s1"] = json!({"min_val": 1, "max_val": 64});
    });
    let so = dir.path().join("m.so");
    common::succeeds(&compile(&json, dir.path()));
    let mut model = aotc_runtime::Model::load(&so, aotc_runtime::Device::Cpu).unwrap();
    for len in [1, 7, 8] {
        let x: Vec<f32> = (0..3 * len).map(|i| (i % 5) as f32 - 1.5).collect();
        let out = model.run(&mut [common::floats(&[3, len], &x)]).unwrap();
        assert_eq!(out[0].shape, [3, len]);
        for (got, x) in out[0].to_f64_vec().iter().zip(&x) {
            let want = *x as f64 * 0.5 / len as f64;
            assert!((got - want).abs() < 1e-5, "length {len}: {got} vs {want}");
        }
    }
}
