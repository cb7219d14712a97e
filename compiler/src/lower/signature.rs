//! The graph's signature: its inputs (parameters, buffers, constants, user inputs) become
//! buffers and input slots, its outputs and mutations the buffers the caller sees. The
//! mutations are the ones the signature lists (Core ATen IR) and the graph inputs written in
//! place (the default IR, see functionalize.rs).
//!
//! Python scalars: a specialised one (`ConstantInput`, or a SymInt export recorded as a
//! number) is a constant the library checks; a dynamic int (a SymInt user input, `n` with
//! `Dim.DYNAMIC`) is a 0-dim int64 input whose value binds its symbol before the first
//! kernel (a data symbol read from the input's slot: the library binds it with the inputs,
//! checked against the symbol's range). A scalar user output (SymInt, SymFloat, SymBool,
//! or a number) is a 0-dim int64 / float64 / bool output computed by a kernel from the
//! symbols or values it is made of.

use super::tensor::{contiguous_strides, Repr, TensorValue};
use super::{LoweredBuffer, LoweredInput, Lowerer};
use crate::error::{Error, Result};
use crate::frontend::schema::{self, Argument, InputSpec, OutputSpec, SymIntArgument};
use crate::ir::expr::{self, Scalar};
use crate::ir::prims::Prim;
use crate::ir::{BufId, BufKind};
use aotc_abi::manifest::{ConstValue, GuardOp};
use aotc_abi::sym::SymExpr;
use aotc_abi::{value_kind, DType};

impl<'s> Lowerer<'s> {
    pub(super) fn lower_inputs(
        &mut self,
        sig: &schema::GraphSignature,
    ) -> Result<(Vec<LoweredInput>, Vec<LoweredBuffer>)> {
        check_distinct_inputs(&self.src.path, sig)?;
        let mutated: Vec<&str> = sig
            .output_specs
            .iter()
            .filter_map(|o| match o {
                OutputSpec::BufferMutation { buffer_name, .. } => Some(buffer_name.as_str()),
                _ => None,
            })
            .collect();
        let mut inputs = vec![];
        let mut buffers = vec![];
        for spec in &sig.input_specs {
            let (graph_name, fqn, payloads, what) = match spec {
                InputSpec::Parameter { arg, parameter_name } => {
                    (&arg.name, parameter_name, &self.src.weights, "parameter")
                }
                InputSpec::Buffer { arg, buffer_name, persistent } => (
                    &arg.name,
                    buffer_name,
                    if *persistent { &self.src.weights } else { &self.src.constants },
                    "buffer",
                ),
                InputSpec::TensorConstant { arg, tensor_constant_name } => {
                    (&arg.name, tensor_constant_name, &self.src.constants, "constant")
                }
                InputSpec::UserInput { arg } => {
                    let input = self.lower_user_input(arg, inputs.len())?;
                    inputs.push(input);
                    continue;
                }
                InputSpec::ConstantInput { name, value } => {
                    inputs.push(LoweredInput::Constant { name: name.clone(), value: const_value(value) });
                    continue;
                }
                InputSpec::CustomObj(_) => {
                    return Err(Error::Unsupported(
                        "the program takes a custom object (torchbind); aotc cannot compile custom objects".into(),
                    ))
                }
                InputSpec::Token(_) => {
                    return Err(Error::Unsupported("the program uses effect tokens (side-effecting ops)".into()))
                }
            };
            let written = self.aliases.is_written(graph_name);
            if written && what != "buffer" {
                return Err(Error::Unsupported(format!(
                    "the program writes into {what} '{fqn}' in place; aotc compiles mutation of buffers and user inputs only"
                )));
            }
            let (dtype, sizes) =
                self.meta_sizes(graph_name).map_err(|m| Error::Weight { name: fqn.clone(), message: m })?;
            let t = payloads.get(fqn).ok_or_else(|| Error::Weight {
                name: fqn.clone(),
                message: format!("{what} is missing from the weights (graph input '{graph_name}')"),
            })?;
            let want: Vec<i64> = sizes.iter().map(|s| s.as_int().unwrap_or(-1)).collect();
            if t.dtype != dtype || t.sizes != want {
                return Err(Error::Weight {
                    name: fqn.clone(),
                    message: format!("the graph expects {dtype}{want:?}, the payload is {}{:?}", t.dtype, t.sizes),
                });
            }
            let state = (what == "buffer" && (written || mutated.contains(&fqn.as_str()))).then_some(buffers.len());
            let buf = self.add_weight(fqn, state, dtype, sizes.clone(), t.data.clone());
            if state.is_some() {
                buffers.push(LoweredBuffer { fqn: fqn.clone(), buf });
            }
            self.env.insert(graph_name.clone(), TensorValue::view_of(buf, dtype, sizes));
        }
        self.check_scalar_input_symbols(&inputs)?;
        Ok((inputs, buffers))
    }

