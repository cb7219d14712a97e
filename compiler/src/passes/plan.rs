//! The memory and interface plan: slots, weights layout, dims table, manifest.

use crate::error::{Error, Result};
use crate::ir::{BufId, BufKind, Kernel, LoopRegion, Program};
use crate::lower::{Lowered, LoweredInput};
use aotc_abi::manifest::{
    BufferSpec, DataSymbol, GraphNode, IndexErrors, InputSpec, Jump, KernelInfo, Manifest, Slot, TensorSpec,
};
use aotc_abi::sym::SymExpr;
use aotc_abi::weights::{WeightEntry, WeightsTable};
use aotc_abi::DType;
use std::collections::{HashMap, HashSet};

/// Weights are 64-byte aligned inside the blob (and the blob itself is 64-byte aligned).
pub const WEIGHT_ALIGN: usize = aotc_abi::weights::ALIGN;

pub struct Plan {
    pub manifest: Manifest,
    /// Where each of the program's payloads starts in the weights blob, which holds them
    /// in order, each 64-byte aligned, zeros between them; written by `crate::weights_out`.
    pub weight_offsets: Vec<u64>,
    /// The blob's length.
    pub weights_bytes: u64,
    /// Position in the dims table of each symbolic (non-constant) size the kernels use.
    pub dim_index: HashMap<SymExpr, usize>,
    /// The kernels of each stage: stage `s` runs kernels `stage_ends[s-1]..stage_ends[s]`.
    pub stage_ends: Vec<usize>,
}

impl Plan {
    /// The slot of a buffer: slots are numbered like buffers.
    pub fn slot(&self, b: BufId) -> usize {
        cranelift_codegen::entity::EntityRef::index(b)
    }
}

pub fn plan(l: &Lowered, source: &str) -> Result<Plan> {
    let p = &l.program;
    let mut weights_bytes = 0u64;
    let mut offsets = Vec::with_capacity(p.weights.len());
    for w in &p.weights {
        weights_bytes = weights_bytes.next_multiple_of(WEIGHT_ALIGN as u64);
        offsets.push(weights_bytes);
        weights_bytes += w.len() as u64;
    }
    let (table, entry_of) = weights_table(p, &offsets, weights_bytes)?;
    let state_index = |b: BufId| l.buffers.iter().position(|x| x.buf == b).expect("state buffers are listed");
    // Scratch that a pass left unused (a GEMM now writing its activation's result
    // directly) gets no memory (what is placed in a buffer keeps it in use).
    let used: HashSet<BufId> = p
        .kernels
        .iter()
        .flat_map(|k| k.inputs().0)
        .chain(l.outputs.iter().map(|(_, b)| *b))
        .chain(p.placements.values().map(|at| at.within))
        .collect();
    let slots = p
        .buffers
        .iter()
        .map(|(id, b)| match b.kind {
            BufKind::Scratch if p.placements.contains_key(&id) => {
                let at = p.placements[&id];
                Slot::Alias { within: cranelift_codegen::entity::EntityRef::index(at.within), offset: at.offset }
            }
            BufKind::Scratch if !used.contains(&id) => Slot::Scratch { bytes: SymExpr::Int(0) },
            BufKind::Weight(w) => Slot::Weight { offset: offsets[w], entry: entry_of[w] },
            BufKind::State(_) => Slot::Buffer(state_index(id)),
            BufKind::Input(i) => Slot::Input(i),
            BufKind::Scratch | BufKind::IndexErrors => Slot::Scratch { bytes: b.bytes() },
        })
        .collect();

    let mut dims = Vec::new();
    let mut dim_index = HashMap::new();
    for k in &p.kernels {
        let split = k.split().map(|(extent, work)| vec![extent, work]).unwrap_or_default();
        for e in k.inputs().1.into_iter().chain(split.into_iter().filter(|e| !e.is_static())) {
            if !dim_index.contains_key(&e) {
                dim_index.insert(e.clone(), dims.len());
                dims.push(e);
            }
        }
    }

    let index = |b: BufId| cranelift_codegen::entity::EntityRef::index(b);
    let manifest = Manifest {
        abi_version: aotc_abi::ABI_VERSION,
        source: source.into(),
        in_spec: l.in_spec.clone(),
        out_spec: l.out_spec.clone(),
        namedtuple_fields: l.namedtuple_fields.clone(),
        symbols: l.symbols.clone(),
        inputs: l
            .inputs
            .iter()
            .map(|i| match i {
                LoweredInput::Tensor { name, dtype, sizes, buf } => InputSpec::Tensor(TensorSpec {
                    name: name.clone(),
                    dtype: *dtype,
                    sizes: sizes.clone(),
                    slot: index(*buf),
                    kind: aotc_abi::value_kind::TENSOR,
                }),
                LoweredInput::Constant { name, value } => {
                    InputSpec::Constant { name: name.clone(), value: value.clone() }
                }
            })
            .collect(),
        outputs: l
            .outputs
            .iter()
            .enumerate()
            .map(|(i, (name, b))| {
                let buf = &p.buffers[*b];
                let kind = l.output_kinds.get(i).copied().unwrap_or(aotc_abi::value_kind::TENSOR);
                TensorSpec { name: name.clone(), dtype: buf.dtype, sizes: buf.sizes.clone(), slot: index(*b), kind }
            })
            .collect(),
        buffers: l
            .buffers
            .iter()
            .map(|lb| {
                let b = &p.buffers[lb.buf];
                let BufKind::State(w) = b.kind else { unreachable!("state buffers have BufKind::State") };
                BufferSpec {
                    name: lb.fqn.clone(),
                    dtype: b.dtype,
                    sizes: b.sizes.iter().map(|s| s.as_int().expect("buffers have static sizes")).collect(),
                    init_offset: offsets[w],
                    init_entry: entry_of[w],
                    slot: index(lb.buf),
                }
            })
            .collect(),
        slots,
        dims,
        buffer_mutations: l.buffer_mutations.iter().map(|(b, i)| (index(*b), *i)).collect(),
        input_mutations: l.input_mutations.iter().map(|(b, i)| (index(*b), *i)).collect(),
        guards: l.guards.clone(),
        index_errors: p.index_errors.map(|b| IndexErrors { slot: index(b), sites: p.index_sites.clone() }),
        data_symbols: vec![],
        jumps: vec![],
        arena: Default::default(),
        flops: SymExpr::add(p.kernels.iter().filter_map(|k| match k {
            Kernel::Matmul(m) => {
                Some(SymExpr::mul([SymExpr::Int(2), m.batch.clone(), m.m.clone(), m.n.clone(), m.k.clone()]))
            }
            Kernel::Extern(call) => Some(call.flops.clone()),
            _ => None,
        })),
        nodes: vec![],
        kernels: vec![],
        cuda: None,
        weights: table,
        // Set by the compile driver, which knows the target.
        cpu: Default::default(),
    };
    let (stage_ends, data_symbols, jumps) = stages(p)?;
    let (nodes, kernels) = kernel_infos(p, &stage_ends);
    let arena = super::arena::plan_arena(l, &data_symbols)?;
    let manifest = Manifest { data_symbols, jumps, nodes, kernels, arena, ..manifest };
    check_stages(p, &manifest, &stage_ends)?;
    Ok(Plan { manifest, weight_offsets: offsets, weights_bytes, dim_index, stage_ends })
}

