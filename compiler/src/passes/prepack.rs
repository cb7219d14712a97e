//! Weights packed for the GEMM at compile time: a float32 matmul whose right operand is a
//! weight (a Linear layer's transposed weight, a constant) reads it in the panels of the
//! support library's kernel (`aotc_abi::gemm`), written here once, instead of gathering
//! and copying it on every call (for a transposed weight, a strided gather of every
//! element). A weight that nothing else reads is then dropped from the library.

use crate::ir::{BufId, BufKind, Kernel, Matmul, Program};
use crate::lower::Lowered;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::{HashMap, HashSet};

/// Packs the right operand of every float32 matmul that reads a weight with static sizes
/// and strides, sharing one packed copy between matmuls that read the same window.
pub fn prepack_weights(lowered: &mut Lowered) {
    let prog = &mut lowered.program;
    let mut packed: HashMap<(BufId, usize, [i64; 2], usize, usize), BufId> = HashMap::new();
    let mut sources = HashSet::new();
    for i in 0..prog.kernels.len() {
        let Kernel::Matmul(m) = &prog.kernels[i] else { continue };
        let Some(key) = packable(prog, m) else { continue };
        let (buf, offset, [rsb, csb], k, n) = key;
        let id = match packed.get(&key) {
            Some(&id) => id,
            None => {
                let BufKind::Weight(w) = prog.buffers[buf].kind else { continue };
                let Some(data) = pack(&prog.weights[w], offset, rsb, csb, k, n) else { continue };
                let name = format!("{}.packed", prog.buffers[buf].name);
                let bytes = data.iter().flat_map(|x| x.to_le_bytes()).collect();
                let w = prog.weights.len();
                prog.weights.push(bytes);
                let id = prog.add_buffer(&name, DType::F32, vec![SymExpr::Int((data.len()) as i64)], BufKind::Weight(w));
                packed.insert(key, id);
                id
            }
        };
        sources.insert(buf);
        let Kernel::Matmul(m) = &mut prog.kernels[i] else { unreachable!() };
        m.b.buf = id;
        m.b.offset = SymExpr::Int(0);
        m.b.strides = vec![SymExpr::Int(0); 3];
        m.packed_b = true;
    }
    // Weights read only through their packed copies need not be in the library.
    let mut read: HashSet<BufId> = prog.kernels.iter().flat_map(|k| k.inputs().0).collect();
    read.extend(lowered.outputs.iter().map(|(_, b)| *b));
    read.extend(lowered.buffers.iter().map(|b| b.buf));
    for buf in sources.into_iter().filter(|b| !read.contains(b)) {
        if let BufKind::Weight(w) = prog.buffers[buf].kind {
            prog.weights[w] = Vec::new();
        }
    }
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

/// The packed operand, or None when the window does not lie inside the weight's bytes.
fn pack(bytes: &[u8], offset: usize, rsb: i64, csb: i64, k: usize, n: usize) -> Option<Vec<f32>> {
    let len = bytes.len() / 4;
    // The window's extreme elements (strides may be negative) must lie inside the weight.
    let last = |size: usize, stride: i64| -> Option<(i64, i64)> {
        let span = i64::try_from(size.checked_sub(1)?).ok()?.checked_mul(stride)?;
        Some((span.min(0), span.max(0)))
    };
    if k > 0 && n > 0 {
        let ((lo_r, hi_r), (lo_c, hi_c)) = (last(k, rsb)?, last(n, csb)?);
        let base = i64::try_from(offset).ok()?;
        let (lo, hi) = (base.checked_add(lo_r)?.checked_add(lo_c)?, base.checked_add(hi_r)?.checked_add(hi_c)?);
        if lo < 0 || hi >= i64::try_from(len).ok()? {
            return None;
        }
    }
    let at = |p: usize, j: usize| {
        let i = (offset as i64 + p as i64 * rsb + j as i64 * csb) as usize * 4;
        f32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]])
    };
    aotc_abi::gemm::pack(k, n, at)
}