    fn lower_user_input(&mut self, arg: &Argument, index: usize) -> Result<LoweredInput> {
        let value = match arg {
            Argument::Tensor(t) => {
                let (dtype, sizes) = self.meta_sizes(&t.name).map_err(Error::Unsupported)?;
                self.check_input_symbols(&sizes)?;
                self.node_desc = format!("user input '{}'", t.name);
                let buf = self.prog.add_buffer(&t.name, dtype, sizes.clone(), BufKind::Input(index));
                let value = TensorValue::view_of(buf, dtype, sizes.clone());
                self.check_sizes(&value).map_err(|m| Error::Unsupported(format!("user input '{}': {m}", t.name)))?;
                self.env.insert(t.name.clone(), value);
                return Ok(LoweredInput::Tensor { name: t.name.clone(), dtype, sizes, buf });
            }
            Argument::SymInt(SymIntArgument::Name(name)) => return self.lower_symint_input(name, index),
            Argument::SymInt(SymIntArgument::Int(v)) => ConstValue::Int(*v),
            Argument::Float(v) => ConstValue::Float(*v),
            Argument::Int(v) => ConstValue::Int(*v),
            Argument::Bool(v) => ConstValue::Bool(*v),
            Argument::String(s) => ConstValue::Str(s.clone()),
            Argument::None(_) => ConstValue::None,
            Argument::SymFloat(v) | Argument::SymBool(v) => {
                let kind = if matches!(arg, Argument::SymFloat(_)) { "float" } else { "bool" };
                let name = v.get("as_name").and_then(|n| n.as_str()).unwrap_or("?");
                return Err(Error::Unsupported(format!(
                    "user input {index} ('{name}') is a dynamic python {kind} (Sym{}): aotc takes dynamic \
                     python ints (SymInt) and specialised python scalars; export this argument specialised \
                     (the default for floats and bools)",
                    if kind == "float" { "Float" } else { "Bool" }
                )));
            }
            other => return Err(Error::Unsupported(format!("user input {index} of kind {other:?}"))),
        };
        Ok(LoweredInput::Constant { name: "constant".into(), value })
    }

    /// A dynamic python int: a 0-dim int64 input whose value is its symbol, bound before
    /// the first kernel. The graph names the input by its SymInt (`n`), whose recorded
    /// value is the symbol (`s86`) the graph's sizes and scalar operands use.
    fn lower_symint_input(&mut self, name: &str, index: usize) -> Result<LoweredInput> {
        let recorded =
            self.src.program.graph_module.graph.sym_int_values.get(name).ok_or_else(|| {
                Error::Unsupported(format!("user input {index}: SymInt '{name}' has no recorded value"))
            })?;
        let value =
            self.parse_sym(&recorded.clone()).map_err(|m| Error::Unsupported(format!("user input '{name}': {m}")))?;
        let s = match value {
            // Export specialised it after all: a constant like any other python scalar.
            SymExpr::Int(v) => return Ok(LoweredInput::Constant { name: name.to_string(), value: ConstValue::Int(v) }),
            SymExpr::Sym(s) if self.is_free(s) => s,
            SymExpr::Sym(s) => {
                return Err(Error::Unsupported(format!(
                    "user input {index} ('{name}') is the SymInt {}, which is also a dimension of a tensor input: \
                     aotc binds a SymInt input that is a symbol of its own",
                    self.symbols[s as usize].name
                )))
            }
            other => {
                return Err(Error::Unsupported(format!(
                    "user input {index} ('{name}') is recorded as the expression {other}: aotc binds a SymInt \
                     input that is a symbol of its own"
                )))
            }
        };
        let buf = self.prog.add_buffer(name, DType::I64, vec![], BufKind::Input(index));
        self.node_desc = format!("user input {index} ('{name}')");
        self.bind_data_symbol(s, buf);
        Ok(LoweredInput::Tensor { name: name.to_string(), dtype: DType::I64, sizes: vec![], buf })
    }

