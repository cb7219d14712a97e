//! Weights packed for the GEMM at compile time: a float32 matmul whose right operand is a
//! weight (a Linear layer's transposed weight, a constant), and a convolution whose weight
//! is its GEMM's left operand, read it in the panels of the support library's kernel
//! (`aotc_abi::gemm`), packed once at compile time instead of gathering and copying it on
//! every call (for a transposed weight, a strided gather of every element): a matmul's
//! operand as the weights are written out (`ir::payload::PackedMatrix`, never whole in
//! memory), a convolution's here. Weights that nothing reads any more are then dropped
//! from the library.

use crate::ir::payload::PackedMatrix;
use crate::ir::{BufId, BufKind, ExternArg, ExternCall, Kernel, Matmul, Payload, Program, StridedRef};
use crate::lower::Lowered;
use aotc_abi::conv::{self, Algorithm};
use aotc_abi::gemm::{MR, NR};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Packs the right operand of every float32 matmul that reads a weight with static sizes
/// and strides (one packed copy per window read), and the weight of every support-library
/// convolution that runs a GEMM on a constant weight.
pub fn prepack_weights(lowered: &mut Lowered) {
    let prog = &mut lowered.program;
    let mut packed: HashMap<(BufId, usize, [i64; 2], usize, usize), BufId> = HashMap::new();
    for i in 0..prog.kernels.len() {
        match &prog.kernels[i] {
            Kernel::Matmul(m) => {
                let Some(key) = packable(prog, m) else { continue };
                let id = match packed.get(&key) {
                    Some(&id) => id,
                    None => {
                        let (buf, offset, [rsb, csb], k, n) = key;
                        let BufKind::Weight(w) = prog.buffers[buf].kind else { continue };
                        let source = prog.weights[w].clone();
                        let Some(matrix) = PackedMatrix::new(source, offset, [rsb, csb], k, n) else { continue };
                        let id = add_packed(prog, buf, Payload::Packed(Arc::new(matrix)));
                        packed.insert(key, id);
                        id
                    }
                };
                let Kernel::Matmul(m) = &mut prog.kernels[i] else { unreachable!() };
                m.b = StridedRef { buf: id, offset: SymExpr::Int(0), strides: vec![SymExpr::Int(0); 3] };
                m.packed_b = true;
            }
            Kernel::Extern(call) if call.name == conv::SYMBOL => {
                let Some((weight, data, form)) = pack_conv_weight(prog, call) else { continue };
                let id = add_packed(prog, weight, payload(&data));
                let Kernel::Extern(call) = &mut prog.kernels[i] else { unreachable!() };
                call.args[CONV_WEIGHT_ARG] = ExternArg::Buf(id);
                if let ExternArg::Sizes(geometry) = &mut call.args[CONV_GEOMETRY_ARG] {
                    geometry[WEIGHT_FORM] = SymExpr::Int(form.code());
                }
            }
            _ => {}
        }
    }
    drop_unread_weights(lowered);
}

/// Empties the payload of every weight no kernel and no output reads: those read only
/// through their packed copies, and those a compile-time fold replaced (a convolution's
/// weight and the batch norm folded into it).
fn drop_unread_weights(lowered: &mut Lowered) {
    let prog = &mut lowered.program;
    let mut read: HashSet<BufId> = prog.kernels.iter().flat_map(|k| k.inputs().0).collect();
    read.extend(lowered.outputs.iter().map(|(_, b)| *b));
    read.extend(lowered.buffers.iter().map(|b| b.buf));
    for (id, buf) in prog.buffers.iter() {
        if let (BufKind::Weight(w), false) = (&buf.kind, read.contains(&id)) {
            prog.weights[*w] = Vec::new().into();
        }
    }
}

/// A new float32 weight holding `data`, the packed form of `source`.
fn add_packed(prog: &mut Program, source: BufId, data: Payload) -> BufId {
    let name = format!("{}.packed", prog.buffers[source].name);
    let len = SymExpr::Int((data.len() / 4) as i64);
    let w = prog.weights.len();
    prog.weights.push(data);
    prog.add_buffer(name, DType::F32, vec![len], BufKind::Weight(w))
}

use aotc_abi::conv::{
    winograd, WeightForm, ARG_GEOMETRY as CONV_GEOMETRY_ARG, ARG_WEIGHT as CONV_WEIGHT_ARG, POOL, WEIGHT_FORM,
};

