//! Lowering: the torch.export graph becomes the loop IR.
//!
//! Walks the signature (parameters, buffers, constants, user inputs: signature.rs), then
//! every node in order through the one registry of lowerings ([`aten::registry`]; an
//! in-place operator through its functional form, see functionalize.rs), then the outputs
//! and mutations. Each node's result is checked against the shape and dtype torch.export
//! recorded for it. Pointwise results stay lazy (fused into their consumers) unless they
//! have several users or are large, in which case they are realized into a buffer.

pub mod args;
mod asserts;
pub mod aten;
pub mod checks;
mod control_flow;
mod functionalize;
mod loops;
mod origin;
mod recognize;
mod signature;
mod symbols;
pub mod tensor;

use crate::error::{Error, Result};
use crate::frontend::schema::{self, Argument};
use crate::frontend::Source;
use crate::ir::expr;
use crate::ir::{BufId, BufKind, Kernel, Program, StridedRef};
use aotc_abi::manifest::{ConstValue, Guard, GuardOp, SymbolRange};
use aotc_abi::sym::{SymExpr, SymId};
use aotc_abi::DType;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use tensor::{contiguous_strides, vars, Repr, TensorValue};

/// A lazy body larger than this many nodes is realized even with a single user, to
/// bound code size.
const MAX_FUSED_NODES: usize = 256;

/// The most dimensions a tensor may have (PyTorch's own limit is 64 too).
pub const MAX_RANK: usize = 64;

pub enum LoweredInput {
    Tensor { name: String, dtype: DType, sizes: Vec<SymExpr>, buf: BufId },
    Constant { name: String, value: ConstValue },
}

pub struct LoweredBuffer {
    pub fqn: String,
    pub buf: BufId,
}

/// The program plus everything the interface of the library needs.
#[derive(Default)]
pub struct Lowered {
    pub program: Program,
    pub symbols: Vec<SymbolRange>,
    pub inputs: Vec<LoweredInput>,
    pub outputs: Vec<(String, BufId)>,
    /// The `aotc_abi::value_kind` of each output: TENSOR, or the python scalar it is.
    pub output_kinds: Vec<i32>,
    pub buffers: Vec<LoweredBuffer>,
    pub buffer_mutations: Vec<(BufId, usize)>,
    pub input_mutations: Vec<(BufId, usize)>,
    /// Run-time checks of shape rules the compiler could not decide statically.
    pub guards: Vec<Guard>,
    pub in_spec: String,
    pub out_spec: String,
    /// The field names of the namedtuple types the call spec names.
    pub namedtuple_fields: BTreeMap<String, Vec<String>>,
}

impl Lowered {
    /// The buffers whose values the caller sees after a call (outputs, new values of
    /// state and of mutated inputs): passes keep what they hold.
    pub fn caller_visible(&self) -> std::collections::HashSet<BufId> {
        let mutations = self.buffer_mutations.iter().chain(&self.input_mutations).map(|(b, _)| *b);
        self.outputs.iter().map(|(_, b)| *b).chain(mutations).collect()
    }
}

pub struct Lowerer<'s> {
    pub prog: Program,
    src: &'s Source,
    env: HashMap<String, TensorValue>,
    symbols: Vec<SymbolRange>,
    hints: Vec<Option<i64>>,
    users: HashMap<String, usize>,
    guards: Vec<Guard>,
    guard_set: HashSet<(SymExpr, GuardOp, SymExpr)>,
    /// "node 'view_3' (torch.ops.aten.view.default)": the node being lowered, for guards.
    node_desc: String,
    /// Symbols bound from input dimensions, computed from data, and derived (see symbols.rs).
    input_symbols: HashSet<SymId>,
    data_symbols: HashSet<SymId>,
    defs: HashMap<SymId, SymExpr>,
    /// The random generator, once a node draws random numbers.
    rng: Option<aten::random::Rng>,
    /// The node being lowered: an index into `prog.nodes` (see origin.rs).
    node: Option<usize>,
    /// The device the program is lowered for.
    target: Target,
    /// Which tensors share memory, and which are written in place (see functionalize.rs).
    aliases: functionalize::Aliases,
    /// The subgraphs being lowered (a branch of a cond, a map body), innermost last: their
    /// names and recorded metadata shadow the main graph's (see control_flow.rs).
    scopes: Vec<std::rc::Rc<schema::Graph>>,
    /// Decomposed operators of the main graph lowered whole (see recognize.rs); the
    /// `prog.nodes` of the inner nodes met so far, by the node that computes them; and
    /// those the current node computes (see origin.rs).
    recognized: recognize::Recognized,
    absorbed_nodes: HashMap<usize, Vec<usize>>,
    inner_nodes: Vec<usize>,
}

