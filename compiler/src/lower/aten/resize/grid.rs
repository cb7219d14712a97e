//! grid_sampler_2d: each output pixel samples the input at the (x, y) its grid entry holds
//! in [-1, 1], with bilinear, nearest or bicubic interpolation and zeros, border or
//! reflection padding, following torch's vectorized CPU kernel (GridSamplerKernel.cpp):
//! its unnormalization, clipping and reflection formulas, its rounding (half to even)
//! and its bounds masks. The positions come from data, so every tap is masked or
//! clipped into the input, and read through `LoadAt` regardless.

use super::super::norm::opmath;
use super::super::pad::{int, int_const, var};
use super::{float_const, float_size, interpolate, ratio, Tap, R};
use crate::ir::expr::{self, binary, cast, unary, Affine, E};
use crate::ir::Prim;
use crate::lower::args::Args;
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// How grid coordinates along one input axis of `size` become input coordinates.
struct Location {
    size: SymExpr,
    padding: Padding,
    align_corners: bool,
    d: DType,
}

impl Location {
    fn c(&self, v: f64) -> E {
        float_const(v, self.d)
    }

    /// `size` + `delta` as a float.
    fn size_plus(&self, delta: i64) -> E {
        float_size(&SymExpr::add([self.size.clone(), SymExpr::Int(delta)]), self.d)
    }

    /// (`size` + `delta`) / 2 as torch computes it in floats.
    fn half_size_plus(&self, delta: i64) -> E {
        ratio(&SymExpr::add([self.size.clone(), SymExpr::Int(delta)]), &SymExpr::Int(2), self.d)
    }

    /// [-1, 1] to [0, size - 1] (align_corners) or [-0.5, size - 0.5].
    fn unnormalize(&self, g: E) -> E {
        let plus_one = binary(Prim::Add, g, self.c(1.0));
        if self.align_corners {
            binary(Prim::Mul, plus_one, self.half_size_plus(-1))
        } else {
            binary(Prim::Sub, binary(Prim::Mul, plus_one, self.half_size_plus(0)), self.c(0.5))
        }
    }

    /// Into [0, size - 1]; NaN becomes 0 (torch orders its max for that).
    fn clip(&self, v: E) -> E {
        let zero = self.c(0.0);
        let low = expr::select(binary(Prim::Gt, v.clone(), zero.clone()), v, zero);
        binary(Prim::Min, low, self.size_plus(-1))
    }

    /// Mirrored about the borders (the pixel centres with align_corners, else the edges)
    /// as often as needed; a single pixel with align_corners reflects to 0.
    fn reflect(&self, v: E) -> E {
        let (low, twice_span) = if self.align_corners { (0.0, self.size_plus(-1)) } else { (-0.5, self.size_plus(0)) };
        let twice_span = binary(Prim::Mul, twice_span, self.c(2.0));
        let abs_in = unary(Prim::Abs, binary(Prim::Sub, v, self.c(low)));
        let flips = unary(Prim::Trunc, binary(Prim::Div, abs_in.clone(), twice_span.clone()));
        let extra = binary(Prim::Sub, abs_in, binary(Prim::Mul, flips, twice_span.clone()));
        let reflected =
            binary(Prim::Add, binary(Prim::Min, extra.clone(), binary(Prim::Sub, twice_span, extra)), self.c(low));
        if !self.align_corners {
            return reflected;
        }
        match self.size.as_int() {
            Some(s) if s > 1 => reflected,
            Some(_) => self.c(0.0),
            None => expr::select(binary(Prim::Le, int(&self.size), int_const(1)), self.c(0.0), reflected),
        }
    }

    /// The padding applied to an input coordinate (`compute_coordinates`).
    fn pad(&self, v: E) -> E {
        match self.padding {
            Padding::Zeros => v,
            Padding::Border => self.clip(v),
            Padding::Reflection => self.clip(self.reflect(v)),
        }
    }

    /// With zeros padding, whether integral coordinate `v` lies in the input (compared as
    /// a float, so NaN and huge values are outside).
    fn inside(&self, v: &E) -> Option<E> {
        (self.padding == Padding::Zeros).then(|| {
            binary(Prim::And, binary(Prim::Gt, v.clone(), self.c(-1.0)), binary(Prim::Lt, v.clone(), self.size_plus(0)))
        })
    }

    fn index(v: E) -> E {
        cast(v, DType::I64)
    }

    /// Bilinear: the pixels at floor(x) and floor(x) + 1, weighted by the distance to
    /// the other. With border or reflection padding only the second can be outside.
    fn bilinear(&self, g: E) -> Vec<Tap> {
        let x = self.pad(self.unnormalize(g));
        let low = unary(Prim::Floor, x.clone());
        let high = binary(Prim::Add, low.clone(), self.c(1.0));
        let w = binary(Prim::Sub, x, low.clone());
        let e = binary(Prim::Sub, self.c(1.0), w.clone());
        let high_inside = match self.padding {
            Padding::Zeros => self.inside(&high),
            _ => Some(binary(Prim::Lt, high.clone(), self.size_plus(0))),
        };
        vec![
            Tap { index: Self::index(low.clone()), weight: Some(e), inside: self.inside(&low) },
            Tap { index: Self::index(high), weight: Some(w), inside: high_inside },
        ]
    }