/// A convolution's weight buffer and its packed form, when the weight is a constant with
/// static sizes that a GEMM reads: Winograd's 16 transformed matrices where that
/// algorithm fits and pays (`aotc_abi::conv::winograd`); for planes of few positions
/// (`conv::positions_as_rows`), not pooled, each group's transpose packed as a GEMM's right
/// operand (the library runs the GEMM transposed); else each group's `[O / G, depth]`
/// matrix packed as a left operand; groups one after another.
fn pack_conv_weight(prog: &Program, call: &ExternCall) -> Option<(BufId, Vec<f32>, WeightForm)> {
    let (ExternArg::Buf(weight), ExternArg::Sizes(geometry)) =
        (call.args.get(CONV_WEIGHT_ARG)?, call.args.get(CONV_GEOMETRY_ARG)?)
    else {
        return None;
    };
    let BufKind::Weight(w) = prog.buffers[*weight].kind else { return None };
    if geometry.len() != aotc_abi::conv::GEOMETRY_LEN || geometry[WEIGHT_FORM].as_int() != Some(WeightForm::Rows.code())
    {
        return None;
    }
    let at = |i: usize| geometry[i].as_int().and_then(|v| usize::try_from(v).ok());
    let (channels, out_channels, groups) = (at(1)?, at(4)?, at(15)?);
    let (kernel, stride, padding, dilation) =
        ([at(5)?, at(6)?], [at(9)?, at(10)?], [at(11)?, at(12)?], [at(13)?, at(14)?]);
    if groups == 0 || channels % groups != 0 || out_channels % groups != 0 {
        return None;
    }
    let (group_channels, group_out) = (channels / groups, out_channels / groups);
    if Algorithm::choose(group_channels, groups, kernel, stride, padding) == Algorithm::Depthwise {
        return None;
    }
    let depth = group_channels.checked_mul(kernel[0])?.checked_mul(kernel[1])?;
    let bytes = prog.weights[w].bytes().ok()?;
    if Some(bytes.len()) != out_channels.checked_mul(depth)?.checked_mul(4) {
        return None;
    }
    let rows = floats(&bytes);
    if winograd::fits(kernel, stride, dilation, groups) && winograd::pays(channels, out_channels, [at(7), at(8)]) {
        return Some((*weight, winograd::transform_weight(&rows, out_channels, channels)?, WeightForm::Winograd));
    }
    let pooled = geometry[POOL].as_int() != Some(0);
    let positions = at(7).zip(at(8)).and_then(|(h, w)| h.checked_mul(w));
    let (form, width) = match positions {
        Some(n) if !pooled && conv::positions_as_rows(n) => (WeightForm::ColumnPanels, NR),
        _ => (WeightForm::Panels, MR),
    };
    // Group g's element (depth p, output channel o) either way: a left operand's rows are
    // output channels, a right operand's columns.
    let mut data = Vec::new();
    for group in 0..groups {
        let first = group * group_out * depth;
        data.extend(aotc_abi::gemm::pack(depth, group_out, width, |p, o| rows[first + o * depth + p])?);
    }
    Some((*weight, data, form))
}

/// Repacks the weight of convolution call `i` (one group, packed by [`pack_conv_weight`]
/// as a left operand, [`WeightForm::Panels`]) as the transposed GEMM's right operand
/// ([`WeightForm::ColumnPanels`]), for a pass that learns later that the transposed GEMM
/// runs it faster (`gate`). The packed weight is the call's own (one per call), so it is
/// replaced in place. Nothing changes unless the weight is such, and read by call `i` alone.
pub(super) fn repack_conv_weight_as_columns(prog: &mut Program, i: usize) {
    let Kernel::Extern(call) = &prog.kernels[i] else { return };
    let (ExternArg::Sizes(geometry), ExternArg::Buf(weight)) =
        (&call.args[CONV_GEOMETRY_ARG], &call.args[CONV_WEIGHT_ARG])
    else {
        return;
    };
    let int = |at: usize| geometry[at].as_int().and_then(|v| usize::try_from(v).ok());
    let (Some(channels), Some(outputs), Some(groups)) = (int(1), int(4), int(15)) else { return };
    let panels = geometry[WEIGHT_FORM].as_int() == Some(WeightForm::Panels.code());
    let weight = *weight;
    let BufKind::Weight(w) = prog.buffers[weight].kind else { return };
    let reads = prog.kernels.iter().filter(|k| k.inputs().0.contains(&weight)).count();
    let Some(padded) = aotc_abi::gemm::padded(outputs, MR) else { return };
    let Ok(bytes) = prog.weights[w].bytes() else { return };
    if !panels
        || groups != 1
        || reads != 1
        || Some(bytes.len()) != channels.checked_mul(padded).and_then(|n| n.checked_mul(4))
    {
        return;
    }
    let rows = floats(&bytes);
    let at = |p: usize, o: usize| aotc_abi::gemm::packed_index(channels, padded, MR, p, o);
    let Some(columns) = aotc_abi::gemm::pack(channels, outputs, NR, |p, o| rows[at(p, o)]) else { return };
    prog.buffers[weight].sizes = vec![SymExpr::Int(columns.len() as i64)];
    prog.weights[w] = payload(&columns);
    if let Kernel::Extern(call) = &mut prog.kernels[i] {
        if let ExternArg::Sizes(geometry) = &mut call.args[CONV_GEOMETRY_ARG] {
            geometry[WEIGHT_FORM] = SymExpr::Int(WeightForm::ColumnPanels.code());
        }
    }
}

/// The float32 values of a weight's little-endian bytes.
fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// A weight payload holding `data`.
fn payload(data: &[f32]) -> Payload {
    data.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into()
}

/// The weight window a matmul reads as its right operand, when it can be packed: float32,
/// one operand for every batch, every size and stride known.
fn packable(prog: &Program, m: &Matmul) -> Option<(BufId, usize, [i64; 2], usize, usize)> {
    if m.dtype != DType::F32 || m.packed_b || !matches!(prog.buffers[m.b.buf].kind, BufKind::Weight(_)) {
        return None;
    }
    let int = |s: &SymExpr| s.as_int();
    let batch_stride = int(&m.b.strides[0])?;
    if batch_stride != 0 && int(&m.batch)? != 1 {
        return None;
    }
    let (k, n) = (usize::try_from(int(&m.k)?).ok()?, usize::try_from(int(&m.n)?).ok()?);
    Some((m.b.buf, usize::try_from(int(&m.b.offset)?).ok()?, [int(&m.b.strides[1])?, int(&m.b.strides[2])?], k, n))
}