/// The device a program is lowered for. For `Cuda`, lowering never chooses a call into
/// the CPU support library where a generic lowering exists (native convolution, max
/// pooling, row softmax and layer norm, GELU): the program is pointwise, reduction and
/// matmul kernels, plus the extern kernels that have no generic form (FFT, `nonzero`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    #[default]
    Cpu,
    Cuda,
}

thread_local! {
    static CURRENT_NODE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The node being lowered on this thread, if any: for reporting an internal error.
pub fn current_node() -> Option<String> {
    CURRENT_NODE.with(|c| c.borrow().clone())
}

/// The targets lowered outside the registry of operators: control flow and checks.
pub fn structural_targets() -> impl Iterator<Item = &'static str> {
    control_flow::TARGETS.iter().chain(asserts::TARGETS).copied()
}

/// Nodes that carry no tensor computation: SymInt arithmetic (whose values torch.export
/// also records in `sym_int_values`) and asserts on tensor metadata, which the recorded
/// types prove (each result is checked against them). The asserts on values and sizes
/// are checked: asserts.rs.
pub fn is_bookkeeping(target: &str) -> bool {
    !asserts::is_assert(target)
        && (target.starts_with("_operator.")
            || target.starts_with("<built-in function ")
            || target.starts_with("torch.ops.aten.sym_")
            || target == "torch.ops.aten._assert_tensor_metadata.default"
            || target.starts_with("torch.sym_")
            || target.starts_with("math."))
}

impl Lowerer<'_> {
    /// May lowering call the CPU support library's fast paths (native convolution,
    /// pooling, rows, GELU)?
    pub fn native_calls(&self) -> bool {
        self.target == Target::Cpu
    }
}

pub fn lower(src: &Source, target: Target) -> Result<Lowered> {
    let graph = &src.program.graph_module.graph;
    check_supported(graph)?;
    // Sizes are simplified with this program's ranges from bind_range_constraints on.
    let _ranges = aotc_abi::sym::RangeScope::enter();
    let mut lw = Lowerer {
        prog: Program::default(),
        src,
        env: HashMap::new(),
        symbols: vec![],
        hints: vec![],
        users: HashMap::new(),
        guards: vec![],
        guard_set: HashSet::new(),
        node_desc: String::new(),
        input_symbols: HashSet::new(),
        data_symbols: HashSet::new(),
        defs: HashMap::new(),
        rng: None,
        node: None,
        target,
        aliases: functionalize::Aliases::new(graph),
        scopes: vec![],
        recognized: Default::default(),
        absorbed_nodes: HashMap::new(),
        inner_nodes: vec![],
    };
    lw.users = count_users(graph);
    lw.recognized = recognize::recognize(graph, &lw.users);
    lw.bind_range_constraints()?;
    let sig = &src.program.graph_module.signature;
    let (inputs, mut buffers) = lw.lower_inputs(sig)?;

    for (at, node) in graph.nodes.iter().enumerate() {
        lw.lower_node(Some(at), node)?;
    }
    CURRENT_NODE.with(|c| *c.borrow_mut() = None);
    lw.node_desc = "the graph outputs".into();
    lw.begin_node(None);
    let (outputs, output_kinds, mut buffer_mutations, input_mutations) = lw.lower_outputs(sig, &inputs, &buffers)?;
    aten::random::finish(&mut lw, &mut buffers, &mut buffer_mutations)?;
    lw.stamp_kernels();
    let (in_spec, out_spec) = call_spec(src);
    let namedtuple_fields = src
        .program
        .graph_module
        .treespec_namedtuple_fields
        .iter()
        .map(|(k, v)| (k.clone(), v.field_names.clone()))
        .collect();
    Ok(Lowered {
        program: lw.prog,
        symbols: lw.symbols,
        inputs,
        outputs,
        output_kinds,
        buffers,
        buffer_mutations,
        input_mutations,
        guards: lw.guards,
        in_spec,
        out_spec,
        namedtuple_fields,
    })
}

