//! The inputs of a call: each descriptor checked against the manifest, and the symbols of
//! dynamic dimensions bound from their shapes (consistently, and within their ranges).
//! A python int export kept dynamic (a SymInt input) binds its symbol from its value; a
//! specialised python scalar must hold the exported value.

use crate::descriptor::{check_view, dtype_of, Place, View};
use crate::error::{err, Error, Result};
use aotc_abi::manifest::{ConstValue, DataSymbol, InputSpec, Manifest, TensorSpec};
use aotc_abi::sym::SymExpr;
use aotc_abi::{status, AotcTensor, DType};
use std::fmt::Display;

/// "input 3 ('x')", formatted only when a message needs it.
struct InputName<'a>(usize, &'a str);

impl Display for InputName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "input {} ('{}')", self.0, self.1)
    }
}

/// The checked inputs of a call. Kept by an instance from call to call, so that binding
/// the inputs of a steady call allocates nothing.
#[derive(Default)]
pub struct Bound {
    /// The value of every symbol, by `SymId`.
    pub syms: Vec<Option<i64>>,
    /// One checked view per input, constants included.
    pub views: Vec<View>,
    /// Which (input, dimension) bound each symbol, for messages about sizes that disagree.
    bound_by: Vec<(usize, usize)>,
}

/// Checks the inputs and binds every symbol from their shapes.
pub fn bind_inputs(m: &Manifest, inputs: &[AotcTensor], place: Place) -> Result<Bound> {
    let mut bound = Bound::default();
    bind_inputs_into(m, inputs, place, &mut bound)?;
    Ok(bound)
}

/// [`bind_inputs`] into `bound`, reusing its memory.
pub fn bind_inputs_into(m: &Manifest, inputs: &[AotcTensor], place: Place, bound: &mut Bound) -> Result<()> {
    if inputs.len() != m.inputs.len() {
        let names: Vec<&str> = m.inputs.iter().map(|i| i.name()).collect();
        return err(
            status::INPUT_COUNT,
            format!("expected {} inputs ({}), got {}", m.inputs.len(), names.join(", "), inputs.len()),
        );
    }
    let Bound { syms, views, bound_by } = bound;
    syms.clear();
    syms.resize(m.symbols.len(), None);
    bound_by.clear();
    bound_by.resize(m.symbols.len(), (0, 0));
    views.clear();
    for (i, (spec, t)) in m.inputs.iter().zip(inputs).enumerate() {
        let what = InputName(i, spec.name());
        views.push(match spec {
            InputSpec::Constant { value, .. } => check_constant(&what, value, t)?,
            InputSpec::Tensor(_) if m.input_symbol(i).is_some() => {
                let d = m.input_symbol(i).expect("checked");
                bind_int_input(m, &what, d, t, syms)?
            }
            InputSpec::Tensor(ts) => {
                if DType::from_dlpack(t.dtype) != Some(ts.dtype) {
                    return err(status::DTYPE, format!("{what}: expected dtype {}, got {}", ts.dtype, dtype_of(t)));
                }
                let view = check_view(t, &what, place, ts.sizes.len(), ts.dtype.size(), || join(&ts.sizes, m))?;
                bind_symbols(m, i, ts, &view.shape, syms, bound_by)?;
                view
            }
        });
    }
    // Static and derived dimensions, once every symbol is bound.
    for (i, (spec, view)) in m.inputs.iter().zip(views.iter()).enumerate() {
        if let InputSpec::Tensor(ts) = spec {
            for (d, (e, &n)) in ts.sizes.iter().zip(&view.shape).enumerate() {
                let want = e.eval(syms).map_err(|x| Error {
                    code: status::SHAPE,
                    message: format!("input {i} ('{}') dimension {d}: {x}", ts.name),
                })?;
                if want != n {
                    return err(
                        status::SHAPE,
                        format!(
                            "input {i} ('{}'): dimension {d} is {n}, expected {want} (shape [{}])",
                            ts.name,
                            join(&ts.sizes, m)
                        ),
                    );
                }
            }
        }
    }
    Ok(())
}

