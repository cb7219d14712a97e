//! Typed access to a node's named arguments, with the error naming the argument.

use super::tensor::TensorValue;
use super::Lowerer;
use crate::frontend::schema::{Argument, Node, OptionalTensorArgument, SymIntArgument};
use crate::ir::Scalar;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

pub struct Args<'n> {
    pub node: &'n Node,
}

type R<T> = Result<T, String>;

impl<'n> Args<'n> {
    /// The node's name, for the buffers its lowering creates.
    pub fn node_name(&self) -> String {
        self.node.name.clone().unwrap_or_else(|| "node".into())
    }

    pub fn get(&self, name: &str) -> Option<&'n Argument> {
        self.node.inputs.iter().find(|a| a.name == name).map(|a| &a.arg)
    }

    fn need(&self, name: &str) -> R<&'n Argument> {
        self.get(name).ok_or_else(|| format!("missing argument '{name}'"))
    }

    fn bad<T>(&self, name: &str, want: &str) -> R<T> {
        Err(format!("argument '{name}' should be {want}, got {:?}", self.get(name)))
    }

    pub fn tensor(&self, lw: &Lowerer, name: &str) -> R<TensorValue> {
        match self.need(name)? {
            Argument::Tensor(t) => lw.value(&t.name),
            _ => self.bad(name, "a tensor"),
        }
    }

    pub fn opt_tensor(&self, lw: &Lowerer, name: &str) -> R<Option<TensorValue>> {
        match self.get(name) {
            None | Some(Argument::None(_)) | Some(Argument::OptionalTensor(OptionalTensorArgument::None(_))) => {
                Ok(None)
            }
            Some(Argument::Tensor(t)) | Some(Argument::OptionalTensor(OptionalTensorArgument::Tensor(t))) => {
                lw.value(&t.name).map(Some)
            }
            _ => self.bad(name, "an optional tensor"),
        }
    }

    pub fn tensors(&self, lw: &Lowerer, name: &str) -> R<Vec<TensorValue>> {
        match self.need(name)? {
            Argument::Tensors(ts) => ts.iter().map(|t| lw.value(&t.name)).collect(),
            _ => self.bad(name, "a list of tensors"),
        }
    }

    pub fn int(&self, name: &str) -> R<i64> {
        match self.need(name)? {
            Argument::Int(v) => Ok(*v),
            Argument::SymInt(SymIntArgument::Int(v)) => Ok(*v),
            _ => self.bad(name, "an int"),
        }
    }

    pub fn int_or(&self, name: &str, default: i64) -> R<i64> {
        match self.get(name) {
            None | Some(Argument::None(_)) => Ok(default),
            Some(_) => self.int(name),
        }
    }

    pub fn opt_int(&self, name: &str) -> R<Option<i64>> {
        match self.get(name) {
            None | Some(Argument::None(_)) => Ok(None),
            Some(_) => self.int(name).map(Some),
        }
    }

    pub fn ints(&self, name: &str) -> R<Vec<i64>> {
        match self.need(name)? {
            Argument::Ints(v) => Ok(v.clone()),
            Argument::Int(v) => Ok(vec![*v]),
            _ => self.bad(name, "a list of ints"),
        }
    }

    pub fn opt_ints(&self, name: &str) -> R<Option<Vec<i64>>> {
        match self.get(name) {
            None | Some(Argument::None(_)) => Ok(None),
            Some(_) => self.ints(name).map(Some),
        }
    }

    pub fn sym_int(&self, lw: &Lowerer, name: &str) -> R<SymExpr> {
        match self.need(name)? {
            Argument::Int(v) => Ok(SymExpr::Int(*v)),
            Argument::SymInt(s) => lw.sym_arg(s),
            _ => self.bad(name, "a SymInt"),
        }
    }

    pub fn sym_ints(&self, lw: &Lowerer, name: &str) -> R<Vec<SymExpr>> {
        match self.need(name)? {
            Argument::Ints(v) => Ok(v.iter().map(|&x| SymExpr::Int(x)).collect()),
            Argument::SymInts(v) => v.iter().map(|s| lw.sym_arg(s)).collect(),
            _ => self.bad(name, "a list of SymInts"),
        }
    }

    pub fn bool_or(&self, name: &str, default: bool) -> R<bool> {
        match self.get(name) {
            None | Some(Argument::None(_)) => Ok(default),
            Some(Argument::Bool(b)) => Ok(*b),
            _ => self.bad(name, "a bool"),
        }
    }

    /// A python number argument (`Scalar` in ATen schemas).
    pub fn scalar(&self, name: &str) -> R<Scalar> {
        self.opt_scalar(name)?.ok_or_else(|| format!("missing argument '{name}'"))
    }

    pub fn opt_scalar(&self, name: &str) -> R<Option<Scalar>> {
        match self.get(name) {
            None | Some(Argument::None(_)) => Ok(None),
            Some(Argument::Int(v)) => Ok(Some(Scalar::I(*v))),
            Some(Argument::Float(v)) => Ok(Some(Scalar::F(*v))),
            Some(Argument::Bool(v)) => Ok(Some(Scalar::B(*v))),
            _ => self.bad(name, "a number"),
        }
    }

    pub fn string_or(&self, name: &str, default: &str) -> R<String> {
        match self.get(name) {
            None | Some(Argument::None(_)) => Ok(default.into()),
            Some(Argument::String(s)) => Ok(s.clone()),
            _ => self.bad(name, "a string"),
        }
    }

    pub fn opt_dtype(&self, name: &str) -> R<Option<DType>> {
        match self.get(name) {
            None | Some(Argument::None(_)) => Ok(None),
            Some(Argument::ScalarType(code)) => {
                DType::from_torch_code(*code).map(Some).ok_or_else(|| format!("unsupported dtype code {code}"))
            }
            _ => self.bad(name, "a dtype"),
        }
    }
}
