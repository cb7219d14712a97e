//! The manifest: what the compiler tells the support code inside the `.so` about the
//! program, embedded as JSON next to the generated code.
//!
//! The generated driver sees the program as a table of *slots* (one data pointer per
//! tensor it touches) and a table of *dims* (symbolic sizes and strides, evaluated per
//! call). The support code fills both before each call, as this manifest says.

use crate::arena::Arena;
use crate::sym::{SymExpr, SymId};
use crate::weights::WeightsTable;
use crate::DType;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub abi_version: u32,
    /// The archive or file the program came from.
    pub source: String,
    /// pytree TreeSpecs, as JSON strings in torch.export's format.
    pub in_spec: String,
    pub out_spec: String,
    /// The field names of each namedtuple type the specs name (`collections.namedtuple`
    /// nodes, whose context is the type's serialized name).
    #[serde(default)]
    pub namedtuple_fields: std::collections::BTreeMap<String, Vec<String>>,
    /// Symbols of dynamic dimensions with their range constraints, indexed by `SymId`.
    pub symbols: Vec<SymbolRange>,
    /// Flattened user inputs, in call order.
    pub inputs: Vec<InputSpec>,
    /// Flattened user outputs.
    pub outputs: Vec<TensorSpec>,
    /// Mutable model state (buffers), each with its initial value in the weights blob.
    pub buffers: Vec<BufferSpec>,
    pub slots: Vec<Slot>,
    /// Evaluated per call into the `dims` table the generated code reads.
    pub dims: Vec<SymExpr>,
    /// After each call, slot `.0` becomes the value of buffer `.1`.
    pub buffer_mutations: Vec<(usize, usize)>,
    /// After each call, slot `.0` is written back into the caller's input `.1`.
    pub input_mutations: Vec<(usize, usize)>,
    /// Conditions on symbolic sizes the compiler could not decide (a view's element
    /// count, a symbolic index in range...): checked on every call once the symbols are
    /// bound, before any memory is touched. A false one fails the call.
    #[serde(default)]
    pub guards: Vec<Guard>,
    /// Where the generated code records a data-dependent index out of range (gather,
    /// embedding, index...), when the program has any.
    #[serde(default)]
    pub index_errors: Option<IndexErrors>,
    /// Symbols whose values come from the data (`tensor.item()`, the row count of
    /// `nonzero`). The program then runs in stages: after stage `stage`, symbol `sym`
    /// takes the int64 value the program left in scratch slot `slot`. A size, guard or
    /// slot that uses such a symbol is evaluated only from the next stage on.
    #[serde(default)]
    pub data_symbols: Vec<DataSymbol>,
    /// Where the stages branch (a `while_loop`): see [`Jump`]. Without jumps the stages
    /// run in order.
    #[serde(default)]
    pub jumps: Vec<Jump>,
    /// Floating-point operations of one call in its GEMMs (convolutions included), as
    /// the compiler counts them: 2 * m * n * k per product.
    #[serde(default = "zero")]
    pub flops: SymExpr,
    /// The graph nodes the kernels compute, in graph order (for profiles).
    #[serde(default)]
    pub nodes: Vec<GraphNode>,
    /// One entry per kernel, in the order the generated driver runs them; a profile
    /// (`aotc_profile_read`) times them in this order.
    #[serde(default)]
    pub kernels: Vec<KernelInfo>,
    /// The program compiled for CUDA (`aotc compile --device cuda`): such a library runs
    /// on a GPU only; `None` for a CPU library.
    #[serde(default)]
    pub cuda: Option<crate::cuda::CudaPlan>,
    /// The scratch slots that share one allocation by lifetime; every other scratch slot
    /// has one of its own.
    #[serde(default)]
    pub arena: Arena,
    /// The weights the library reads: where they live, their fingerprints, the entries
    /// that `Slot::Weight` and `BufferSpec::init_entry` index.
    #[serde(default)]
    pub weights: WeightsTable,
    /// The CPU the generated code was compiled for, checked when an instance is created
    /// (empty in libraries compiled before `--cpu`: no check).
    #[serde(default)]
    pub cpu: crate::cpu::CpuTarget,
}