/// How many times each tensor name is read by the graph's nodes and outputs.
fn count_users(graph: &schema::Graph) -> HashMap<String, usize> {
    let mut users: HashMap<String, usize> = HashMap::new();
    let reads = graph.nodes.iter().flat_map(|n| n.inputs.iter().map(|a| &a.arg)).chain(&graph.outputs);
    for name in reads.flat_map(tensor_names) {
        *users.entry(name).or_default() += 1;
    }
    users
}

impl Lowerer<'_> {
    /// Lowers one node into the environment. `at` is its index in the main graph (None
    /// inside a subgraph, where in-place operators are refused: torch.export leaves none
    /// in the branches and bodies of control flow).
    fn lower_node(&mut self, at: Option<usize>, node: &schema::Node) -> Result<()> {
        if is_bookkeeping(&node.target) {
            return Ok(());
        }
        let name = node.name.clone().unwrap_or_else(|| output_names(node).join(","));
        self.node_desc = format!("node '{name}' ({})", node.target);
        CURRENT_NODE.with(|c| *c.borrow_mut() = Some(self.node_desc.clone()));
        self.begin_node(Some(origin::graph_node(node, &name)));
        if let Some(owner) = at.and_then(|at| self.recognized.absorbed_by(at)) {
            // Computed by `owner`'s lowering, whose kernels will name it.
            self.absorbed_nodes.entry(owner).or_default().extend(self.node);
            return Ok(());
        }
        if let Some(inner) = at.and_then(|at| self.absorbed_nodes.remove(&at)) {
            self.inner_nodes = inner;
        }
        let err = |message: String| Error::Lower { node: name.clone(), target: node.target.clone(), message };
        if let Some(functional) = functionalize::functional(node) {
            let at = at.ok_or_else(|| err("an in-place operator inside a control-flow subgraph".into()))?;
            return self.lower_inplace(at, node, functional.map_err(err)?).map_err(err);
        }
        if asserts::is_assert(&node.target) {
            return self.lower_assert(node).map_err(err);
        }
        let recognized = at.and_then(|at| self.recognized.safe_softmax(at)).cloned();
        let results = if let Some(softmax) = recognized {
            recognize::lower_safe_softmax(self, &softmax, &name).map_err(err)?
        } else if control_flow::is_control_flow(&node.target) {
            self.lower_control_flow(node)?
        } else {
            let (op, lower_fn) = aten::registry::lookup(&node.target).expect("checked by check_supported");
            let signature =
                aten::signatures::lookup(op).ok_or_else(|| err(format!("internal error: no signature for {op}")))?;
            aten::signatures::check_args(node, signature).map_err(err)?;
            let lower_fn = aten::complex::route(self, node, op, lower_fn).map_err(err)?;
            lower_fn(self, &args::Args { node }).map_err(err)?
        };
        // Sizes the lowering assumed equal where the ranges leave it open (a broadcast).
        for (a, b) in aotc_abi::sym::take_assumptions() {
            self.require(a, GuardOp::Eq, b, "the sizes broadcast together are equal (torch.export assumed so)")
                .map_err(err)?;
        }
        let names = output_names(node);
        if results.len() != names.len() {
            return Err(err(format!("lowering produced {} results for {} outputs", results.len(), names.len())));
        }
        for (out_name, value) in names.into_iter().zip(results) {
            if out_name.is_empty() {
                continue;
            }
            self.check_sizes(&value).map_err(|m| err(format!("result '{out_name}': {m}")))?;
            self.check_meta(&out_name, &value).map_err(err)?;
            let value = self.stamp(value);
            let value = self.schedule(&out_name, value);
            self.env.insert(out_name, value);
        }
        Ok(())
    }
}

