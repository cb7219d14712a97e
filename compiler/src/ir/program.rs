//! Buffers and kernels: the lowered program.

use super::expr::{visit, ExprKind, E};
use aotc_abi::gemm::Activation;
use aotc_abi::manifest::GraphNode;
use aotc_abi::sym::{SymExpr, SymId};
use aotc_abi::DType;
use cranelift_codegen::entity::{entity_impl, PrimaryMap};
use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(u32);
entity_impl!(BufId, "buf");

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufKind {
    /// Read-only data embedded in the library (parameters, constants): index into
    /// [`Program::weights`].
    Weight(usize),
    /// Mutable model state: index into the interface's buffers.
    State(usize),
    /// A user input tensor: index into the flat inputs.
    Input(usize),
    /// Written by one kernel of the program.
    Scratch,
    /// The run-time index error record (site + 1, index, bound; all int64), written by any
    /// kernel that checks a data-dependent index; zeroed by the library before each call.
    IndexErrors,
}

#[derive(Clone, Debug)]
pub struct Buffer {
    /// The graph value it holds, for messages and the text IR.
    pub name: String,
    pub dtype: DType,
    /// Contiguous sizes.
    pub sizes: Vec<SymExpr>,
    pub kind: BufKind,
}

impl Buffer {
    pub fn bytes(&self) -> SymExpr {
        SymExpr::mul(self.sizes.iter().cloned().chain([SymExpr::Int(self.dtype.size() as i64)]))
    }