/// `e` as `a * s + b` with `a > 0`: a dimension from which symbol `s` can be solved.
fn linear_in_one_symbol(e: &SymExpr) -> Option<(usize, i64, i64)> {
    match e {
        SymExpr::Sym(s) => Some((*s as usize, 1, 0)),
        SymExpr::Mul(xs) => match xs.as_slice() {
            [SymExpr::Int(a), SymExpr::Sym(s)] | [SymExpr::Sym(s), SymExpr::Int(a)] if *a > 0 => {
                Some((*s as usize, *a, 0))
            }
            _ => None,
        },
        SymExpr::Add(xs) => match xs.as_slice() {
            [x, SymExpr::Int(b)] | [SymExpr::Int(b), x] => {
                linear_in_one_symbol(x).filter(|&(_, _, b0)| b0 == 0).map(|(s, a, _)| (s, a, *b))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Binds the symbols that input `i`'s dimensions determine (a dimension `s`, or `a*s + b`
/// as export records for strided layers), checking their ranges and that inputs sharing
/// a symbol agree.
fn bind_symbols(
    m: &Manifest,
    i: usize,
    ts: &TensorSpec,
    shape: &[i64],
    syms: &mut [Option<i64>],
    bound_by: &mut [(usize, usize)],
) -> Result<()> {
    let what = InputName(i, &ts.name);
    for (d, (e, &size)) in ts.sizes.iter().zip(shape).enumerate() {
        let Some((s, a, b)) = linear_in_one_symbol(e) else { continue };
        let Some(n) = size.checked_sub(b).filter(|v| v % a == 0).map(|v| v / a) else {
            return err(
                status::SHAPE,
                format!(
                    "{what}: dimension {d} is {size}, which is not of the form {e} (shape [{}])",
                    join(&ts.sizes, m)
                ),
            );
        };
        let r = &m.symbols[s];
        // "dimension 2 is 48" or, when solved from `8*s0`, "dimension 2 is 48 (s0 = 6)".
        let dim = || {
            if (a, b) == (1, 0) {
                format!("dimension {d} is {size}")
            } else {
                format!("dimension {d} is {size} ({} = {n})", r.name)
            }
        };
        match syms[s] {
            None => {
                if !r.contains(n) {
                    return err(
                        status::RANGE,
                        format!("{what}: {}, outside the range {r} of dynamic dimension {}", dim(), r.name),
                    );
                }
                syms[s] = Some(n);
                bound_by[s] = (i, d);
            }
            Some(v) if v != n => {
                let (bi, bd) = bound_by[s];
                return err(
                    status::SHAPE,
                    format!(
                        "{what}: {}, but {} dimension {bd} set the shared dynamic dimension {} to {v}",
                        dim(),
                        InputName(bi, m.inputs[bi].name()),
                        r.name
                    ),
                );
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// "s77, 8": a symbolic shape as the user knows it (export's symbol names).
fn join(sizes: &[SymExpr], m: &Manifest) -> String {
    sizes
        .iter()
        .map(|e| match e {
            SymExpr::Sym(s) => m.symbols[*s as usize].name.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A SymInt input: a 0-dim int64 on the CPU (a python int, as every python scalar), whose
/// value is symbol `d.sym`, within the range export recorded for it.
fn bind_int_input(
    m: &Manifest,
    what: &dyn Display,
    d: &DataSymbol,
    t: &AotcTensor,
    syms: &mut [Option<i64>],
) -> Result<View> {
    if DType::from_dlpack(t.dtype) != Some(DType::I64) {
        return err(
            status::DTYPE,
            format!("{what}: a python int input is a 0-dim int64 tensor, got dtype {}", dtype_of(t)),
        );
    }
    let view = check_view(t, what, Place::Cpu, 0, DType::I64.size(), String::new)?;
    // SAFETY: check_view found a 0-dim int64 tensor with non-null data: one element.
    let v = unsafe { (view.data as *const i64).read_unaligned() };
    let r = m.symbols.get(d.sym as usize).ok_or_else(|| Error {
        code: status::INTERNAL,
        message: format!("{what}: the manifest names no symbol s{}", d.sym),
    })?;
    if !r.contains(v) {
        return err(
            status::RANGE,
            format!("{what}: the python int {v} is outside the range {r} export recorded for it ({})", r.name),
        );
    }
    syms[d.sym as usize] = Some(v);
    Ok(view)
}

/// A python scalar export specialised: a 0-dim tensor that must hold the exported value,
/// and be of its kind (torch refuses a value of another type: an int for a float, a bool
/// for an int); a str's UTF-8 bytes as a 1-D uint8 tensor; for None any 0-dim tensor.
fn check_constant(what: &dyn Display, value: &ConstValue, t: &AotcTensor) -> Result<View> {
    if let ConstValue::Str(s) = value {
        return check_string(what, s, t);
    }
    let dtype = DType::from_dlpack(t.dtype);
    let (kind, fits) = match value {
        ConstValue::Float(_) => ("float (a float64 0-dim tensor)", matches!(dtype, Some(DType::F64 | DType::F32))),
        ConstValue::Int(_) => ("int (an int64 0-dim tensor)", matches!(dtype, Some(DType::I64 | DType::I32))),
        ConstValue::Bool(_) => ("bool (a bool 0-dim tensor)", dtype == Some(DType::Bool)),
        ConstValue::None | ConstValue::Str(_) => ("0-dim tensor of a dtype aotc knows", dtype.is_some()),
    };
    let Some(dtype) = dtype.filter(|_| fits) else {
        return err(
            status::DTYPE,
            format!("{what}: export specialised this python scalar to {value}: expected a {kind}, got {}", dtype_of(t)),
        );
    };
    // A python scalar is a value of the call, never device memory.
    let view = check_view(t, what, Place::Cpu, 0, dtype.size(), String::new)?;
    let data = view.data;
    // SAFETY: check_view found a 0-dim tensor with non-null data: one element of dtype
    // (read only for the dtypes matched above).
    let got = unsafe {
        match dtype {
            DType::F64 => ConstValue::Float((data as *const f64).read_unaligned()),
            DType::F32 => ConstValue::Float((data as *const f32).read_unaligned() as f64),
            DType::I64 => ConstValue::Int((data as *const i64).read_unaligned()),
            DType::I32 => ConstValue::Int((data as *const i32).read_unaligned() as i64),
            DType::Bool => ConstValue::Bool(data.read() != 0),
            _ => return Ok(view),
        }
    };
    if *value != ConstValue::None && got != *value {
        return err(
            status::CONSTANT,
            format!("{what}: export specialised this input to {value}; got {got} (compile the program again to use another value)"),
        );
    }
    Ok(view)
}

/// A str export specialised: its UTF-8 bytes, a contiguous 1-D uint8 CPU tensor.
fn check_string(what: &dyn Display, s: &str, t: &AotcTensor) -> Result<View> {
    if DType::from_dlpack(t.dtype) != Some(DType::U8) {
        return err(
            status::DTYPE,
            format!("{what}: export specialised this input to the str {s:?}: expected its UTF-8 bytes as a 1-D uint8 tensor, got {}", dtype_of(t)),
        );
    }
    let view = check_view(t, what, Place::Cpu, 1, 1, || s.len().to_string())?;
    let got = match (&view.strides, view.bytes) {
        (Some(_), _) => None,
        (None, 0) => Some(&[][..]),
        // SAFETY: check_view found a contiguous tensor of `view.bytes` bytes at non-null
        // `view.data`, which the caller keeps alive and unchanged through the call.
        (None, n) => Some(unsafe { std::slice::from_raw_parts(view.data.cast_const(), n) }),
    };
    if got != Some(s.as_bytes()) {
        let shown = got.map_or_else(|| "a strided tensor".to_string(), |b| format!("{:?}", String::from_utf8_lossy(b)));
        return err(
            status::CONSTANT,
            format!("{what}: export specialised this input to the str {s:?}; got {shown} (compile the program again to use another value)"),
        );
    }
    Ok(view)
}
