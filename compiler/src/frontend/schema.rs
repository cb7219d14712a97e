//! serde types for torch.export's serialized program (`models/model.json`), schema 8.x.
//! Field names follow `../shared/reference/torch_export_schema.yaml`; fields aotc does not
//! use are left out (serde ignores them).

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::collections::BTreeMap;

pub const SCHEMA_MAJOR: i64 = 8;

/// torch.export writes non-finite floats as the strings "Infinity", "-Infinity", "NaN".
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonFloat {
    Number(f64),
    Text(String),
}

impl JsonFloat {
    fn value<E: serde::de::Error>(self) -> Result<f64, E> {
        match self {
            JsonFloat::Number(v) => Ok(v),
            JsonFloat::Text(s) => match s.as_str() {
                "Infinity" | "inf" => Ok(f64::INFINITY),
                "-Infinity" | "-inf" => Ok(f64::NEG_INFINITY),
                "NaN" | "nan" => Ok(f64::NAN),
                other => Err(E::custom(format!("expected a float, got \"{other}\""))),
            },
        }
    }
}

fn float<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    JsonFloat::deserialize(d)?.value()
}

fn floats<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Vec::<JsonFloat>::deserialize(d)?.into_iter().map(JsonFloat::value).collect()
}

#[derive(Debug, Deserialize)]
pub struct ExportedProgram {
    pub graph_module: GraphModule,
    #[serde(default)]
    pub range_constraints: BTreeMap<String, RangeConstraint>,
    pub schema_version: SchemaVersion,
    #[serde(default)]
    pub torch_version: String,
}

#[derive(Debug, Deserialize)]
pub struct SchemaVersion {
    pub major: i64,
    pub minor: i64,
}