fn zero() -> SymExpr {
    SymExpr::Int(0)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DataSymbol {
    pub sym: SymId,
    pub slot: usize,
    pub stage: usize,
    /// "node '_local_scalar_dense' (torch.ops.aten._local_scalar_dense.default)".
    pub what: String,
}

/// After stage `after`, the next one is `to` when `unless` is None or the int64 in scratch
/// slot `unless` (a loop's condition, just computed) is 0; else `after + 1`. A loop is two
/// jumps: its condition's stage leaves the loop when the condition is false, its body's
/// last stage goes back to the condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jump {
    pub after: usize,
    pub to: usize,
    pub unless: Option<usize>,
}

impl Manifest {
    /// How many stages the generated driver runs (1 without data-dependent symbols or
    /// loops).
    pub fn stages(&self) -> usize {
        let bindings = self.data_symbols.iter().map(|d| d.stage + 2);
        let jumps = self.jumps.iter().map(|j| (j.after + 2).max(j.to + 1));
        bindings.chain(jumps).max().unwrap_or(1)
    }

    /// The stage that runs after `stage`, given the value of a slot a jump tests (`flag`
    /// reads it); `stages()` when the call is over.
    pub fn next_stage<E>(&self, stage: usize, flag: impl FnOnce(usize) -> Result<i64, E>) -> Result<usize, E> {
        Ok(match self.jumps.iter().find(|j| j.after == stage) {
            Some(Jump { to, unless: None, .. }) => *to,
            Some(Jump { to, unless: Some(slot), .. }) if flag(*slot)? == 0 => *to,
            _ => stage + 1,
        })
    }

    /// The first stage at which `e` can be evaluated: after every data symbol it uses is bound.
    pub fn stage_of(&self, e: &SymExpr) -> usize {
        stage_of(&self.data_symbols, e)
    }

    /// The symbol user input `i` is the value of, if it is a python int export kept
    /// dynamic (a SymInt input): a 0-dim int64 input the program reads as a data symbol
    /// before its first kernel. The library binds it with the inputs, from the caller's
    /// 0-dim int64 on the CPU (as every python scalar), checked against its range.
    pub fn input_symbol(&self, i: usize) -> Option<&DataSymbol> {
        if self.data_symbols.is_empty() {
            return None;
        }
        match self.inputs.get(i)? {
            InputSpec::Tensor(t) if t.sizes.is_empty() && t.dtype == DType::I64 => {
                self.data_symbols.iter().find(|d| d.slot == t.slot)
            }
            _ => None,
        }
    }

    /// Whether data symbol `d` is read from a user input (bound with the inputs, see
    /// [`Manifest::input_symbol`]) rather than computed by the program.
    pub fn is_input_symbol(&self, d: &DataSymbol) -> bool {
        matches!(self.slots.get(d.slot), Some(Slot::Input(_)))
    }

    /// The `aotc.h` kind (`value_kind`) of user input `i`: a specialised python scalar's,
    /// `INT` for a SymInt input, else `TENSOR`.
    pub fn input_kind(&self, i: usize) -> i32 {
        match self.inputs.get(i) {
            Some(InputSpec::Constant { value: ConstValue::Int(_), .. }) => crate::value_kind::INT,
            Some(InputSpec::Constant { value: ConstValue::Bool(_), .. }) => crate::value_kind::BOOL,
            Some(InputSpec::Constant { value: ConstValue::Str(_), .. }) => crate::value_kind::STR,
            Some(InputSpec::Constant { value: ConstValue::None, .. }) => crate::value_kind::NONE,
            Some(InputSpec::Constant { .. }) => crate::value_kind::FLOAT,
            _ if self.input_symbol(i).is_some() => crate::value_kind::INT,
            _ => crate::value_kind::TENSOR,
        }
    }
}

