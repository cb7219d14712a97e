//! aot_load-style use from Rust: python-like `(args, kwargs)` in, the output tree out.
//!
//!     aotc compile tests/fixtures/pytree_io/model.pt2 -o pytree.so
//!     cargo run -p aotc-runtime --example pytree_call -- pytree.so
//!
//! The program is `forward({"a": A, "b": B}, scale=3.0) -> {"sum": .., "parts": (.., ..)}`.

use aotc_runtime::pytree::PyValue;
use aotc_runtime::{Device, Model, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: pytree_call LIBRARY.so")?;
    let mut model = Model::load(&path, Device::Cpu)?;
    let a = Tensor::from_f32(&[2, 4], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
    let b = Tensor::from_f32(&[2, 4], &[1.0; 8]);
    let mut args = PyValue::Tuple(vec![
        PyValue::Dict(vec![("a".into(), PyValue::Tensor(a)), ("b".into(), PyValue::Tensor(b))]),
        PyValue::Float(3.0),
    ]);
    let mut kwargs = PyValue::Dict(vec![]);
    let out = model.call(&mut args, &mut kwargs)?;
    print_tree(&out, 0);
    Ok(())
}

fn print_tree(v: &PyValue, depth: usize) {
    let pad = "  ".repeat(depth);
    match v {
        PyValue::Dict(kv) => kv.iter().for_each(|(k, x)| {
            println!("{pad}{k}:");
            print_tree(x, depth + 1)
        }),
        PyValue::Tuple(xs) | PyValue::List(xs) => xs.iter().for_each(|x| print_tree(x, depth + 1)),
        PyValue::Tensor(t) => println!("{pad}{}{:?} {:?}", t.dtype, t.shape, t.to_f64_vec()),
        other => println!("{pad}{other:?}"),
    }
}