/// The weights table (its content id left for the writer): one entry per non-empty
/// payload, named by its buffer (an FQN, or the compiler's name for a packed or folded
/// weight; a repeated name gets `#<n>`), and each payload's entry.
fn weights_table(p: &Program, offsets: &[u64], bytes: u64) -> Result<(WeightsTable, Vec<Option<usize>>)> {
    let mut owner: Vec<Option<BufId>> = vec![None; p.weights.len()];
    for (id, b) in p.buffers.iter() {
        if let BufKind::Weight(w) | BufKind::State(w) = b.kind {
            owner[w] = Some(id);
        }
    }
    let mut entries = vec![];
    let mut entry_of = vec![None; p.weights.len()];
    let mut names = std::collections::HashSet::new();
    for (w, payload) in p.weights.iter().enumerate() {
        let Some(id) = owner[w].filter(|_| !payload.is_empty()) else { continue };
        let b = &p.buffers[id];
        let sizes = b
            .sizes
            .iter()
            .map(|s| s.as_int())
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| internal(format!("weight '{}' has symbolic sizes", b.name)))?;
        if aotc_abi::layout::byte_len(&sizes, b.dtype.size()) != Some(payload.len()) {
            return Err(internal(format!(
                "weight '{}' holds {} bytes, not those of {}{sizes:?}",
                b.name,
                payload.len(),
                b.dtype
            )));
        }
        let mut name = b.name.clone();
        let mut n = 1;
        while !names.insert(name.clone()) {
            n += 1;
            name = format!("{}#{n}", b.name);
        }
        entry_of[w] = Some(entries.len());
        entries.push(WeightEntry { name, dtype: b.dtype, sizes, offset: offsets[w], bytes: payload.len() as u64 });
    }
    Ok((WeightsTable::unhashed(entries, bytes), entry_of))
}