/// [`Manifest::stage_of`] for the compiler, before the manifest exists.
pub fn stage_of(data_symbols: &[DataSymbol], e: &SymExpr) -> usize {
    // Programs without data symbols (nearly all) skip the walk on every call.
    if data_symbols.is_empty() {
        return 0;
    }
    let mut stage = 0;
    e.for_each_symbol(&mut |s| {
        if let Some(d) = data_symbols.iter().find(|d| d.sym == s) {
            stage = stage.max(d.stage + 1);
        }
    });
    stage
}

/// A node of the exported graph, as profiles name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphNode {
    /// The FX node name (`convolution_3`).
    pub name: String,
    /// `torch.ops.aten.convolution.default`.
    pub target: String,
    /// The innermost module of the node's `nn_module_stack` (`layers.0.attn`, with its
    /// class `Attention`); none for nodes of the root module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_type: Option<String>,
    /// `file.py:42`, the innermost frame of the `stack_trace` export recorded, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// One kernel of the program.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelInfo {
    /// `pointwise`, `reduce.sum` (or another reduction), `matmul`, or `extern NAME`.
    pub kind: String,
    /// The graph value its output buffer holds.
    pub writes: String,
    /// Indices into [`Manifest::nodes`], ascending: the nodes whose computation the kernel
    /// holds (the one it was made for and those fused into it). Empty for a copy the
    /// interface needs (an input or a weight returned as an output).
    pub nodes: Vec<usize>,
    /// The stage of the driver that runs it.
    pub stage: usize,
}

/// A scratch slot of three int64 (site + 1, index, dimension size; all zero: no error),
/// zeroed before each call and read after it, and what each site is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IndexErrors {
    pub slot: usize,
    /// "node 'gather' (torch.ops.aten.gather.default): index along dimension 1".
    pub sites: Vec<String>,
}

/// `lhs op rhs` over the bound symbols, with what it protects for the message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guard {
    pub lhs: SymExpr,
    pub op: GuardOp,
    pub rhs: SymExpr,
    /// The node and rule, e.g. "node 'view_3' (view): the element count is preserved".
    pub what: String,
    #[serde(default, skip_serializing_if = "GuardKind::is_shape")]
    pub kind: GuardKind,
}

/// What a failed guard means: a size rule the compiler relies on (`AOTC_ERR_SHAPE`), or
/// a check the program states itself (`AOTC_ERR_ASSERT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GuardKind {
    #[default]
    Shape,
    Assert,
}