/// Whether `v` is a lazy body too large to fuse into its consumers.
fn too_big(v: &TensorValue) -> bool {
    matches!(&v.repr, Repr::Lazy(body, _) if expr::size(body) > MAX_FUSED_NODES)
}

/// At most 200 characters of a text from the archive, for an error message.
fn abbreviate(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}... ({} bytes)", &text[..cut], text.len()),
        None => text.to_string(),
    }
}

fn call_spec(src: &Source) -> (String, String) {
    let mcg = &src.program.graph_module.module_call_graph;
    match mcg.iter().find(|e| e.fqn.is_empty()).and_then(|e| e.signature.as_ref()) {
        Some(s) => (s.in_spec.clone(), s.out_spec.clone()),
        None => (String::new(), String::new()),
    }
}

/// One error listing every unsupported target with the nodes that use it, in the graph
/// and its subgraphs.
fn check_supported(graph: &schema::Graph) -> Result<()> {
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    find_unsupported(graph, &mut missing);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::UnsupportedOps(missing.into_iter().collect()))
    }
}

fn find_unsupported(graph: &schema::Graph, missing: &mut BTreeMap<String, Vec<String>>) {
    for n in &graph.nodes {
        let inplace = functionalize::functional(n).map(|f| f.is_ok());
        let known = is_bookkeeping(&n.target)
            || asserts::is_assert(&n.target)
            || control_flow::is_control_flow(&n.target)
            || aten::registry::lookup(&n.target).is_some()
            || inplace == Some(true);
        if !known {
            missing
                .entry(n.target.clone())
                .or_default()
                .push(n.name.clone().unwrap_or_else(|| output_names(n).join(",")));
        }
        // A subgraph that does not parse is reported when its node is lowered.
        for sub in n.inputs.iter().filter_map(|a| control_flow::subgraph(&a.arg)).flatten() {
            find_unsupported(&sub.graph, missing);
        }
    }
}

fn tensor_names(a: &Argument) -> Vec<String> {
    match a {
        Argument::Tensor(t) => vec![t.name.clone()],
        Argument::Tensors(ts) => ts.iter().map(|t| t.name.clone()).collect(),
        Argument::OptionalTensor(schema::OptionalTensorArgument::Tensor(t)) => vec![t.name.clone()],
        Argument::OptionalTensors(ts) => ts
            .iter()
            .filter_map(|t| match t {
                schema::OptionalTensorArgument::Tensor(t) => Some(t.name.clone()),
                _ => None,
            })
            .collect(),
        _ => vec![],
    }
}

/// The tensor names a node defines, flattened; "" for an output slot torch left empty.
fn output_names(node: &schema::Node) -> Vec<String> {
    node.outputs
        .iter()
        .flat_map(|o| match o {
            Argument::Tensor(t) => vec![t.name.clone()],
            Argument::Tensors(ts) => ts.iter().map(|t| t.name.clone()).collect(),
            Argument::OptionalTensors(ts) => ts
                .iter()
                .map(|t| match t {
                    schema::OptionalTensorArgument::Tensor(t) => t.name.clone(),
                    _ => String::new(),
                })
                .collect(),
            _ => vec![],
        })
        .collect()
}

impl<'s> Lowerer<'s> {
    pub fn value(&self, name: &str) -> std::result::Result<TensorValue, String> {
        self.env.get(name).cloned().ok_or_else(|| format!("tensor '{name}' is not defined before its use"))
    }

