//! Operator signatures (PyTorch's native function schemas), for strict argument checks:
//! a node may pass only arguments its operator declares, each at most once, and must pass
//! every argument that has no default. torch.export omits only keyword arguments left at
//! their default, so a missing required argument means a damaged or hand-made program,
//! never "use the default".

use crate::frontend::schema::Node;
use std::collections::HashMap;
use std::sync::OnceLock;

/// `aten.<op>[.<overload>]\t<schema>` for the 193 Core ATen operators (a copy of
/// `shared/reference/core_aten_ops.tsv`).
const CORE: &str = include_str!("core_aten_ops.tsv");

/// Operators aotc lowers that are not in the Core ATen set, as PyTorch declares them.
const EXTRA: &[&str] = &[
    "unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]",
    "pad(Tensor self, SymInt[] pad, str mode=\"constant\", float? value=None) -> Tensor",
    "hardsigmoid(Tensor self) -> Tensor",
    "expand_as(Tensor(a) self, Tensor other) -> Tensor(a)",
    "reshape_as(Tensor(a) self, Tensor other) -> Tensor(a)",
    "view_as(Tensor(a) self, Tensor other) -> Tensor(a)",
    "linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "clamp_min(Tensor self, Scalar min) -> Tensor",
    "clamp_max(Tensor self, Scalar max) -> Tensor",
    "addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
    "addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
    "detach(Tensor(a) self) -> Tensor(a)",
    "item(Tensor self) -> Scalar",
    "swapaxes(Tensor(a) self, int axis0, int axis1) -> Tensor(a)",
    "numpy_T(Tensor(a) self) -> Tensor(a)",
    "meshgrid.indexing(Tensor[] tensors, *, str indexing) -> Tensor[]",
    "meshgrid(Tensor[] tensors) -> Tensor[]",
    "empty_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "multiply.Tensor(Tensor self, Tensor other) -> Tensor",
    "floor_divide(Tensor self, Tensor other) -> Tensor",
    "floor_divide.Scalar(Tensor self, Scalar other) -> Tensor",
    "_weight_norm(Tensor v, Tensor g, int dim=0) -> Tensor",
    "upsample_bicubic2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor",
    "_unsafe_view(Tensor self, SymInt[] size) -> Tensor",
    "all(Tensor self) -> Tensor",
    "all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
    "arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "lift_fresh_copy(Tensor self) -> Tensor",
    "rand.generator(SymInt[] size, *, Generator? generator, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "randn.generator(SymInt[] size, *, Generator? generator, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "randperm.generator(SymInt n, *, Generator? generator, ScalarType? dtype=long, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)",
    "silu(Tensor self) -> Tensor",
    "split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
    "squeeze(Tensor(a) self) -> Tensor(a)",
    "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "t(Tensor(a) self) -> Tensor(a)",
    "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
    // What torch.export's default IR keeps of the layers and tensor methods (composite.rs).
    "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "matmul(Tensor self, Tensor other) -> Tensor",
    "baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
    "conv1d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[1] stride=[1], SymInt[1] padding=[0], SymInt[1] dilation=[1], SymInt groups=1) -> Tensor",
    "conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] dilation=[1, 1], SymInt groups=1) -> Tensor",
    "conv1d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[1] stride=[1], str padding=\"valid\", SymInt[1] dilation=[1], SymInt groups=1) -> Tensor",
    "conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], str padding=\"valid\", SymInt[2] dilation=[1, 1], SymInt groups=1) -> Tensor",
    "conv3d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[3] stride=[1, 1, 1], str padding=\"valid\", SymInt[3] dilation=[1, 1, 1], SymInt groups=1) -> Tensor",
    "instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor",
    "roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor",
    "conv3d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[3] stride=[1, 1, 1], SymInt[3] padding=[0, 0, 0], SymInt[3] dilation=[1, 1, 1], SymInt groups=1) -> Tensor",
    "conv_transpose1d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[1] stride=[1], SymInt[1] padding=[0], SymInt[1] output_padding=[0], SymInt groups=1, SymInt[1] dilation=[1]) -> Tensor",
    "conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] output_padding=[0, 0], SymInt groups=1, SymInt[2] dilation=[1, 1]) -> Tensor",
    "conv_transpose3d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[3] stride=[1, 1, 1], SymInt[3] padding=[0, 0, 0], SymInt[3] output_padding=[0, 0, 0], SymInt groups=1, SymInt[3] dilation=[1, 1, 1]) -> Tensor",
    "batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor",
    "layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enable=True) -> Tensor",
    "group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enabled=True) -> Tensor",
    "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
    "log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
    "max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor",
    "max_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> Tensor",
    "adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor",
    "adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor",
    "dropout(Tensor input, float p, bool train) -> Tensor",
    "gru.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)",
    "einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor",
    "hardswish(Tensor self) -> Tensor",
    "im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor",
    "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor",
    "to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
    "to.device(Tensor(a) self, Device device, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
    "to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
    "type_as(Tensor self, Tensor other) -> Tensor",
    "contiguous(Tensor(a) self, *, MemoryFormat memory_format=0) -> Tensor(a)",
    "new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "new_empty(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)",
    "unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)",
    "chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]",
    "stack(Tensor[] tensors, int dim=0) -> Tensor",
    "tril(Tensor self, SymInt diagonal=0) -> Tensor",
    "triu(Tensor self, SymInt diagonal=0) -> Tensor",
    "diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor",
    "masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor",
    "masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor",
    "repeat_interleave.self_int(Tensor self, SymInt repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor",
    "unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)",
    "min.other(Tensor self, Tensor other) -> Tensor",
    "max.other(Tensor self, Tensor other) -> Tensor",
    "where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor",
    "where.ScalarSelf(Tensor condition, Scalar self, Tensor other) -> Tensor",
    "where.Scalar(Tensor condition, Scalar self, Scalar other) -> Tensor",
    "__and__.Tensor(Tensor self, Tensor other) -> Tensor",
    "__or__.Tensor(Tensor self, Tensor other) -> Tensor",
    "__xor__.Tensor(Tensor self, Tensor other) -> Tensor",
];

#[derive(Debug, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub has_default: bool,
}

