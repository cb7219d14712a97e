//! `aotc inspect`: what a program or a compiled library takes, returns and holds.

use crate::lower::{Lowered, LoweredInput};
use crate::{frontend::Source, CompileOptions, Result};
use aotc_abi::manifest::{InputSpec, Manifest, Slot, SymbolRange};
use aotc_abi::sym::SymExpr;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

fn shape(sizes: &[SymExpr], m: &[SymbolRange]) -> String {
    let dims: Vec<String> = sizes
        .iter()
        .map(|s| match s {
            SymExpr::Sym(i) => {
                let r = &m[*i as usize];
                format!("{}∈{r}", r.name)
            }
            other => named(other, m),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// `e` written as `SymExpr`'s Display does, each symbol by the program's own name for it
/// (the name the inputs show: "s77", not the manifest's index "s0").
fn named(e: &SymExpr, m: &[SymbolRange]) -> String {
    let list = |xs: &[SymExpr], sep: &str| {
        xs.iter()
            .map(|x| match x {
                SymExpr::Add(_) | SymExpr::Mul(_) => format!("({})", named(x, m)),
                _ => named(x, m),
            })
            .collect::<Vec<_>>()
            .join(sep)
    };
    match e {
        SymExpr::Int(v) => v.to_string(),
        SymExpr::Sym(s) => m.get(*s as usize).map_or_else(|| format!("s{s}"), |r| r.name.clone()),
        SymExpr::Add(xs) => list(xs, " + "),
        SymExpr::Mul(xs) => list(xs, "*"),
        SymExpr::FloorDiv(a, b) => format!("floordiv({}, {})", named(a, m), named(b, m)),
        SymExpr::Mod(a, b) => format!("mod({}, {})", named(a, m), named(b, m)),
        SymExpr::Max(xs) => format!("max({})", list(xs, ", ")),
        SymExpr::Min(xs) => format!("min({})", list(xs, ", ")),
    }
}

/// Describes a compiled library from its embedded manifest.
pub fn describe_manifest(m: &Manifest) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "compiled from: {} (ABI {})", m.source, m.abi_version);
    if m.cuda.is_none() {
        let _ = match (m.cpu.name.as_str(), m.cpu.features.is_empty()) {
            ("", _) => writeln!(s, "cpu target: the compiling machine's (a library from before --cpu)"),
            (name, true) => writeln!(s, "cpu target: {name} (any x86-64)"),
            (name, false) => writeln!(s, "cpu target: {name} ({})", m.cpu.features.join(", ")),
        };
    }
    let _ = writeln!(s, "inputs ({}):", m.inputs.len());
    for (i, inp) in m.inputs.iter().enumerate() {
        let _ = match inp {
            InputSpec::Tensor(t) => match m.input_symbol(i).and_then(|d| m.symbols.get(d.sym as usize)) {
                Some(r) => writeln!(s, "  {i}: {} python int (dynamic: {} in {r})", t.name, r.name),
                None => writeln!(s, "  {i}: {} {}{}", t.name, t.dtype, shape(&t.sizes, &m.symbols)),
            },
            InputSpec::Constant { name, value } => writeln!(s, "  {i}: {name} = {value:?} (specialised constant)"),
        };
    }
    let _ = writeln!(s, "outputs ({}):", m.outputs.len());
    for (i, o) in m.outputs.iter().enumerate() {
        let _ = match o.kind {
            aotc_abi::value_kind::INT => writeln!(s, "  {i}: {} python int", o.name),
            aotc_abi::value_kind::FLOAT => writeln!(s, "  {i}: {} python float", o.name),
            aotc_abi::value_kind::BOOL => writeln!(s, "  {i}: {} python bool", o.name),
            _ => writeln!(s, "  {i}: {} {}{}", o.name, o.dtype, shape(&o.sizes, &m.symbols)),
        };
    }
    let _ =
        if m.buffers.is_empty() { writeln!(s, "buffers: none") } else { writeln!(s, "buffers ({}):", m.buffers.len()) };
    for b in &m.buffers {
        let _ = writeln!(s, "  {} {}{:?} ({} bytes)", b.name, b.dtype, b.sizes, b.byte_len());
    }
    let _ = writeln!(s, "mutations: {} buffer(s), {} user input(s)", m.buffer_mutations.len(), m.input_mutations.len());
    let _ = writeln!(s, "GEMM FLOPs per call: {}", named(&m.flops, &m.symbols));
    let _ = writeln!(s, "{}", describe_weights(m));
    let _ = writeln!(s, "{}", describe_arena(m));
    let _ = writeln!(s, "in_spec: {}\nout_spec: {}", m.in_spec, m.out_spec);
    s
}

/// Where the weights live, how many, and their fingerprints.
fn describe_weights(m: &Manifest) -> String {
    let w = &m.weights;
    let place = match (&w.file, w.external) {
        (Some(f), true) => format!("in {f} beside the library"),
        _ => "linked in".to_string(),
    };
    format!(
        "weights: {} tensors, {} bytes, {place} (structure fingerprint {}, weights id {})",
        w.entries.len(),
        w.bytes,
        w.fingerprint,
        w.id
    )
}

/// "arena: N bytes (M slots; without reuse: K bytes)" when the compiler laid it out.
fn describe_arena(m: &Manifest) -> String {
    let a = &m.arena;
    let unshared = a.slots.iter().try_fold(0i64, |sum, s| match m.slots.get(s.slot) {
        Some(Slot::Scratch { bytes }) => bytes.as_int().and_then(|n| sum.checked_add(n)),
        _ => None,
    });
    match (&a.layout, unshared) {
        (Some(l), Some(unshared)) => {
            format!("arena: {} bytes ({} slots; without reuse: {unshared} bytes)", l.bytes, a.slots.len())
        }
        _ => format!("arena: {} slots, laid out by the library for the sizes of a call", a.slots.len()),
    }
}

/// Describes a program (archive or JSON) before compilation.
pub fn describe_program(src: &Source, l: &Lowered) -> String {
    let mut s = String::new();
    let p = &src.program;
    let _ = writeln!(
        s,
        "program: {} (torch {}, schema {}.{})",
        src.path.display(),
        p.torch_version,
        p.schema_version.major,
        p.schema_version.minor
    );
    let _ = writeln!(s, "inputs ({}):", l.inputs.len());
    for (i, inp) in l.inputs.iter().enumerate() {
        let _ = match inp {
            LoweredInput::Tensor { name, dtype, sizes, .. } => {
                writeln!(s, "  {i}: {name} {dtype}{}", shape(sizes, &l.symbols))
            }
            LoweredInput::Constant { name, value } => writeln!(s, "  {i}: {name} = {value:?} (specialised constant)"),
        };
    }
    let _ = writeln!(s, "outputs ({}):", l.outputs.len());
    for (i, (name, b)) in l.outputs.iter().enumerate() {
        let buf = &l.program.buffers[*b];
        let _ = writeln!(s, "  {i}: {name} {}{}", buf.dtype, shape(&buf.sizes, &l.symbols));
    }
    let buffers: Vec<&str> = l.buffers.iter().map(|b| b.fqn.as_str()).collect();
    let _ = writeln!(
        s,
        "buffers (mutable state): {}",
        if buffers.is_empty() { "none".to_string() } else { buffers.join(", ") }
    );
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &p.graph_module.graph.nodes {
        *ops.entry(&n.target).or_default() += 1;
    }
    let _ = writeln!(s, "ops used ({}):", ops.len());
    for (op, n) in ops {
        let _ = writeln!(s, "  {op} x{n}");
    }
    let total: usize = src.weights.values().chain(src.constants.values()).map(|t| t.data.len()).sum();
    let _ = writeln!(s, "weights: {} tensors, {total} bytes", src.weights.len() + src.constants.len());
    for (name, t) in src.weights.iter().chain(&src.constants) {
        let _ = writeln!(s, "  {name} {}{:?} {} bytes", t.dtype, t.sizes, t.data.len());
    }
    let _ = writeln!(s, "kernels after lowering: {}", l.program.kernels.len());
    s
}

/// `aotc inspect PATH`: a compiled library (ELF) or a program.
pub fn inspect(path: &Path, opts: &CompileOptions) -> Result<String> {
    let head = aotc_abi::file::read_regular(path).map_err(|source| crate::Error::Io { path: path.into(), source })?;
    if head.starts_with(b"\x7fELF") {
        let json = aotc_runtime::library_metadata(path)
            .map_err(|e| crate::Error::Format { path: path.into(), message: e.to_string() })?;
        let m: Manifest = serde_json::from_str(&json)
            .map_err(|e| crate::Error::Format { path: path.into(), message: format!("embedded manifest: {e}") })?;
        return Ok(describe_manifest(&m));
    }
    let (src, lowered) = crate::lower_file(path, opts)?;
    Ok(describe_program(&src, &lowered))
}