    /// [`Buffer::bytes`] when known at compile time.
    pub fn static_bytes(&self) -> Option<u64> {
        self.bytes().as_int().and_then(|n| u64::try_from(n).ok())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    /// Index (int64) of the first maximum / minimum.
    ArgMax,
    ArgMin,
}

/// A strided window on a buffer, for extern kernels.
#[derive(Clone, Debug)]
pub struct StridedRef {
    pub buf: BufId,
    pub offset: SymExpr,
    pub strides: Vec<SymExpr>,
}

/// `out[b] = activation(alpha * a[b] @ b[b] (+ out[b] if accumulate) (+ bias))` for b in
/// 0..batch; a is [batch, m, k], b is [batch, k, n] (strided), out is contiguous
/// [batch, m, n], bias a contiguous [n] added to every row.
#[derive(Clone, Debug)]
pub struct Matmul {
    pub out: BufId,
    pub dtype: DType,
    pub batch: SymExpr,
    pub m: SymExpr,
    pub n: SymExpr,
    pub k: SymExpr,
    pub a: StridedRef,
    pub b: StridedRef,
    pub alpha: f64,
    pub accumulate: bool,
    /// `b.buf` is a float32 weight holding the one k x n operand of every batch in
    /// `aotc_abi::gemm`'s packed layout (`b`'s offset and strides are then 0): see
    /// `passes::prepack`.
    pub packed_b: bool,
    /// The output pass fused into a packed-B float32 GEMM (`passes::epilogue`): a bias per
    /// column and an activation.
    pub bias: Option<BufId>,
    pub activation: Activation,
}

/// A call into the support library, `name(out, args...)`: each buffer passed as its base
/// pointer, each size as an int64, each list of sizes as (pointer to int64s, count). The
/// callee writes `out` in full.
#[derive(Clone, Debug)]
pub struct ExternCall {
    pub name: &'static str,
    pub out: BufId,
    pub args: Vec<ExternArg>,
    /// Floating-point operations of its multiply-adds (2 per), for `aotc bench`; 0 where
    /// not counted.
    pub flops: SymExpr,
}

#[derive(Clone, Debug)]
pub enum ExternArg {
    Buf(BufId),
    /// Scratch the callee may overwrite and whose contents mean nothing before or after
    /// the call (the depthwise convolution's scratch): no kernel writes it as its output.
    Workspace(BufId),
    Size(SymExpr),
    Sizes(Vec<SymExpr>),
    /// Buffers read as one array of base pointers (the parts of a concatenation).
    Bufs(Vec<BufId>),
}

#[derive(Clone, Debug)]
pub enum Kernel {
    Pointwise {
        out: BufId,
        ranges: Vec<SymExpr>,
        body: E,
    },
    /// Body variables: `ranges.len()` output variables, then `reduce.len()` reduction ones.
    Reduction {
        out: BufId,
        ranges: Vec<SymExpr>,
        reduce: Vec<SymExpr>,
        op: ReduceOp,
        body: E,
    },
    Matmul(Box<Matmul>),
    Extern(Box<ExternCall>),
}

/// Multiply-adds a matmul's split work counts as one step of elementwise work: a vector
/// FMA does 16 (AVX-512), so a matmul is worth threads (`MIN_PARALLEL_WORK`) only from about
/// a million multiply-adds, as the support library's GEMM decides. (Counted one to one,
/// ViT-tiny's 2 x 17x64x64 projections ran 4.5 -> 10.9 us on 2 threads.)
pub const MACS_PER_STEP: i64 = 16;

impl Kernel {
    /// The buffers (output first) and the symbolic sizes the kernel touches: what its code
    /// loads up front.
    pub fn inputs(&self) -> (Vec<BufId>, Vec<SymExpr>) {
        let k = self;
        let mut bufs = vec![k.out()];
        let mut syms: Vec<SymExpr> = vec![];
        let add_sym = |s: &SymExpr, syms: &mut Vec<SymExpr>| {
            if !s.is_static() && !syms.contains(s) {
                syms.push(s.clone())
            }
        };
        let body_inputs = |body: &E, bufs: &mut Vec<BufId>, syms: &mut Vec<SymExpr>| {
            visit(body, &mut |e| match &e.kind {
                ExprKind::Load { buf, index } => {
                    if !bufs.contains(buf) {
                        bufs.push(*buf)
                    }
                    index.sym_parts().for_each(|s| add_sym(s, syms));
                }
                ExprKind::Index(index) => index.sym_parts().for_each(|s| add_sym(s, syms)),
                ExprKind::LoadAt { buf, numel, .. } => {
                    if !bufs.contains(buf) {
                        bufs.push(*buf)
                    }
                    add_sym(numel, syms);
                }
                ExprKind::CheckIndex { bound, record, .. } => {
                    if !bufs.contains(record) {
                        bufs.push(*record)
                    }
                    add_sym(bound, syms);
                }
                _ => {}
            })
        };
        match k {
            Kernel::Pointwise { ranges, body, .. } => {
                ranges.iter().for_each(|s| add_sym(s, &mut syms));
                body_inputs(body, &mut bufs, &mut syms);
            }
            Kernel::Reduction { ranges, reduce, body, .. } => {
                ranges.iter().chain(reduce).for_each(|s| add_sym(s, &mut syms));
                body_inputs(body, &mut bufs, &mut syms);
            }
            Kernel::Matmul(m) => {
                for b in [m.a.buf, m.b.buf].into_iter().chain(m.bias) {
                    if !bufs.contains(&b) {
                        bufs.push(b)
                    }
                }
                for s in [&m.batch, &m.m, &m.n, &m.k, &m.a.offset, &m.b.offset]
                    .into_iter()
                    .chain(&m.a.strides)
                    .chain(&m.b.strides)
                {
                    add_sym(s, &mut syms);
                }
                add_sym(&SymExpr::mul([m.m.clone(), m.n.clone()]), &mut syms);
            }
            Kernel::Extern(call) => {
                for arg in &call.args {
                    match arg {
                        ExternArg::Buf(b) | ExternArg::Workspace(b) => {
                            if !bufs.contains(b) {
                                bufs.push(*b)
                            }
                        }
                        ExternArg::Bufs(bs) => {
                            for b in bs {
                                if !bufs.contains(b) {
                                    bufs.push(*b)
                                }
                            }
                        }
                        ExternArg::Size(s) => add_sym(s, &mut syms),
                        ExternArg::Sizes(ss) => ss.iter().for_each(|s| add_sym(s, &mut syms)),
                    }
                }
            }
        }
        (bufs, syms)
    }

    /// The loop the driver may split across threads (output dimension 0, or the batch of
    /// a matmul), with the work of one of its iterations (elements, times the reduction
    /// length; a matmul's multiply-adds count [`MACS_PER_STEP`] to the step, as they run
    /// that many to a vector instruction): every iteration writes its own part of `out`.
    pub fn split(&self) -> Option<(SymExpr, SymExpr)> {
        match self {
            Kernel::Pointwise { ranges, .. } | Kernel::Reduction { ranges, .. } if !ranges.is_empty() => {
                let reduce = match self {
                    Kernel::Reduction { reduce, .. } => reduce.as_slice(),
                    _ => &[],
                };
                Some((ranges[0].clone(), SymExpr::product(ranges[1..].iter().chain(reduce))))
            }
            Kernel::Matmul(m) => Some((
                m.batch.clone(),
                SymExpr::floor_div(SymExpr::product([&m.m, &m.n, &m.k]), SymExpr::Int(MACS_PER_STEP)),
            )),
            _ => None,
        }
    }