    /// Nearest: the pixel at x rounded half to even.
    fn nearest(&self, g: E) -> Vec<Tap> {
        let x = unary(Prim::Round, self.pad(self.unnormalize(g)));
        vec![Tap { index: Self::index(x.clone()), weight: None, inside: self.inside(&x) }]
    }

    /// Bicubic (A = -0.75): the pixels floor(x) - 1 ..= floor(x) + 2 of the unpadded
    /// coordinate, each padded on its own.
    fn bicubic(&self, g: E) -> Vec<Tap> {
        let x = self.unnormalize(g);
        let low = unary(Prim::Floor, x.clone());
        let t = binary(Prim::Sub, x, low.clone());
        let weights = self.cubic_coefficients(t);
        weights
            .into_iter()
            .enumerate()
            .map(|(k, w)| {
                let at = self.pad(binary(Prim::Add, low.clone(), self.c(k as f64 - 1.0)));
                Tap { index: Self::index(at.clone()), weight: Some(w), inside: self.inside(&at) }
            })
            .collect()
    }

    /// The cubic convolution weights of the four taps at distance `t` past the second.
    fn cubic_coefficients(&self, t: E) -> [E; 4] {
        const A: f64 = -0.75;
        let (add, sub, mul) =
            (|a, b| binary(Prim::Add, a, b), |a, b| binary(Prim::Sub, a, b), |a, b| binary(Prim::Mul, a, b));
        // 1 < x < 2: ((A x - 5A) x + 8A) x - 4A
        let outer = |x: E| {
            sub(
                mul(add(mul(sub(mul(self.c(A), x.clone()), self.c(5.0 * A)), x.clone()), self.c(8.0 * A)), x),
                self.c(4.0 * A),
            )
        };
        // x <= 1: ((A + 2) x - (A + 3)) x x + 1
        let inner =
            |x: E| add(mul(mul(sub(mul(self.c(A + 2.0), x.clone()), self.c(A + 3.0)), x.clone()), x), self.c(1.0));
        [
            outer(add(t.clone(), self.c(1.0))),
            inner(t.clone()),
            inner(sub(self.c(1.0), t.clone())),
            outer(sub(self.c(2.0), t)),
        ]
    }
}

/// grid_sampler_2d(input [N, C, H, W], grid [N, Ho, Wo, 2]) → [N, C, Ho, Wo].
pub fn grid_sampler_2d(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "input")?;
    let grid = a.tensor(lw, "grid")?;
    if x.rank() != 4 || grid.rank() != 4 || !x.dtype.is_float() || grid.dtype != x.dtype {
        return Err(format!(
            "expected a 4-D floating-point input and a 4-D grid of its dtype, got {}[rank {}] and {}[rank {}]",
            x.dtype,
            x.rank(),
            grid.dtype,
            grid.rank()
        ));
    }
    let padding = match a.int("padding_mode")? {
        0 => Padding::Zeros,
        1 => Padding::Border,
        2 => Padding::Reflection,
        m => return Err(format!("padding_mode must be 0 (zeros), 1 (border) or 2 (reflection), got {m}")),
    };
    let mode = a.int("interpolation_mode")?;
    let align_corners = a.bool_or("align_corners", false)?;
    lw.require(grid.sizes[0].clone(), GuardOp::Eq, x.sizes[0].clone(), "grid and input have the same batch size")?;
    lw.require(grid.sizes[3].clone(), GuardOp::Eq, SymExpr::Int(2), "the grid's last dimension holds (x, y)")?;
    for (d, what) in [(2, "height"), (3, "width")] {
        lw.require(
            SymExpr::Int(1),
            GuardOp::Le,
            x.sizes[d].clone(),
            &format!("grid sampling needs a non-empty input {what}"),
        )?;
    }
    let (d, name) = (opmath(x.dtype), a.node_name());
    let x = lw.realize(&x, &name);
    let locate = |size: &SymExpr| Location { size: size.clone(), padding, align_corners, d };
    let (along_y, along_x) = (locate(&x.sizes[2]), locate(&x.sizes[3]));
    // Output (n, c, h, w) reads grid[n, h, w, 0] = x and grid[n, h, w, 1] = y.
    let coordinate = |k: i64| {
        cast(grid.load(&[Affine::var(0), Affine::var(2), Affine::var(3), Affine::constant(SymExpr::Int(k))]), d)
    };
    let (gx, gy) = (coordinate(0), coordinate(1));
    let taps = match mode {
        0 => [along_y.bilinear(gy), along_x.bilinear(gx)],
        1 => [along_y.nearest(gy), along_x.nearest(gx)],
        2 => [along_y.bicubic(gy), along_x.bicubic(gx)],
        m => return Err(format!("interpolation_mode must be 0 (bilinear), 1 (nearest) or 2 (bicubic), got {m}")),
    };
    let body = interpolate(lw, &x, &[var(0), var(1)], &taps, d, &name);
    let sizes = vec![x.sizes[0].clone(), x.sizes[1].clone(), grid.sizes[1].clone(), grid.sizes[2].clone()];
    Ok(vec![TensorValue::lazy(x.dtype, sizes, cast(body, x.dtype))])
}
