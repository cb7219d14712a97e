//! A program compiled for CUDA (`aotc compile --device cuda`): one PTX module and, per
//! kernel of the program, how to launch it. The compiler writes it into the manifest; the
//! support library runs it through the driver, and the tests run it through a PTX
//! interpreter: both turn it into launches with [`CudaKernel::launch`], so the two agree
//! on grids and parameters by construction.
//!
//! Memory is the CPU program's slot table, on the device: every slot (weight, state,
//! input, scratch) is one device pointer, and a kernel's parameters name slots and sizes.

use crate::sym::{EvalError, SymExpr};
use serde::{Deserialize, Serialize};

/// The PTX module and the launches of the program's kernels, in program order.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CudaPlan {
    /// The whole module, `.version`/`.target` header included.
    pub ptx: String,
    pub kernels: Vec<CudaKernel>,
}

/// One kernel of the program: a `.entry` of the module.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CudaKernel {
    pub entry: String,
    /// Threads per block (x only).
    pub block: u32,
    /// Blocks in x, y and z, as sizes of the call: the kernel covers any work beyond
    /// them with grid-stride loops, so they only shape the parallelism. A launch with a
    /// zero dimension is skipped (the kernel has no work).
    pub grid: [SymExpr; 3],
    /// Bytes of dynamic shared memory (static shared memory is in the PTX).
    pub shared_bytes: u32,
    pub params: Vec<CudaParam>,
    /// For a matmul: the same product as a cuBLAS call, used when cuBLAS is there and the
    /// operands' layout suits it; the entry runs otherwise.
    #[serde(default)]
    pub gemm: Option<CudaGemm>,
}

/// `out[b] = alpha * a[b] @ b[b] (+ out[b] when accumulating)`, row-major, as
/// `ir::Matmul` has it: a is [batch, m, k], b is [batch, k, n] (element strides, offsets
/// in elements), out is contiguous [batch, m, n].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CudaGemm {
    pub dtype: crate::DType,
    pub batch: SymExpr,
    pub m: SymExpr,
    pub n: SymExpr,
    pub k: SymExpr,
    pub a: GemmOperand,
    pub b: GemmOperand,
    pub out: usize,
    pub alpha: f64,
    pub accumulate: bool,
}

/// A strided operand of a [`CudaGemm`]: slot, element offset, strides of [batch, rows, cols].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GemmOperand {
    pub slot: usize,
    pub offset: SymExpr,
    pub strides: [SymExpr; 3],
}

/// A kernel parameter, in `.param` order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CudaParam {
    /// The device address of slot `.0` (`.param .u64`).
    Slot(usize),
    /// A size of the call (`.param .s64`).
    Size(SymExpr),
}

/// A parameter's value for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamValue {
    Pointer(u64),
    Int(i64),
}

/// One launch: what `cuLaunchKernel` takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub grid: [u32; 3],
    pub block: u32,
    pub shared_bytes: u32,
    pub params: Vec<ParamValue>,
}

impl CudaKernel {
    /// The launch for a call whose symbols are `syms` and whose slots live at `slots`
    /// (device addresses); `None` when the grid is empty.
    pub fn launch(&self, syms: &[Option<i64>], slots: &[u64]) -> Result<Option<Launch>, String> {
        let eval = |e: &SymExpr| e.eval(syms).map_err(|x: EvalError| format!("kernel {}: {e}: {x}", self.entry));
        let mut grid = [0u32; 3];
        for (g, e) in grid.iter_mut().zip(&self.grid) {
            let n = eval(e)?;
            *g = u32::try_from(n)
                .map_err(|_| format!("kernel {}: a grid of {n} blocks ({e}) is out of range", self.entry))?;
        }
        if grid.contains(&0) {
            return Ok(None);
        }
        let params = self
            .params
            .iter()
            .map(|p| match p {
                CudaParam::Slot(s) => slots
                    .get(*s)
                    .map(|&a| ParamValue::Pointer(a))
                    .ok_or_else(|| format!("kernel {}: no slot {s}", self.entry)),
                CudaParam::Size(e) => eval(e).map(ParamValue::Int),
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Some(Launch { grid, block: self.block, shared_bytes: self.shared_bytes, params }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_evaluates_grid_and_parameters_and_skips_empty_grids() {
        let n = SymExpr::Sym(0);
        let k = CudaKernel {
            entry: "k0".into(),
            block: 256,
            grid: [
                SymExpr::floor_div(SymExpr::add([n.clone(), SymExpr::Int(255)]), SymExpr::Int(256)),
                SymExpr::Int(1),
                SymExpr::Int(1),
            ],
            shared_bytes: 0,
            params: vec![CudaParam::Slot(1), CudaParam::Size(n)],
            gemm: None,
        };
        let l = k.launch(&[Some(1000)], &[0x10, 0x20]).unwrap().unwrap();
        assert_eq!(
            l,
            Launch {
                grid: [4, 1, 1],
                block: 256,
                shared_bytes: 0,
                params: vec![ParamValue::Pointer(0x20), ParamValue::Int(1000)]
            }
        );
        assert_eq!(k.launch(&[Some(0)], &[0x10, 0x20]).unwrap(), None);
        assert!(k.launch(&[None], &[0x10, 0x20]).unwrap_err().contains("k0"));
    }
}