    /// What torch.export recorded for tensor `name`, in the innermost graph being lowered.
    fn meta(&self, name: &str) -> std::result::Result<schema::TensorMeta, String> {
        let values = match self.scopes.last() {
            Some(sub) => &sub.tensor_values,
            None => &self.src.program.graph_module.graph.tensor_values,
        };
        values.get(name).cloned().ok_or_else(|| format!("no tensor_values entry for '{name}'"))
    }

    /// The recorded dtype and sizes of a real tensor: graph inputs, weights and constants.
    fn meta_sizes(&mut self, name: &str) -> std::result::Result<(DType, Vec<SymExpr>), String> {
        match self.recorded(name)? {
            (_, _, true) => Err(format!("'{name}' is complex64: complex tensors are supported only as intermediates")),
            (dtype, sizes, false) => Ok((dtype, sizes)),
        }
    }

    /// The recorded dtype and sizes of `name`, and whether it is complex64 (then float32,
    /// the dtype of its parts: see [`aten::complex`]).
    pub(crate) fn recorded(&mut self, name: &str) -> std::result::Result<(DType, Vec<SymExpr>, bool), String> {
        let m = self.meta(name)?;
        if m.sizes.len() > MAX_RANK {
            return Err(format!("'{name}' has rank {}; aotc supports up to {MAX_RANK} dimensions", m.sizes.len()));
        }
        let complex = m.dtype == aten::complex::COMPLEX64;
        let dtype = if complex { Some(DType::F32) } else { DType::from_torch_code(m.dtype) };
        let dtype =
            dtype.ok_or_else(|| format!("'{name}' has unsupported dtype {}", aten::complex::code_name(m.dtype)))?;
        let sizes = m.sizes.iter().map(|s| self.parse_sym(s)).collect::<std::result::Result<_, _>>()?;
        Ok((dtype, sizes, complex))
    }

    /// The lowering's shape and dtype must be the ones torch.export recorded. A recorded
    /// size that is a free symbol (export's name for a size it derived from data) is
    /// defined here as the lowering's own.
    fn check_meta(&mut self, name: &str, v: &TensorValue) -> std::result::Result<(), String> {
        let (dtype, mut sizes, complex) = self.recorded(name)?;
        let got = v.logical_sizes();
        if sizes.len() == got.len() {
            for (recorded, g) in sizes.iter_mut().zip(got) {
                if let SymExpr::Sym(s) = *recorded {
                    if self.is_free(s) && *recorded != *g {
                        self.define_symbol(s, g.clone())?;
                        *recorded = g.clone();
                    }
                }
            }
        }
        let same = sizes.len() == got.len()
            && sizes
                .iter()
                .zip(got)
                .all(|(a, b)| a == b || a.eval(&self.hints).ok().is_some_and(|x| Ok(x) == b.eval(&self.hints)));
        if dtype != v.dtype || complex != v.complex || !same {
            let show = |s: &[SymExpr]| s.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ");
            let want = if complex { "complex64".to_string() } else { dtype.to_string() };
            return Err(format!(
                "lowering gives {}[{}] for '{name}', torch.export recorded {want}[{}]",
                v.type_name(),
                show(got),
                show(&sizes)
            ));
        }
        Ok(())
    }

    /// Decides whether a lazy value is realized now (the fusion policy).
    fn schedule(&mut self, name: &str, v: TensorValue) -> TensorValue {
        if self.users.get(name).copied().unwrap_or(0) > 1 || too_big(&v) {
            self.realize(&v, name)
        } else {
            v
        }
    }

    /// Whether some node or the graph's outputs read the value `output` names.
    pub fn is_used(&self, output: &schema::Argument) -> bool {
        tensor_names(output).iter().any(|n| self.users.get(n).is_some_and(|&u| u > 0))
    }

    /// Whether the value(s) of `arg` have exactly one reader among the graph's nodes and
    /// outputs.
    pub fn used_once(&self, arg: &schema::Argument) -> bool {
        tensor_names(arg).iter().map(|n| self.users.get(n).copied().unwrap_or(0)).sum::<usize>() == 1
    }