#[derive(Debug)]
pub struct Signature {
    /// The schema text, for messages.
    pub text: &'static str,
    pub params: Vec<Param>,
}

/// The Core ATen operators ("add.Tensor", "abs.default"), in the reference's order.
pub fn core_operators() -> impl Iterator<Item = String> {
    CORE.lines().filter_map(|l| l.split_once('\t')).map(|(_, schema)| parse(schema).0)
}

/// The signature of `op` ("add.Tensor", "view.default"), if aotc knows it.
pub fn lookup(op: &str) -> Option<&'static Signature> {
    static TABLE: OnceLock<HashMap<String, Signature>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let core = CORE.lines().filter_map(|l| l.split_once('\t')).map(|(_, schema)| schema);
            core.chain(EXTRA.iter().copied())
                .map(|text| {
                    let (name, params) = parse(text);
                    (name, Signature { text, params })
                })
                .collect()
        })
        .get(op)
}

/// "add.Tensor(Tensor self, *, Scalar alpha=1) -> Tensor" → ("add.Tensor", [self, alpha=]).
/// The schemas are our own constants, so a malformed one is a bug caught by the tests.
fn parse(text: &str) -> (String, Vec<Param>) {
    let open = text.find('(').expect("schema has a parameter list");
    let close = text.rfind(") ->").expect("schema has a return type");
    let name = &text[..open];
    let name = if name.contains('.') { name.to_string() } else { format!("{name}.default") };
    let params = split_top_level(&text[open + 1..close])
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty() && *p != "*")
        .map(|p| {
            let (decl, default) = match p.split_once('=') {
                Some((d, _)) => (d, true),
                None => (p, false),
            };
            Param {
                name: decl.split_whitespace().last().expect("parameter has a name").to_string(),
                has_default: default,
            }
        })
        .collect();
    (name, params)
}

/// Splits on commas outside brackets and parentheses (`int[2] stride=[1, 1]`, `Tensor(a -> *)`).
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (vec![], 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Checks the argument names `node` passes against `sig`.
pub fn check_args(node: &Node, sig: &Signature) -> Result<(), String> {
    let mut seen: Vec<&str> = vec![];
    for a in &node.inputs {
        if !sig.params.iter().any(|p| p.name == a.name) {
            return Err(format!("unknown argument '{}' (the schema is {})", a.name, sig.text));
        }
        if seen.contains(&a.name.as_str()) {
            return Err(format!("argument '{}' is passed twice", a.name));
        }
        seen.push(&a.name);
    }
    match sig.params.iter().find(|p| !p.has_default && !seen.contains(&p.name.as_str())) {
        Some(p) => Err(format!("missing required argument '{}' (the schema is {})", p.name, sig.text)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lowered_operator_has_a_signature() {
        let missing: Vec<&str> = super::super::registry::operators().filter(|op| lookup(op).is_none()).collect();
        assert!(missing.is_empty(), "no signature for {missing:?}");
    }

    #[test]
    fn parses_defaults_keywords_and_nested_brackets() {
        let (name, params) = parse("max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, *, bool ceil_mode=False) -> (Tensor, Tensor)");
        assert_eq!(name, "max_pool2d_with_indices.default");
        let got: Vec<(&str, bool)> = params.iter().map(|p| (p.name.as_str(), p.has_default)).collect();
        assert_eq!(
            got,
            [("self", false), ("kernel_size", false), ("stride", true), ("padding", true), ("ceil_mode", true)]
        );
        assert_eq!(lookup("split.Tensor").unwrap().params[0], Param { name: "self".into(), has_default: false });
        assert_eq!(lookup("sum.dim_IntList").unwrap().params.len(), 4);
    }
}
