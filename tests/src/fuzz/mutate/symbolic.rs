//! Program mutations on symbolic sizes: sympy expressions (deeply nested, malformed, huge,
//! unknown functions, new symbols, division by zero) and their range constraints.

use super::super::interesting;
use super::super::json::{all_pointers, object_at, pick_key, short, TENSOR_VALUES};
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::Mutator;
use serde_json::{json, Value};

pub const MUTATORS: &[(usize, Mutator)] = &[(5, symbolic_size), (3, expression_text), (4, range_constraint)];

fn symbol(name: &str) -> String {
    format!("Symbol('{name}', positive=True, integer=True)")
}

/// Symbols the program declares (range_constraints keys), or a made-up one.
fn symbols(program: &Value) -> Vec<String> {
    let declared: Vec<String> =
        program["range_constraints"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    if declared.is_empty() {
        vec!["s0".into()]
    } else {
        declared
    }
}

/// A hostile sympy srepr string and a short label for it (the string may be megabytes).
fn expression(rng: &mut Rng, symbols: &[String]) -> (String, String) {
    let s = symbol(rng.pick(symbols).as_str());
    match rng.below(9) {
        0 | 1 => {
            let depth = *rng.pick(&[2_000, 20_000, 100_000]);
            let text = format!("{}{s}{}", "Add(".repeat(depth), ", Integer(1))".repeat(depth));
            (text, format!("Add(Add(...)) nested {depth} deep"))
        }
        2 => {
            let depth = *rng.pick(&[20_000, 100_000]);
            (format!("{}{s}{}", "(".repeat(depth), ")".repeat(depth)), format!("{depth} nested parentheses"))
        }
        3 => {
            const GARBAGE: &[&str] = &[
                "",
                "Symbol(",
                "Add(Integer(1)",
                "Mul(,)",
                "Symbol('s0')) trailing",
                "Integer(99999999999999999999999999)",
                "Integer(-)",
                "Symbol(''s0'', positive=True)",
                "\u{0}",
                "Add()",
                "Mul(Integer(2))",
                "s0 + 1",
            ];
            let text = rng.pick(GARBAGE).to_string();
            (text.clone(), format!("{text:?}"))
        }
        4 => {
            let big = *rng.pick(&[1i64 << 62, i64::MAX, i64::MIN, -5, 0]);
            let text = if rng.chance(1, 2) { format!("Integer({big})") } else { format!("Mul(Integer({big}), {s})") };
            (text.clone(), text)
        }
        5 => {
            let f = *rng.pick(&["Foo", "Piecewise", "sqrt", "Pow", "TruncToInt", "Abs"]);
            (format!("{f}({s}, Integer(2))"), format!("unknown or unusual function {f}"))
        }
        6 => {
            const UNDECLARED: &[&str] = &["s999", "s77_undeclared", "", "x y"];
            let name = *rng.pick(UNDECLARED);
            let text = symbol(name);
            (text.clone(), format!("undeclared symbol {text}"))
        }
        7 => {
            let f = *rng.pick(&["FloorDiv", "Mod", "CeilToInt", "CleanDiv"]);
            let text = format!("{f}({s}, Integer(0))");
            (text.clone(), text)
        }
        _ => {
            let text = format!("Add({s}, Integer({}))", rng.pick(&[-1000i64, -1, i64::MAX, i64::MIN]));
            (text.clone(), text)
        }
    }
}

fn as_expr(text: String, rng: &mut Rng) -> Value {
    json!({"as_expr": {"expr_str": text, "hint": {"as_int": interesting::int(rng, Some(8))}}})
}

/// A recorded size or stride becomes a hostile symbolic expression.
fn symbolic_size(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let symbols = symbols(&m.program);
    let values = object_at(&mut m.program, TENSOR_VALUES)?;
    let name = pick_key(rng, values)?;
    let field = *rng.pick(&["sizes", "sizes", "sizes", "strides"]);
    let list = values.get_mut(&name)?.get_mut(field)?.as_array_mut()?;
    if list.is_empty() {
        return None;
    }
    let i = rng.below(list.len());
    let (text, label) = expression(rng, &symbols);
    list[i] = as_expr(text, rng);
    Some(format!("tensor_values[{name}].{field}[{i}] = {label}"))
}

/// An existing expression anywhere in the program (sizes, sym_int_values...) is replaced.
fn expression_text(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let mut pointers = Vec::new();
    all_pointers(&m.program, "", &mut pointers);
    pointers.retain(|p| p.ends_with("/expr_str"));
    if pointers.is_empty() {
        return None;
    }
    let pointer = rng.pick(&pointers).clone();
    let symbols = symbols(&m.program);
    let (text, label) = expression(rng, &symbols);
    let slot = m.program.pointer_mut(&pointer)?;
    let old = std::mem::replace(slot, json!(text));
    Some(format!("{pointer}: {} -> {label}", short(&old)))
}

/// A symbol's range becomes empty, negative, huge, unbounded or absent, or a new one appears.
fn range_constraint(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let ranges = m.program.as_object_mut()?.entry("range_constraints").or_insert_with(|| json!({}));
    let ranges = ranges.as_object_mut()?;
    let name = match pick_key(rng, ranges) {
        Some(name) if rng.chance(4, 5) => name,
        _ => "s0".to_string(),
    };
    let new = match rng.below(7) {
        0 => json!({"min_val": 10, "max_val": 2}),
        1 => json!({"min_val": -5, "max_val": 8}),
        2 => json!({"min_val": 0, "max_val": 0}),
        3 => json!({"min_val": 1, "max_val": interesting::int_json(rng, Some(1024))}),
        4 => json!({"min_val": null, "max_val": null}),
        5 => json!({"min_val": i64::MIN, "max_val": i64::MAX}),
        _ => {
            ranges.remove(&name);
            return Some(format!("range_constraints[{name}] removed"));
        }
    };
    let description = format!("range_constraints[{name}] = {new}");
    ranges.insert(name, new);
    Some(description)
}