impl GuardKind {
    fn is_shape(&self) -> bool {
        *self == GuardKind::Shape
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GuardOp {
    Eq,
    Le,
}

impl GuardOp {
    pub fn holds(self, lhs: i64, rhs: i64) -> bool {
        match self {
            GuardOp::Eq => lhs == rhs,
            GuardOp::Le => lhs <= rhs,
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            GuardOp::Eq => "==",
            GuardOp::Le => "<=",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SymbolRange {
    /// The name torch.export gave it (`s77`).
    pub name: String,
    /// `i64::MIN`: unbounded (a data symbol, such as an `item()`, may be negative).
    pub min: i64,
    /// `None`: unbounded.
    pub max: Option<i64>,
}

impl SymbolRange {
    pub fn contains(&self, v: i64) -> bool {
        v >= self.min && self.max.is_none_or(|hi| v <= hi)
    }
}

/// "[0, 5]", "[2, inf]", "[-inf, inf]".
impl std::fmt::Display for SymbolRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.min {
            i64::MIN => f.write_str("[-inf, ")?,
            lo => write!(f, "[{lo}, ")?,
        }
        match self.max {
            Some(hi) => write!(f, "{hi}]"),
            None => f.write_str("inf]"),
        }
    }
}

/// A tensor's name, element type and (possibly symbolic) contiguous sizes, plus the slot
/// that holds its data.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DType,
    pub sizes: Vec<SymExpr>,
    pub slot: usize,
    /// What the caller gets (`value_kind`): `TENSOR`, or for an output the python scalar
    /// it is (a SymInt, SymFloat or SymBool user output: a 0-dim int64, float64 or bool
    /// tensor that bindings turn into a python int, float or bool).
    #[serde(default, skip_serializing_if = "is_tensor_kind")]
    pub kind: i32,
}

fn is_tensor_kind(kind: &i32) -> bool {
    *kind == crate::value_kind::TENSOR
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum InputSpec {
    Tensor(TensorSpec),
    /// A python scalar that export specialised into the program: checked, not used.
    Constant {
        name: String,
        value: ConstValue,
    },
}

impl InputSpec {
    pub fn name(&self) -> &str {
        match self {
            InputSpec::Tensor(t) => &t.name,
            InputSpec::Constant { name, .. } => name,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConstValue {
    Float(f64),
    Int(i64),
    Bool(bool),
    None,
    Str(String),
}

/// `0.5`, `3` (a float with no fraction as an int), `True`, `None`, `"mean"`.
impl std::fmt::Display for ConstValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConstValue::Float(v) => write!(f, "{v}"),
            ConstValue::Int(v) => write!(f, "{v}"),
            ConstValue::Bool(true) => f.write_str("True"),
            ConstValue::Bool(false) => f.write_str("False"),
            ConstValue::None => f.write_str("None"),
            ConstValue::Str(s) => write!(f, "{s:?}"),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BufferSpec {
    /// The fully qualified name (`calls`, `bn.running_mean`).
    pub name: String,
    pub dtype: DType,
    pub sizes: Vec<i64>,
    /// Byte offset of the initial value in the weights blob.
    pub init_offset: u64,
    /// Its entry in the weights table (none when it is empty).
    #[serde(default)]
    pub init_entry: Option<usize>,
    pub slot: usize,
}

impl BufferSpec {
    pub fn byte_len(&self) -> usize {
        self.sizes.iter().product::<i64>() as usize * self.dtype.size()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Slot {
    /// Read-only data at this byte offset of the weights blob: entry `entry` of the weights
    /// table (none when it is empty: a weight nothing reads, or a tensor of no elements).
    Weight {
        offset: u64,
        #[serde(default)]
        entry: Option<usize>,
    },
    /// The instance's current value of buffer N.
    Buffer(usize),
    /// The caller's user input N (made contiguous first if it is not).
    Input(usize),
    /// Memory the instance owns: intermediates, outputs, mutated values.
    Scratch { bytes: SymExpr },
    /// The bytes from `offset` on of scratch slot `within` (a static-size slot of the first
    /// stage, itself no alias): a part of a concatenation, which its producer writes in
    /// place (the compiler's `passes::concat_in_place`).
    Alias { within: usize, offset: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest of 5 stages: 0 before a loop, 1 its condition, 2 and 3 its body, 4 after.
    fn looping() -> Manifest {
        let mut m: Manifest = serde_json::from_value(serde_json::json!({
            "abi_version": crate::ABI_VERSION, "source": "", "in_spec": "", "out_spec": "", "symbols": [],
            "inputs": [], "outputs": [], "buffers": [], "slots": [], "dims": [],
            "buffer_mutations": [], "input_mutations": []
        }))
        .expect("a minimal manifest");
        m.jumps = vec![Jump { after: 1, to: 4, unless: Some(7) }, Jump { after: 3, to: 1, unless: None }];
        m
    }

    /// The stages a call visits when the condition (slot 7) holds `flags` in turn.
    fn visits(m: &Manifest, flags: &[i64]) -> Vec<usize> {
        let mut flags = flags.iter();
        let (mut stage, mut seen) = (0, vec![]);
        while stage < m.stages() {
            seen.push(stage);
            stage = m
                .next_stage(stage, |slot| {
                    assert_eq!(slot, 7, "the condition's slot");
                    flags.next().copied().ok_or("read past the recorded conditions")
                })
                .unwrap();
        }
        seen
    }

    #[test]
    fn a_loop_runs_its_body_while_the_condition_holds() {
        let m = looping();
        assert_eq!(m.stages(), 5);
        assert_eq!(visits(&m, &[0]), [0, 1, 4], "no iteration");
        assert_eq!(visits(&m, &[1, 1, 0]), [0, 1, 2, 3, 1, 2, 3, 1, 4], "two iterations");
    }
}