    /// What the kernel is, for messages and profiles: `pointwise`, `reduce.sum`, `matmul`,
    /// `extern __aotc_fft`.
    pub fn kind(&self) -> String {
        match self {
            Kernel::Pointwise { .. } => "pointwise".into(),
            Kernel::Reduction { op, .. } => format!("reduce.{}", format!("{op:?}").to_lowercase()),
            Kernel::Matmul(_) => "matmul".into(),
            Kernel::Extern(call) => format!("extern {}", call.name),
        }
    }

    /// Whether the kernel reads its own output (a GEMM accumulating onto it): that buffer
    /// must hold a value written by an earlier kernel.
    pub fn reads_out(&self) -> bool {
        match self {
            Kernel::Pointwise { out, body, .. } | Kernel::Reduction { out, body, .. } => {
                let mut reads = false;
                visit(body, &mut |e| {
                    if let ExprKind::Load { buf, .. } | ExprKind::LoadAt { buf, .. } = &e.kind {
                        reads |= buf == out
                    }
                });
                reads
            }
            Kernel::Matmul(m) => m.accumulate || m.a.buf == m.out || m.b.buf == m.out,
            Kernel::Extern(call) => call.args.iter().any(|a| match a {
                ExternArg::Buf(b) => *b == call.out,
                ExternArg::Bufs(bs) => bs.contains(&call.out),
                _ => false,
            }),
        }
    }

    pub fn out(&self) -> BufId {
        match self {
            Kernel::Pointwise { out, .. } | Kernel::Reduction { out, .. } => *out,
            Kernel::Matmul(m) => m.out,
            Kernel::Extern(call) => call.out,
        }
    }
}

#[derive(Default)]
pub struct Program {
    pub buffers: PrimaryMap<BufId, Buffer>,
    pub kernels: Vec<Kernel>,
    /// For each kernel, the graph nodes whose computation it holds: indices into `nodes`,
    /// ascending (see `Lowerer::materialize`).
    pub kernel_nodes: Vec<Vec<usize>>,
    /// The graph nodes lowered, in graph order.
    pub nodes: Vec<GraphNode>,
    /// Payloads of `BufKind::Weight` buffers (dense bytes), and initial values of state.
    pub weights: Vec<super::Payload>,
    /// What each checked index is ("node 'gather' (...): index along dimension 1"), for the
    /// run-time error; the `BufKind::IndexErrors` buffer records which one failed.
    pub index_sites: Vec<String>,
    pub index_errors: Option<BufId>,
    /// Symbols whose values the program computes (`tensor.item()`, `nonzero`'s row count),
    /// in binding order.
    pub data_symbols: Vec<DataBinding>,
    /// The program's loops (`while_loop`), each a span of the kernel list; nested ones lie
    /// inside the body of the loop around them.
    pub loops: Vec<LoopRegion>,
    /// Scratch buffers that live inside another one rather than in memory of their own
    /// (`passes::concat_in_place`), by buffer.
    pub placements: std::collections::BTreeMap<BufId, Placement>,
}

/// Where a scratch buffer lives: the bytes from `offset` on of scratch buffer `within`,
/// whose value holds it there (a part of a concatenation, written in place by its
/// producer). `within` has memory of its own (it is placed nowhere), and both sizes are
/// static.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub within: BufId,
    pub offset: u64,
}

impl Program {
    /// Removes kernel `i` (a pass folded or fused its work elsewhere), keeping the kernels'
    /// graph nodes and the data symbols' binding points in step; returns its graph nodes.
    pub fn remove_kernel(&mut self, i: usize) -> Vec<usize> {
        self.kernels.remove(i);
        let nodes = if i < self.kernel_nodes.len() { self.kernel_nodes.remove(i) } else { vec![] };
        self.kernel_positions_past(i).for_each(|b| *b -= 1);
        nodes
    }