    /// A SymInt input's symbol must not also be a dimension of a tensor input (bound from
    /// its shape), whichever input comes first.
    fn check_scalar_input_symbols(&self, inputs: &[LoweredInput]) -> Result<()> {
        for d in &self.prog.data_symbols {
            let BufKind::Input(i) = self.prog.buffers[d.buf].kind else { continue };
            if self.input_symbols.contains(&d.sym) {
                return Err(Error::Unsupported(format!(
                    "user input {i} ('{}') is the SymInt {}, which is also a dimension of a tensor input: aotc \
                     binds a SymInt input that is a symbol of its own",
                    inputs.get(i).map_or("?", input_name),
                    self.symbols[d.sym as usize].name
                )));
            }
        }
        Ok(())
    }

    /// A scalar user output as the 0-dim value the library returns (int64 for a SymInt or
    /// an int, float64 for a SymFloat or a float, bool for a SymBool or a bool), and the
    /// name it goes by. `None` for an argument that is no scalar.
    fn scalar_output(&mut self, arg: &Argument, k: usize) -> Result<Option<(String, TensorValue)>> {
        let unsupported = |m: String| Error::Unsupported(format!("user output {k}: {m}"));
        let constant = |v: Scalar, dtype: DType| TensorValue::lazy(dtype, vec![], expr::constant(v, dtype));
        let named = |v: &serde_json::Value| v.get("as_name").and_then(|n| n.as_str()).map(str::to_string);
        let out = match arg {
            Argument::SymInt(s) => {
                let e = self.sym_arg(s).map_err(unsupported)?;
                let name = match s {
                    SymIntArgument::Name(n) => n.clone(),
                    SymIntArgument::Int(v) => format!("{v}"),
                };
                (name, TensorValue::lazy(DType::I64, vec![], expr::size_value(&e)))
            }
            Argument::SymFloat(v) => match (named(v), v.get("as_float").and_then(|f| f.as_f64())) {
                (Some(n), _) => {
                    let value = self.value(&n).map_err(unsupported)?;
                    if value.rank() != 0 || !value.dtype.is_float() {
                        return Err(unsupported(format!("SymFloat '{n}' is not a float value")));
                    }
                    let body = expr::cast(value.load(&[]), DType::F64);
                    (n, TensorValue::lazy(DType::F64, vec![], body))
                }
                (None, Some(f)) => (format!("{f}"), constant(Scalar::F(f), DType::F64)),
                _ => return Err(unsupported(format!("unexpected SymFloat {v}"))),
            },
            Argument::SymBool(v) => {
                let name = named(v).unwrap_or_else(|| v.to_string());
                let requirements = self.sym_bool(v).map_err(unsupported)?;
                let holds = |(lhs, op, rhs): (SymExpr, GuardOp, SymExpr)| {
                    let prim = match op {
                        GuardOp::Eq => Prim::Eq,
                        GuardOp::Le => Prim::Le,
                    };
                    expr::binary(prim, expr::size_value(&lhs), expr::size_value(&rhs))
                };
                let body = requirements
                    .into_iter()
                    .map(holds)
                    .reduce(|a, b| expr::binary(Prim::And, a, b))
                    .unwrap_or_else(|| expr::constant(Scalar::B(true), DType::Bool));
                (name, TensorValue::lazy(DType::Bool, vec![], body))
            }
            Argument::Int(v) => (format!("{v}"), constant(Scalar::I(*v), DType::I64)),
            Argument::Float(v) => (format!("{v}"), constant(Scalar::F(*v), DType::F64)),
            Argument::Bool(v) => (format!("{v}"), constant(Scalar::B(*v), DType::Bool)),
            _ => return Ok(None),
        };
        Ok(Some(out))
    }

