//! The launch plan a CUDA library carries (`aotc_abi::cuda::CudaPlan`): the module's text
//! and, per kernel, its entry, grid, parameters as slots and sizes, and for a matmul the
//! same product as a cuBLAS call.

use super::{Module, Param, PtxKernel, Work};
use crate::ir::{Kernel, Program, StridedRef};
use crate::passes::plan::Plan;
use aotc_abi::cuda::{CudaGemm, CudaKernel, CudaParam, CudaPlan, GemmOperand};
use aotc_abi::sym::SymExpr;

/// At most this many blocks per launch: enough to fill any GPU many times over; the
/// kernels' grid-stride loops cover the rest of the work.
const MAX_BLOCKS: i64 = 1 << 16;

fn blocks(work: &Work, block: u32) -> SymExpr {
    let n = match work {
        Work::Threads(n) => {
            SymExpr::floor_div(SymExpr::add([n.clone(), SymExpr::Int(block as i64 - 1)]), SymExpr::Int(block as i64))
        }
        Work::Ctas(n) => n.clone(),
    };
    SymExpr::min(n, SymExpr::Int(MAX_BLOCKS))
}

fn operand(plan: &Plan, r: &StridedRef) -> Option<GemmOperand> {
    let [b, rows, cols] = <[SymExpr; 3]>::try_from(r.strides.clone()).ok()?;
    Some(GemmOperand { slot: plan.slot(r.buf), offset: r.offset.clone(), strides: [b, rows, cols] })
}

/// The plan of `program` from its PTX `module` and its slot `plan`; an extern kernel (the
/// caller refused those first) is an error.
pub fn launch_plan(program: &Program, module: &Module, plan: &Plan) -> Result<CudaPlan, String> {
    let kernels = module
        .kernels
        .iter()
        .zip(&program.kernels)
        .enumerate()
        .map(|(i, (k, ir))| match k {
            PtxKernel::Entry { entry, params, block, work, .. } => Ok(CudaKernel {
                entry: entry.clone(),
                block: *block,
                grid: [blocks(work, *block), SymExpr::Int(1), SymExpr::Int(1)],
                shared_bytes: 0,
                params: params
                    .iter()
                    .map(|p| match p {
                        Param::Buffer(b) => CudaParam::Slot(plan.slot(*b)),
                        Param::Size(e) => CudaParam::Size(e.clone()),
                    })
                    .collect(),
                gemm: match ir {
                    Kernel::Matmul(m) if !m.packed_b => (|| {
                        Some(CudaGemm {
                            dtype: m.dtype,
                            batch: m.batch.clone(),
                            m: m.m.clone(),
                            n: m.n.clone(),
                            k: m.k.clone(),
                            a: operand(plan, &m.a)?,
                            b: operand(plan, &m.b)?,
                            out: plan.slot(m.out),
                            alpha: m.alpha,
                            accumulate: m.accumulate,
                        })
                    })(),
                    _ => None,
                },
            }),
            PtxKernel::Extern { name } => Err(format!("kernel {i}: the extern call {name} has no CUDA form")),
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(CudaPlan { ptx: module.text.clone(), kernels })
}
