//! col2im (torch.nn.functional.fold): sums the columns of sliding blocks back into an
//! image. Written as a gather: an output pixel sums, over the kernel offsets, the column
//! entry of the block that covered it with that offset, if a block did (the block
//! position must be a whole number of strides inside the grid of blocks).

use super::super::pad::{int, int_const, var};
use super::super::reduction::reduce;
use super::R;
use crate::ir::expr::{self, binary, Affine, E};
use crate::ir::{Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;

/// One spatial axis of the fold.
struct FoldAxis {
    size: SymExpr,
    dilation: i64,
    padding: i64,
    stride: i64,
    /// Block positions along the axis.
    blocks: SymExpr,
}

impl FoldAxis {
    /// The block covering output position `o` with kernel offset `k` (loop variables),
    /// and whether there is one: (o + padding - k * dilation) / stride, a whole number
    /// in 0..blocks.
    fn block(&self, o: usize, k: usize) -> (E, E) {
        let offset = Affine::var(o)
            .plus(&Affine::constant(SymExpr::Int(self.padding)))
            .plus(&Affine::var(k).scale(&SymExpr::Int(-self.dilation)));
        let offset = expr::index_value(offset);
        let block =
            if self.stride == 1 { offset.clone() } else { binary(Prim::Div, offset.clone(), int_const(self.stride)) };
        let whole = binary(Prim::Eq, binary(Prim::Mul, block.clone(), int_const(self.stride)), offset.clone());
        let in_range = binary(
            Prim::And,
            binary(Prim::Ge, offset, int_const(0)),
            binary(Prim::Lt, block.clone(), int(&self.blocks)),
        );
        (block, binary(Prim::And, whole, in_range))
    }
}

fn pair(a: &Args, name: &str, min: i64) -> Result<[i64; 2], String> {
    match a.ints(name)?.as_slice() {
        &[h, w] if h >= min && w >= min => Ok([h, w]),
        other => Err(format!("{name} must be 2 ints >= {min}, got {other:?}")),
    }
}

/// col2im(self [N, C*kh*kw, L] or [C*kh*kw, L], output_size [H, W], ...) → [N, C, H, W]
/// (or [C, H, W]), L being the number of block positions.
pub fn col2im(lw: &mut Lowerer, a: &Args) -> R {
    let cols = a.tensor(lw, "self")?;
    let batched = match cols.rank() {
        3 => true,
        2 => false,
        r => return Err(format!("expected a 2-D or 3-D input, got rank {r}")),
    };
    let cols = if batched { cols } else { cols.unsqueeze(0) };
    let output_size = a.sym_ints(lw, "output_size")?;
    let [kernel, dilation, padding, stride] =
        [pair(a, "kernel_size", 1)?, pair(a, "dilation", 1)?, pair(a, "padding", 0)?, pair(a, "stride", 1)?];
    if output_size.len() != 2 {
        return Err(format!("output_size must have 2 entries, got {}", output_size.len()));
    }
    let mut axes = vec![];
    for i in 0..2 {
        let size = output_size[i].clone();
        lw.require(SymExpr::Int(1), GuardOp::Le, size.clone(), "col2im needs a non-empty output")?;
        // (size + 2 padding - (dilation (kernel - 1) + 1)) / stride + 1
        let span = SymExpr::add([size.clone(), SymExpr::Int(2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1)]);
        let blocks = SymExpr::add([SymExpr::floor_div(span, SymExpr::Int(stride[i])), SymExpr::Int(1)]);
        lw.require(SymExpr::Int(1), GuardOp::Le, blocks.clone(), "the kernel must fit in the padded output")?;
        axes.push(FoldAxis { size, dilation: dilation[i], padding: padding[i], stride: stride[i], blocks });
    }
    let window = kernel[0] * kernel[1];
    let planes = cols.sizes[1].clone();
    lw.require(
        SymExpr::modulo(planes.clone(), SymExpr::Int(window)),
        GuardOp::Eq,
        SymExpr::Int(0),
        "the input's dimension 1 holds whole kernels",
    )?;
    lw.require(
        cols.sizes[2].clone(),
        GuardOp::Eq,
        SymExpr::mul([axes[0].blocks.clone(), axes[1].blocks.clone()]),
        "the input's dimension 2 holds one column per block",
    )?;
    let channels = SymExpr::floor_div(planes, SymExpr::Int(window));
    let name = a.node_name();
    let cols = lw.realize(&cols, &name);
    // Over [N, C, H, W, kh, kw]: loop variables (n, c, h, w, i, j).
    let (row, row_ok) = axes[0].block(2, 4);
    let (col, col_ok) = axes[1].block(3, 5);
    let plane = expr::index_value(
        Affine::var(1)
            .scale(&SymExpr::Int(window))
            .plus(&Affine::var(4).scale(&SymExpr::Int(kernel[1])))
            .plus(&Affine::var(5)),
    );
    let block = binary(Prim::Add, binary(Prim::Mul, row, int(&axes[1].blocks)), col);
    let value = lw.load_at_indices(&cols, &[var(0), plane, block], &name);
    let zero = expr::constant(Scalar::I(0), cols.dtype);
    let body = expr::select(binary(Prim::And, row_ok, col_ok), value, zero);
    let sizes = vec![
        cols.sizes[0].clone(),
        channels,
        axes[0].size.clone(),
        axes[1].size.clone(),
        SymExpr::Int(kernel[0]),
        SymExpr::Int(kernel[1]),
    ];
    let terms = TensorValue::lazy(cols.dtype, sizes, body);
    let out = reduce(lw, &terms, &[4, 5], false, ReduceOp::Sum, cols.dtype, &name);
    Ok(vec![if batched { out } else { out.squeeze(&[0]) }])
}