    /// Every graph output gets a buffer of its own (a copy when it is an input, a weight, a
    /// view or shared), so outputs never alias model memory the next call rewrites.
    #[allow(clippy::type_complexity)]
    pub(super) fn lower_outputs(
        &mut self,
        sig: &schema::GraphSignature,
        inputs: &[LoweredInput],
        buffers: &[LoweredBuffer],
    ) -> Result<(Vec<(String, BufId)>, Vec<i32>, Vec<(BufId, usize)>, Vec<(BufId, usize)>)> {
        let mut claimed: Vec<BufId> = vec![];
        let mut outputs = vec![];
        let mut kinds = vec![];
        let mut buffer_mutations = vec![];
        let mut input_mutations = vec![];
        // (graph value, the buffer or user input it mutates, if any)
        enum Role<'a> {
            /// A user output, of this `value_kind`.
            Output(i32),
            Buffer(&'a str),
            Input(&'a str),
        }
        // Graph inputs written in place (the default IR's mutations, which its signature
        // does not list): their final values.
        let listed = |name: &str| {
            sig.output_specs.iter().any(|o| match o {
                OutputSpec::BufferMutation { buffer_name, .. } => buffer_name == name,
                OutputSpec::UserInputMutation { user_input_name, .. } => user_input_name == name,
                _ => false,
            })
        };
        let mut roles = vec![];
        for spec in &sig.input_specs {
            match spec {
                InputSpec::Buffer { arg, buffer_name, .. }
                    if self.aliases.is_written(&arg.name) && !listed(buffer_name) =>
                {
                    roles.push((arg.name.clone(), Role::Buffer(buffer_name)))
                }
                InputSpec::UserInput { arg: Argument::Tensor(t) }
                    if self.aliases.is_written(&t.name) && !listed(&t.name) =>
                {
                    roles.push((t.name.clone(), Role::Input(&t.name)))
                }
                _ => {}
            }
        }
        for spec in &sig.output_specs {
            // The flat index of this output, if it is one.
            let flat = roles.iter().filter(|(_, r)| matches!(r, Role::Output(_))).count();
            let (name, role) = match spec {
                OutputSpec::UserOutput { arg } => match arg {
                    Argument::Tensor(t) => (t.name.clone(), Role::Output(value_kind::TENSOR)),
                    Argument::None(_) => continue,
                    other => match self.scalar_output(other, flat)? {
                        Some((name, value)) => {
                            // SymInts and numbers are no tensors of the graph: their names
                            // are free; a SymFloat's value becomes its float64 form.
                            let kind = match value.dtype {
                                DType::Bool => value_kind::BOOL,
                                DType::F64 => value_kind::FLOAT,
                                _ => value_kind::INT,
                            };
                            self.env.insert(name.clone(), value);
                            (name, Role::Output(kind))
                        }
                        None => return Err(Error::Unsupported(format!("a user output of kind {other:?}"))),
                    },
                },
                // A graph input the graph also writes in place: its final value.
                OutputSpec::BufferMutation { arg, buffer_name } => {
                    let placeholder = sig.input_specs.iter().find_map(|i| match i {
                        InputSpec::Buffer { arg, buffer_name: b, .. } if b == buffer_name => Some(&arg.name),
                        _ => None,
                    });
                    match placeholder.filter(|p| self.aliases.is_written(p)) {
                        Some(p) => (p.clone(), Role::Buffer(buffer_name)),
                        None => (arg.name.clone(), Role::Buffer(buffer_name)),
                    }
                }
                OutputSpec::UserInputMutation { arg, user_input_name } => {
                    match self.aliases.is_written(user_input_name) {
                        true => (user_input_name.clone(), Role::Input(user_input_name)),
                        false => (arg.name.clone(), Role::Input(user_input_name)),
                    }
                }
                OutputSpec::LossOutput { arg } => (arg.name.clone(), Role::Output(value_kind::TENSOR)),
                OutputSpec::ParameterMutation { parameter_name, .. } => {
                    return Err(Error::Unsupported(format!("the program mutates parameter '{parameter_name}'")))
                }
                OutputSpec::GradientToParameter(_) | OutputSpec::GradientToUserInput(_) => {
                    return Err(Error::Unsupported("training programs (gradient outputs) are not supported".into()))
                }
                OutputSpec::Token(_) => return Err(Error::Unsupported("the program uses effect tokens".into())),
            };
            roles.push((name, role));
        }
        for (name, role) in roles {
            let v = self.value(&name).map_err(Error::Unsupported)?;
            if v.complex {
                return Err(Error::Unsupported(format!(
                    "graph output '{name}' is complex64: complex tensors are supported only as intermediates"
                )));
            }
            let own = match &v.repr {
                Repr::View(r)
                    if self.prog.buffers[r.buf].kind == BufKind::Scratch
                        && !claimed.contains(&r.buf)
                        && r.offset == SymExpr::Int(0)
                        && r.strides == contiguous_strides(&v.sizes)
                        && self.prog.buffers[r.buf].sizes == v.sizes =>
                {
                    Some(r.buf)
                }
                _ => None,
            };
            let buf = own.unwrap_or_else(|| self.materialize(&v, &name));
            claimed.push(buf);
            match role {
                Role::Buffer(buffer_name) => {
                    let i = buffers
                        .iter()
                        .position(|b| b.fqn == buffer_name)
                        .ok_or_else(|| Error::Unsupported(format!("mutation of unknown buffer '{buffer_name}'")))?;
                    let target = &self.prog.buffers[buffers[i].buf];
                    let (dtype, sizes) = (target.dtype, target.sizes.clone());
                    self.check_layout(&v, dtype, &sizes, &format!("the new value '{name}' of buffer '{buffer_name}'"))
                        .map_err(Error::Unsupported)?;
                    buffer_mutations.push((buf, i));
                }
                Role::Input(user_input_name) => {
                    let i = inputs
                        .iter()
                        .position(|inp| matches!(inp, LoweredInput::Tensor { name, .. } if name == user_input_name))
                        .ok_or_else(|| {
                            Error::Unsupported(format!("mutation of unknown user input '{user_input_name}'"))
                        })?;
                    let LoweredInput::Tensor { dtype, sizes, .. } = &inputs[i] else {
                        unreachable!("matched a tensor input")
                    };
                    self.check_layout(
                        &v,
                        *dtype,
                        sizes,
                        &format!("the new value '{name}' of user input '{user_input_name}'"),
                    )
                    .map_err(Error::Unsupported)?;
                    input_mutations.push((buf, i));
                }
                Role::Output(kind) => {
                    outputs.push((name, buf));
                    kinds.push(kind);
                }
            }
        }
        Ok((outputs, kinds, buffer_mutations, input_mutations))
    }
}

/// Refuses a signature that lists one graph input twice: each entry becomes an input of
/// the library (or a weight), so the library would take more inputs than the program's
/// call takes.
fn check_distinct_inputs(path: &std::path::Path, sig: &schema::GraphSignature) -> Result<()> {
    let mut seen = std::collections::BTreeMap::new();
    for (i, spec) in sig.input_specs.iter().enumerate() {
        let name = match spec {
            InputSpec::Parameter { arg, .. }
            | InputSpec::Buffer { arg, .. }
            | InputSpec::TensorConstant { arg, .. } => &arg.name,
            InputSpec::UserInput { arg: Argument::Tensor(t) } => &t.name,
            InputSpec::UserInput { arg: Argument::SymInt(SymIntArgument::Name(name)) } => name,
            InputSpec::ConstantInput { name, .. } => name,
            _ => continue,
        };
        if let Some(first) = seen.insert(name.as_str(), i) {
            return Err(Error::Format {
                path: path.into(),
                message: format!(
                    "the graph signature lists graph input '{name}' twice (input_specs {first} and {i}); \
                     torch.export gives each input its own placeholder"
                ),
            });
        }
    }
    Ok(())
}

fn input_name(input: &LoweredInput) -> &str {
    match input {
        LoweredInput::Tensor { name, .. } | LoweredInput::Constant { name, .. } => name,
    }
}

fn const_value(v: &schema::ConstantValue) -> ConstValue {
    match v {
        schema::ConstantValue::None(_) => ConstValue::None,
        schema::ConstantValue::Int(i) => ConstValue::Int(*i),
        schema::ConstantValue::Float(f) => ConstValue::Float(*f),
        schema::ConstantValue::String(s) => ConstValue::Str(s.clone()),
        schema::ConstantValue::Bool(b) => ConstValue::Bool(*b),
    }
}