    /// The float32 elements of `v` when it is a view of a constant (a weight) whose offset
    /// and strides are known, in `v`'s row-major order.
    pub fn constant_f32(&self, v: &TensorValue) -> Option<Vec<f32>> {
        let Repr::View(r) = &v.repr else { return None };
        let BufKind::Weight(w) = self.prog.buffers[r.buf].kind else { return None };
        if v.dtype != DType::F32 || v.complex {
            return None;
        }
        let sizes =
            v.sizes.iter().map(|s| s.as_int().and_then(|i| usize::try_from(i).ok())).collect::<Option<Vec<usize>>>()?;
        let strides = r.strides.iter().map(|s| s.as_int()).collect::<Option<Vec<i64>>>()?;
        let bytes = self.prog.weights[w].strided(4, r.offset.as_int()?, &sizes, &strides)?;
        Some(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// A new constant holding `data` (dense, row-major `sizes`).
    pub fn add_constant(&mut self, name: &str, dtype: DType, sizes: Vec<SymExpr>, data: Vec<u8>) -> BufId {
        self.add_weight(name, None, dtype, sizes, data.into())
    }

    /// Writes `v` into a new contiguous scratch buffer.
    pub fn materialize(&mut self, v: &TensorValue, name: &str) -> BufId {
        let out = self.prog.add_buffer(name, v.dtype, v.sizes.clone(), BufKind::Scratch);
        let body = v.load(&vars(v.rank()));
        self.prog.kernels.push(Kernel::Pointwise { out, ranges: v.sizes.clone(), body });
        out
    }

    /// A view for `v`: itself if it is one, else a new buffer holding it.
    pub fn realize(&mut self, v: &TensorValue, name: &str) -> TensorValue {
        match &v.repr {
            Repr::View(_) => v.clone(),
            Repr::Lazy(..) => self.copy(v, name),
        }
    }

    /// `v` written into a new buffer of its own, as a view of it (a copy even when `v`
    /// is already a view).
    pub fn copy(&mut self, v: &TensorValue, name: &str) -> TensorValue {
        TensorValue { complex: v.complex, ..TensorValue::view_of(self.materialize(v, name), v.dtype, v.sizes.clone()) }
    }

    /// A strided reference to `v`'s data, realizing it if lazy.
    pub fn strided(&mut self, v: &TensorValue, name: &str) -> (TensorValue, StridedRef) {
        let v = self.realize(v, name);
        let Repr::View(r) = &v.repr else { unreachable!("realize returns a view") };
        let r = r.clone();
        (v, r)
    }

    /// A buffer holding `v` contiguously from its start: `v`'s own when it is such a view,
    /// else a copy (for extern kernels, which take base pointers).
    pub fn contiguous(&mut self, v: &TensorValue, name: &str) -> BufId {
        let (v, r) = self.strided(v, name);
        if r.offset == SymExpr::Int(0) && r.strides == contiguous_strides(&v.sizes) {
            r.buf
        } else {
            self.materialize(&v, name)
        }
    }

    /// A contiguous view of `v` with `sizes` (torch's view/reshape), copying only when needed.
    pub fn reshape(&mut self, v: &TensorValue, sizes: &[SymExpr], name: &str) -> TensorValue {
        if let Some(r) = v.reshape_view(sizes) {
            return r;
        }
        let buf = self.materialize(v, name);
        TensorValue::view_of(buf, v.dtype, sizes.to_vec())
    }

    pub fn new_reduction_out(&mut self, name: &str, dtype: DType, sizes: Vec<SymExpr>) -> BufId {
        self.prog.add_buffer(name, dtype, sizes, BufKind::Scratch)
    }

    fn add_weight(
        &mut self,
        name: &str,
        kind_state: Option<usize>,
        dtype: DType,
        sizes: Vec<SymExpr>,
        data: crate::ir::Payload,
    ) -> BufId {
        let idx = self.prog.weights.len();
        self.prog.weights.push(data);
        let kind = match kind_state {
            Some(_) => BufKind::State(idx),
            None => BufKind::Weight(idx),
        };
        self.prog.add_buffer(name, dtype, sizes, kind)
    }
}