/// Cuts the kernel list after each kernel whose result binds a data symbol and around
/// each loop's condition and body, and gives the loops' branches between those stages.
fn stages(p: &Program) -> Result<(Vec<usize>, Vec<DataSymbol>, Vec<Jump>)> {
    check_loops(p)?;
    let cuts = p.loops.iter().flat_map(|l| [l.cond, l.body, l.end]);
    let mut ends: Vec<usize> = p.data_symbols.iter().map(|d| d.after).chain(cuts).collect();
    ends.sort_unstable();
    ends.dedup();
    let ending_at = |b: usize| ends.iter().position(|&e| e == b).expect("every cut ends a stage");
    let data_symbols = p
        .data_symbols
        .iter()
        .map(|d| {
            let bytes = p.buffers[d.buf].bytes();
            if p.buffers[d.buf].dtype != DType::I64 || bytes != SymExpr::Int(8) {
                return Err(internal(format!(
                    "data symbol s{} is read from {}, not a one-element int64 buffer",
                    d.sym, d.buf
                )));
            }
            Ok(DataSymbol {
                sym: d.sym,
                slot: cranelift_codegen::entity::EntityRef::index(d.buf),
                stage: ending_at(d.after),
                what: d.what.clone(),
            })
        })
        .collect::<Result<_>>()?;
    let jumps = p
        .loops
        .iter()
        .flat_map(|l| {
            let flag = cranelift_codegen::entity::EntityRef::index(l.flag);
            [
                Jump { after: ending_at(l.body), to: ending_at(l.end) + 1, unless: Some(flag) },
                Jump { after: ending_at(l.end), to: ending_at(l.cond) + 1, unless: None },
            ]
        })
        .collect();
    // The last stage runs what follows the last cut (possibly nothing).
    ends.push(p.kernels.len());
    Ok((ends, data_symbols, jumps))
}

/// Each loop: a condition and a body of at least one kernel each, within the program,
/// nested in or apart from every other, binding no data symbol (a size computed anew on
/// every iteration), its flag a one-element int64.
fn check_loops(p: &Program) -> Result<()> {
    for (n, l) in p.loops.iter().enumerate() {
        if !(l.cond < l.body && l.body < l.end && l.end <= p.kernels.len()) {
            return Err(internal(format!("loop {n} spans kernels {}..{}..{}", l.cond, l.body, l.end)));
        }
        if p.buffers[l.flag].dtype != DType::I64 || p.buffers[l.flag].bytes() != SymExpr::Int(8) {
            return Err(internal(format!("loop {n} tests {}, not a one-element int64", l.flag)));
        }
        if let Some(d) = p.data_symbols.iter().find(|d| l.cond < d.after && d.after <= l.end) {
            return Err(internal(format!("loop {n} binds s{} ({}) inside", d.sym, d.what)));
        }
        let overlaps = |o: &LoopRegion| o.cond < l.end && l.cond < o.end;
        let nested = |o: &LoopRegion| (l.body <= o.cond && o.end <= l.end) || (o.body <= l.cond && l.end <= o.end);
        if let Some(m) = p.loops.iter().enumerate().position(|(m, o)| m != n && overlaps(o) && !nested(o)) {
            return Err(internal(format!("loops {n} and {m} overlap without one inside the other's body")));
        }
    }
    Ok(())
}

/// What profiles report of each kernel, and the graph nodes they name (only those: views
/// of memory compute nothing), in graph order.
fn kernel_infos(p: &Program, stage_ends: &[usize]) -> (Vec<GraphNode>, Vec<KernelInfo>) {
    let mut renumbered: Vec<Option<usize>> = vec![None; p.nodes.len()];
    p.kernel_nodes.iter().flatten().for_each(|&n| renumbered[n] = Some(0));
    let mut nodes = vec![];
    for (n, node) in p.nodes.iter().enumerate() {
        if let Some(i) = &mut renumbered[n] {
            *i = nodes.len();
            nodes.push(node.clone());
        }
    }
    let kernels = p
        .kernels
        .iter()
        .enumerate()
        .map(|(i, k)| KernelInfo {
            kind: k.kind(),
            writes: p.buffers[k.out()].name.clone(),
            nodes: p.kernel_nodes.get(i).into_iter().flatten().filter_map(|&n| renumbered[n]).collect(),
            stage: stage_ends.partition_point(|&end| end <= i),
        })
        .collect();
    (nodes, kernels)
}

/// Every size a kernel of stage `s` reads (its loop bounds, offsets, and the sizes of the
/// buffers it touches, which the library allocates per stage) must be known by stage `s`.
fn check_stages(p: &Program, m: &Manifest, stage_ends: &[usize]) -> Result<()> {
    let mut start = 0;
    for (s, &end) in stage_ends.iter().enumerate() {
        for (i, k) in p.kernels.iter().enumerate().take(end).skip(start) {
            let (bufs, syms) = k.inputs();
            let sizes = bufs.iter().map(|&b| p.buffers[b].bytes());
            if let Some(e) = syms.into_iter().chain(sizes).find(|e| m.stage_of(e) > s) {
                return Err(internal(format!(
                    "kernel {i} (writing {}) uses {e} before the data it depends on is computed",
                    p.buffers[k.out()].name
                )));
            }
        }
        start = end;
    }
    Ok(())
}

fn internal(message: String) -> Error {
    Error::Codegen(format!("internal error in the stage plan: {message}"))
}
