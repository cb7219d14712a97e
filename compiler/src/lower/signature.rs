//! The graph's signature: its inputs (parameters, buffers, constants, user inputs) become
//! buffers and input slots, its outputs and mutations the buffers the caller sees. The
//! mutations are the ones the signature lists (Core ATen IR) and the graph inputs written in
//! place (the default IR, see functionalize.rs).

use super::tensor::{contiguous_strides, Repr, TensorValue};
use super::{LoweredBuffer, LoweredInput, Lowerer};
use crate::error::{Error, Result};
use crate::frontend::schema::{self, Argument, InputSpec, OutputSpec};
use crate::ir::{BufId, BufKind};
use aotc_abi::manifest::ConstValue;
use aotc_abi::sym::SymExpr;

impl<'s> Lowerer<'s> {
    pub(super) fn lower_inputs(
        &mut self,
        sig: &schema::GraphSignature,
    ) -> Result<(Vec<LoweredInput>, Vec<LoweredBuffer>)> {
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
                    inputs.push(self.lower_user_input(arg, inputs.len())?);
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
            Argument::Float(v) => ConstValue::Float(*v),
            Argument::Int(v) => ConstValue::Int(*v),
            Argument::Bool(v) => ConstValue::Bool(*v),
            Argument::String(s) => ConstValue::Str(s.clone()),
            Argument::None(_) => ConstValue::None,
            other => return Err(Error::Unsupported(format!("user input of kind {other:?}"))),
        };
        Ok(LoweredInput::Constant { name: "constant".into(), value })
    }

    /// Every graph output gets a buffer of its own (a copy when it is an input, a weight, a
    /// view or shared), so outputs never alias model memory the next call rewrites.
    #[allow(clippy::type_complexity)]
    pub(super) fn lower_outputs(
        &mut self,
        sig: &schema::GraphSignature,
        inputs: &[LoweredInput],
        buffers: &[LoweredBuffer],
    ) -> Result<(Vec<(String, BufId)>, Vec<(BufId, usize)>, Vec<(BufId, usize)>)> {
        let mut claimed: Vec<BufId> = vec![];
        let mut outputs = vec![];
        let mut buffer_mutations = vec![];
        let mut input_mutations = vec![];
        // (graph value, the buffer or user input it mutates, if any)
        enum Role<'a> {
            Output,
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
            let (name, role) = match spec {
                OutputSpec::UserOutput { arg } => match arg {
                    Argument::Tensor(t) => (t.name.clone(), Role::Output),
                    Argument::None(_) => continue,
                    other => return Err(Error::Unsupported(format!("a non-tensor user output ({other:?})"))),
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
                OutputSpec::LossOutput { arg } => (arg.name.clone(), Role::Output),
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
                Role::Output => outputs.push((name, buf)),
            }
        }
        Ok((outputs, buffer_mutations, input_mutations))
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