#[derive(Debug, Deserialize, Clone, Copy)]
pub struct RangeConstraint {
    pub min_val: Option<i64>,
    pub max_val: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct GraphModule {
    pub graph: Graph,
    pub signature: GraphSignature,
    #[serde(default)]
    pub module_call_graph: Vec<ModuleCallEntry>,
    /// The field names of each namedtuple type the call spec names (by its serialized
    /// type name, the node's context).
    #[serde(default)]
    pub treespec_namedtuple_fields: BTreeMap<String, NamedTupleDef>,
}

#[derive(Debug, Deserialize)]
pub struct NamedTupleDef {
    pub field_names: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Graph {
    pub inputs: Vec<Argument>,
    pub outputs: Vec<Argument>,
    pub nodes: Vec<Node>,
    pub tensor_values: BTreeMap<String, TensorMeta>,
    #[serde(default)]
    pub sym_int_values: BTreeMap<String, SymInt>,
    /// The conditions (`{"as_expr": {"expr_str": "StrictLessThan(...)"}}` or `{"as_bool": b}`)
    /// that named SymBools hold: what `_assert_scalar` and `cond` test.
    #[serde(default)]
    pub sym_bool_values: BTreeMap<String, Value>,
    #[serde(default)]
    pub custom_obj_values: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize, Clone)]
pub struct Node {
    pub target: String,
    pub inputs: Vec<NamedArgument>,
    pub outputs: Vec<Argument>,
    #[serde(default)]
    pub name: Option<String>,
    /// `nn_module_stack`, `stack_trace`...: strings, advisory (see `lower::origin`).
    #[serde(default)]
    pub metadata: Value,
}

#[derive(Debug, Deserialize, Clone)]
pub struct NamedArgument {
    pub name: String,
    pub arg: Argument,
    #[serde(default)]
    pub kind: Option<i64>,
}

#[derive(Debug, Deserialize, Clone)]
pub struct TensorArgument {
    pub name: String,
}

#[derive(Debug, Deserialize, Clone)]
pub enum SymIntArgument {
    #[serde(rename = "as_name")]
    Name(String),
    #[serde(rename = "as_int")]
    Int(i64),
}

#[derive(Debug, Deserialize, Clone)]
pub enum OptionalTensorArgument {
    #[serde(rename = "as_tensor")]
    Tensor(TensorArgument),
    #[serde(rename = "as_none")]
    None(Value),
}

#[derive(Debug, Deserialize, Clone)]
pub struct Device {
    #[serde(rename = "type")]
    pub kind: String,
    pub index: Option<i64>,
}

/// Every Argument kind of the schema; the ones no Core ATen op of interest takes keep their
/// raw JSON.
#[derive(Debug, Deserialize, Clone)]
pub enum Argument {
    #[serde(rename = "as_none")]
    None(Value),
    #[serde(rename = "as_tensor")]
    Tensor(TensorArgument),
    #[serde(rename = "as_tensors")]
    Tensors(Vec<TensorArgument>),
    #[serde(rename = "as_int")]
    Int(i64),
    #[serde(rename = "as_ints")]
    Ints(Vec<i64>),
    #[serde(rename = "as_float")]
    Float(#[serde(deserialize_with = "float")] f64),
    #[serde(rename = "as_floats")]
    Floats(#[serde(deserialize_with = "floats")] Vec<f64>),
    #[serde(rename = "as_string")]
    String(String),
    #[serde(rename = "as_strings")]
    Strings(Vec<String>),
    #[serde(rename = "as_sym_int")]
    SymInt(SymIntArgument),
    #[serde(rename = "as_sym_ints")]
    SymInts(Vec<SymIntArgument>),
    #[serde(rename = "as_scalar_type")]
    ScalarType(i64),
    #[serde(rename = "as_memory_format")]
    MemoryFormat(i64),
    #[serde(rename = "as_layout")]
    Layout(i64),
    #[serde(rename = "as_device")]
    Device(Device),
    #[serde(rename = "as_bool")]
    Bool(bool),
    #[serde(rename = "as_bools")]
    Bools(Vec<bool>),
    #[serde(rename = "as_sym_bool")]
    SymBool(Value),
    #[serde(rename = "as_sym_bools")]
    SymBools(Value),
    #[serde(rename = "as_graph")]
    Graph(Value),
    #[serde(rename = "as_optional_tensors")]
    OptionalTensors(Vec<OptionalTensorArgument>),
    #[serde(rename = "as_custom_obj")]
    CustomObj(Value),
    #[serde(rename = "as_operator")]
    Operator(String),
    #[serde(rename = "as_sym_float")]
    SymFloat(Value),
    #[serde(rename = "as_sym_floats")]
    SymFloats(Value),
    #[serde(rename = "as_optional_tensor")]
    OptionalTensor(OptionalTensorArgument),
    #[serde(rename = "as_complex")]
    Complex(Value),
    #[serde(rename = "as_nested_tensors")]
    NestedTensors(Vec<Vec<TensorArgument>>),
    #[serde(rename = "as_int_lists")]
    IntLists(Vec<Vec<i64>>),
    #[serde(rename = "as_string_to_argument")]
    StringToArgument(BTreeMap<String, Argument>),
    #[serde(rename = "as_float_lists")]
    FloatLists(Vec<Vec<f64>>),
}

#[derive(Debug, Deserialize, Clone)]
pub enum SymInt {
    #[serde(rename = "as_expr")]
    Expr(SymExprArg),
    #[serde(rename = "as_int")]
    Int(i64),
}

#[derive(Debug, Deserialize, Clone)]
pub struct SymExprArg {
    pub expr_str: String,
    #[serde(default)]
    pub hint: Option<Value>,
}

#[derive(Debug, Deserialize, Clone)]
pub struct TensorMeta {
    pub dtype: i64,
    pub sizes: Vec<SymInt>,
    pub strides: Vec<SymInt>,
    pub storage_offset: SymInt,
    #[serde(default)]
    pub device: Option<Device>,
}

#[derive(Debug, Deserialize)]
pub struct GraphSignature {
    pub input_specs: Vec<InputSpec>,
    pub output_specs: Vec<OutputSpec>,
}

#[derive(Debug, Deserialize)]
pub enum InputSpec {
    #[serde(rename = "user_input")]
    UserInput { arg: Argument },
    #[serde(rename = "parameter")]
    Parameter { arg: TensorArgument, parameter_name: String },
    #[serde(rename = "buffer")]
    Buffer { arg: TensorArgument, buffer_name: String, persistent: bool },
    #[serde(rename = "tensor_constant")]
    TensorConstant { arg: TensorArgument, tensor_constant_name: String },
    #[serde(rename = "custom_obj")]
    CustomObj(Value),
    #[serde(rename = "token")]
    Token(Value),
    #[serde(rename = "constant_input")]
    ConstantInput { name: String, value: ConstantValue },
}

#[derive(Debug, Deserialize, Clone)]
pub enum ConstantValue {
    #[serde(rename = "as_none")]
    None(Value),
    #[serde(rename = "as_int")]
    Int(i64),
    #[serde(rename = "as_float")]
    Float(#[serde(deserialize_with = "float")] f64),
    #[serde(rename = "as_string")]
    String(String),
    #[serde(rename = "as_bool")]
    Bool(bool),
}

#[derive(Debug, Deserialize)]
pub enum OutputSpec {
    #[serde(rename = "user_output")]
    UserOutput { arg: Argument },
    #[serde(rename = "loss_output")]
    LossOutput { arg: TensorArgument },
    #[serde(rename = "buffer_mutation")]
    BufferMutation { arg: TensorArgument, buffer_name: String },
    #[serde(rename = "gradient_to_parameter")]
    GradientToParameter(Value),
    #[serde(rename = "gradient_to_user_input")]
    GradientToUserInput(Value),
    #[serde(rename = "user_input_mutation")]
    UserInputMutation { arg: TensorArgument, user_input_name: String },
    #[serde(rename = "token")]
    Token(Value),
    #[serde(rename = "parameter_mutation")]
    ParameterMutation { arg: TensorArgument, parameter_name: String },
}

#[derive(Debug, Deserialize)]
pub struct ModuleCallEntry {
    pub fqn: String,
    pub signature: Option<ModuleCallSignature>,
}

#[derive(Debug, Deserialize)]
pub struct ModuleCallSignature {
    pub in_spec: String,
    pub out_spec: String,
}

/// `model_weights_config.json` / `model_constants_config.json`.
#[derive(Debug, Deserialize)]
pub struct PayloadConfig {
    pub config: BTreeMap<String, PayloadMeta>,
}

#[derive(Debug, Deserialize)]
pub struct PayloadMeta {
    pub path_name: String,
    #[serde(default)]
    pub is_param: bool,
    #[serde(default)]
    pub use_pickle: bool,
    pub tensor_meta: Option<TensorMeta>,
}