    /// Inserts `kernel` before kernel `i`, in the same loop region as kernel `i`, with the
    /// graph nodes `nodes`; the data symbols' binding points and the loops' bounds past `i`
    /// move with the kernels.
    pub fn insert_kernel(&mut self, i: usize, kernel: Kernel, nodes: Vec<usize>) {
        self.kernels.insert(i, kernel);
        if i <= self.kernel_nodes.len() {
            self.kernel_nodes.insert(i, nodes);
        }
        self.kernel_positions_past(i).for_each(|b| *b += 1);
    }

    /// The positions in the kernel list held elsewhere (data symbols' binding points, the
    /// loops' bounds) that lie past kernel `i`: those that move when kernel `i` goes or a
    /// kernel comes before it.
    fn kernel_positions_past(&mut self, i: usize) -> impl Iterator<Item = &mut usize> {
        let boundaries = self.data_symbols.iter_mut().map(|d| &mut d.after);
        let loop_bounds = self.loops.iter_mut().flat_map(|l| [&mut l.cond, &mut l.body, &mut l.end]);
        boundaries.chain(loop_bounds).filter(move |b| **b > i)
    }
}

/// The elements (of `elem` bytes each) of the strided window `offset`, `sizes`, `strides`
/// (in elements) on `bytes`, in row-major order, or None when one lies outside `bytes` or
/// the arithmetic overflows: how compile-time work reads a view of a weight.
pub fn strided_elements(bytes: &[u8], elem: usize, offset: i64, sizes: &[usize], strides: &[i64]) -> Option<Vec<u8>> {
    let count = sizes.iter().try_fold(1usize, |a, &s| a.checked_mul(s))?;
    let mut out = Vec::with_capacity(count.checked_mul(elem)?);
    // Runs along the last dimension when its elements are adjacent (a weight's rows): one
    // copy each, rather than an index computation per element.
    let run = match (sizes.last(), strides.last()) {
        (Some(&len), Some(&1)) if len > 0 => len,
        _ => 1,
    };
    for first in (0..count).step_by(run) {
        let (mut rest, mut at) = (first, offset);
        for (&size, &stride) in sizes.iter().zip(strides).rev() {
            at = at.checked_add(i64::try_from(rest % size).ok()?.checked_mul(stride)?)?;
            rest /= size;
        }
        let i = usize::try_from(at).ok()?.checked_mul(elem)?;
        let len = run.checked_mul(elem)?;
        out.extend_from_slice(bytes.get(i..i.checked_add(len)?)?);
    }
    Some(out)
}

/// Symbol `sym` takes the int64 value of the one-element buffer `buf` once the first
/// `after` kernels have run; code that uses `sym` runs after that point.
#[derive(Clone, Debug)]
pub struct DataBinding {
    pub sym: SymId,
    pub buf: BufId,
    pub after: usize,
    /// The node that defines it, for messages.
    pub what: String,
}

/// A loop: kernels `cond..body` compute whether to go on into `flag` (a one-element int64,
/// 0 or 1), kernels `body..end` one iteration, which ends by copying the new values into
/// the loop's state; then the condition runs again. The driver runs each span as a stage
/// of its own, and the library follows the branches (`aotc_abi::manifest::Jump`).
#[derive(Clone, Debug)]
pub struct LoopRegion {
    pub cond: usize,
    pub body: usize,
    pub end: usize,
    pub flag: BufId,
}

impl Program {
    pub fn add_buffer(&mut self, name: impl Into<String>, dtype: DType, sizes: Vec<SymExpr>, kind: BufKind) -> BufId {
        self.buffers.push(Buffer { name: name.into(), dtype, sizes, kind })
    }

    /// A new checked-index site described by `what`: its number and the error record.
    pub fn index_site(&mut self, what: String) -> (usize, BufId) {
        let record = match self.index_errors {
            Some(b) => b,
            None => {
                let b = self.add_buffer("index_errors", DType::I64, vec![SymExpr::Int(3)], BufKind::IndexErrors);
                self.index_errors = Some(b);
                b
            }
        };
        self.index_sites.push(what);
        (self.index_sites.len() - 1, record)
    }
}

fn list(xs: &[SymExpr]) -> String {
    xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
}

/// The text IR: one line per buffer, one block per kernel.
impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (id, b) in self.buffers.iter() {
            let placed = self.placements.get(&id).map(|p| format!(" in {} at byte {}", p.within, p.offset));
            writeln!(
                f,
                "{id} = {:?}{} {}[{}]  ; {}",
                b.kind,
                placed.unwrap_or_default(),
                b.dtype,
                list(&b.sizes),
                b.name
            )?;
        }
        for (i, k) in self.kernels.iter().enumerate() {
            for d in self.data_symbols.iter().filter(|d| d.after == i) {
                writeln!(f, "bind s{} = {}[0]", d.sym, d.buf)?;
            }
            for (n, l) in self.loops.iter().enumerate() {
                if l.cond == i {
                    writeln!(f, "loop{n}: while {}[0] != 0 (computed next)", l.flag)?;
                }
                if l.body == i {
                    writeln!(f, "loop{n}: body")?;
                }
                if l.end == i {
                    writeln!(f, "loop{n}: end")?;
                }
            }
            let nodes = self
                .kernel_nodes
                .get(i)
                .map(|ns| ns.iter().map(|&n| self.nodes[n].name.as_str()).collect::<Vec<_>>().join(", "));
            writeln!(
                f,
                "; kernel {i}: {}",
                nodes.filter(|n| !n.is_empty()).unwrap_or_else(|| "(no graph node)".into())
            )?;
            match k {
                Kernel::Pointwise { out, ranges, body } => writeln!(f, "pointwise {out}[{}] = {body}", list(ranges))?,
                Kernel::Reduction { out, ranges, reduce, op, body } => {
                    writeln!(f, "reduce.{op:?} {out}[{}] over [{}] = {body}", list(ranges), list(reduce))?
                }
                Kernel::Matmul(m) => writeln!(
                    f,
                    "matmul {} [{}x{}x{}x{}] = {} * {}{:?} @ {}{}{}{}{}",
                    m.out,
                    m.batch,
                    m.m,
                    m.k,
                    m.n,
                    m.alpha,
                    m.a.buf,
                    m.a.strides,
                    m.b.buf,
                    if m.packed_b { " (packed)".to_string() } else { format!("{:?}", m.b.strides) },
                    if m.accumulate { " + out" } else { "" },
                    m.bias.map(|b| format!(" + {b}[j]")).unwrap_or_default(),
                    if m.activation == Activation::None { String::new() } else { format!(", then {:?}", m.activation) },
                )?,
                Kernel::Extern(call) => writeln!(f, "call {}({}, {:?})", call.name, call.out, call.args)?,
            }
        }
        for d in self.data_symbols.iter().filter(|d| d.after == self.kernels.len()) {
            writeln!(f, "bind s{} = {}[0]", d.sym, d.buf)?;
        }
        for (n, _) in self.loops.iter().enumerate().filter(|(_, l)| l.end == self.kernels.len()) {
            writeln!(f, "loop{n}: end")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::strided_elements;

    #[test]
    fn strided_elements_reads_views_in_row_major_order() {
        // A 3 x 4 matrix of one-byte elements 0..12.
        let bytes: Vec<u8> = (0..12).collect();
        assert_eq!(strided_elements(&bytes, 1, 0, &[3, 4], &[4, 1]), Some(bytes.clone()));
        assert_eq!(
            strided_elements(&bytes, 1, 0, &[4, 3], &[1, 4]),
            Some(vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]),
            "transposed"
        );
        assert_eq!(strided_elements(&bytes, 1, 5, &[2, 2], &[4, 1]), Some(vec![5, 6, 9, 10]), "a window");
        assert_eq!(strided_elements(&bytes, 1, 1, &[2, 3], &[0, 2]), Some(vec![1, 3, 5, 1, 3, 5]), "expanded, strided");
        assert_eq!(
            strided_elements(&bytes, 2, 1, &[2, 2], &[3, 1]),
            Some(vec![2, 3, 4, 5, 8, 9, 10, 11]),
            "two-byte elements"
        );
        assert_eq!(strided_elements(&bytes, 1, 9, &[2, 2], &[4, 1]), None, "past the end");
        assert_eq!(strided_elements(&bytes, 1, 0, &[0, 4], &[4, 1]), Some(vec![]));
        assert_eq!(strided_elements(&bytes, 1, 7, &[], &[]), Some(vec![7]), "a scalar");
    }
}
