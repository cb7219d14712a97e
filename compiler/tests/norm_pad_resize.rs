//! Normalization, padding, distances and resampling against references written here
//! (direct loops following PyTorch's CPU kernels, in float32 where torch computes
//! positions in float32), over what the recorded fixtures leave out: negative padding,
//! every grid sampler mode with every padding mode, scale factors, cdist's p values and
//! its matrix-product form, strided col2im, norms without affine parameters, partial
//! output masks, symbolic sizes; and the shape rules that refuse a bad program.

mod common;
mod one_node;

use common::fails_with;
use one_node::{each, ints, sym, tensor_arg, Arr, Op};
use serde_json::{json, Value as Json};

fn none() -> Json {
    json!({"as_none": true})
}

fn float(v: f64) -> Json {
    if v.is_infinite() {
        json!({"as_float": "Infinity"})
    } else {
        json!({"as_float": v})
    }
}

// ---- padding ----

#[derive(Clone, Copy)]
enum Edge {
    Constant(f64),
    Reflect,
    Replicate,
}

/// torch's padding of the trailing dimensions; `pads` is torch's flat list (last dim first).
fn pad_ref(x: &Arr, pads: &[i64], edge: Edge) -> Arr {
    let lead = x.shape.len() - pads.len() / 2;
    let before = |d: usize| pads[2 * (x.shape.len() - 1 - d)];
    let after = |d: usize| pads[2 * (x.shape.len() - 1 - d) + 1];
    let shape: Vec<usize> = (0..x.shape.len())
        .map(|d| if d < lead { x.shape[d] } else { (x.shape[d] as i64 + before(d) + after(d)) as usize })
        .collect();
    Arr::from_fn(&shape, &mut |i| {
        let mut src = vec![];
        for (d, &o) in i.iter().enumerate() {
            if d < lead {
                src.push(o);
                continue;
            }
            let (n, s) = (x.shape[d] as i64, o as i64 - before(d));
            let s = match edge {
                Edge::Constant(v) if s < 0 || s >= n => return v,
                Edge::Constant(_) => s,
                Edge::Reflect => {
                    if s < 0 {
                        -s
                    } else if s >= n {
                        2 * (n - 1) - s
                    } else {
                        s
                    }
                }
                Edge::Replicate => s.clamp(0, n - 1),
            };
            src.push(s as usize);
        }
        x.get(&src)
    })
}

#[test]
fn constant_padding_crops_where_negative() {
    let x = Arr::random(&[2, 3, 5, 4], -2.0, 2.0, 1);
    for pads in [[-1, -2, 0, -1], [-1, 2, 1, -1], [0, 0, -5, 2]] {
        let want = pad_ref(&x, &pads, Edge::Constant(0.25));
        Op::new(
            "constant_pad_nd.default",
            &[&x],
            vec![("self", tensor_arg(0)), ("pad", ints(&pads)), ("value", float(0.25))],
            &[&want.shape],
        )
        .check(&format!("constant_pad_nd {pads:?}"), &[&x], &[&want]);
    }
}

#[test]
fn reflection_and_replication_with_negative_padding() {
    let x = Arr::random(&[2, 3, 5, 4], -2.0, 2.0, 2);
    let want = pad_ref(&x, &[-1, 2, 3, -1], Edge::Reflect);
    Op::new(
        "reflection_pad2d.default",
        &[&x],
        vec![("self", tensor_arg(0)), ("padding", ints(&[-1, 2, 3, -1]))],
        &[&want.shape],
    )
    .check("reflection_pad2d", &[&x], &[&want]);
    let want = pad_ref(&x, &[-1, 2, 1, 0, 2, -1], Edge::Replicate);
    Op::new(
        "replication_pad3d.default",
        &[&x],
        vec![("self", tensor_arg(0)), ("padding", ints(&[-1, 2, 1, 0, 2, -1]))],
        &[&want.shape],
    )
    .check("replication_pad3d", &[&x], &[&want]);
}

#[test]
fn padding_rules() {
    let x = Arr::random(&[2, 3, 5, 4], -2.0, 2.0, 3);
    let (_dir, out) = Op::new(
        "reflection_pad2d.default",
        &[&x],
        vec![("self", tensor_arg(0)), ("padding", ints(&[4, 0, 0, 0]))],
        &[&[2, 3, 5, 8]],
    )
    .compile();
    fails_with(&out, "reflection padding must be smaller than dimension 3: 5 <= 4 does not hold");
    let (_dir, out) = Op::new(
        "constant_pad_nd.default",
        &[&x],
        vec![("self", tensor_arg(0)), ("pad", ints(&[-3, -2]))],
        &[&[2, 3, 5, 0]],
    )
    .compile();
    fails_with(&out, "padding must not make dimension 3 negative");
}

// ---- distances ----

fn p_norm(diffs: impl Iterator<Item = f64>, p: f64) -> f64 {
    let d: Vec<f64> = diffs.collect();
    match p {
        0.0 => d.iter().filter(|v| **v != 0.0).count() as f64,
        p if p.is_infinite() => d.iter().fold(0.0, |m, v| m.max(v.abs())),
        p => d.iter().map(|v| v.abs().powf(p)).sum::<f64>().powf(1.0 / p),
    }
}

/// cdist of x1 [B, P, M] and x2 [R, M] (x2 broadcast over the batch); `by_product`:
/// torch's sqrt(max(|a|² + |b|² - 2 a·b, 0)).
fn cdist_ref(x1: &Arr, x2: &Arr, p: f64, by_product: bool) -> Arr {
    let (m, r) = (x1.shape[2], x2.shape[0]);
    Arr::from_fn(&[x1.shape[0], x1.shape[1], r], &mut |i| {
        let a = |k: usize| x1.get(&[i[0], i[1], k]);
        let b = |k: usize| x2.get(&[i[2], k]);
        if by_product {
            let s: f64 = (0..m).map(|k| -2.0 * a(k) * b(k) + a(k) * a(k) + b(k) * b(k)).sum();
            s.max(0.0).sqrt()
        } else {
            p_norm((0..m).map(|k| a(k) - b(k)), p)
        }
    })
}

#[test]
fn cdist_for_every_kind_of_p() {
    let x1 = Arr::random(&[2, 4, 3], -2.0, 2.0, 4);
    let mut x2 = Arr::random(&[5, 3], -2.0, 2.0, 5);
    x2.data[..3].copy_from_slice(&x1.data[..3]); // a zero distance
    for (p, mode) in [(0.0, 0), (0.5, 0), (1.0, 0), (2.0, 0), (3.0, 0), (f64::INFINITY, 0), (2.0, 1)] {
        let want = cdist_ref(&x1, &x2, p, mode == 1);
        Op::new(
            "_cdist_forward.default",
            &[&x1, &x2],
            vec![
                ("x1", tensor_arg(0)),
                ("x2", tensor_arg(1)),
                ("p", float(p)),
                ("compute_mode", json!({"as_int": mode})),
            ],
            &[&want.shape],
        )
        .check(&format!("cdist p={p} compute_mode={mode}"), &[&x1, &x2], &[&want]);
    }
    // More than 25 rows: torch's default is the matrix-product form.
    let (x1, x2) = (Arr::random(&[1, 30, 4], -2.0, 2.0, 6), Arr::random(&[7, 4], -2.0, 2.0, 7));
    let want = cdist_ref(&x1, &x2, 2.0, true);
    Op::new(
        "_cdist_forward.default",
        &[&x1, &x2],
        vec![("x1", tensor_arg(0)), ("x2", tensor_arg(1)), ("p", float(2.0)), ("compute_mode", none())],
        &[&want.shape],
    )
    .check("cdist of 30 rows", &[&x1, &x2], &[&want]);
    let args = vec![("x1", tensor_arg(0)), ("x2", tensor_arg(1)), ("p", float(1.0)), ("compute_mode", none())];
    let (_dir, out) = Op::new("_cdist_forward.default", &[&x1, &Arr::zeros(&[7, 3])], args, &[&[1, 30, 7]]).compile();
    fails_with(&out, "x1 and x2 have the same number of columns");
}

fn pdist_ref(x: &Arr, p: f64) -> Arr {
    let (n, m) = (x.shape[0], x.shape[1]);
    let mut data = vec![];
    for i in 0..n {
        for j in i + 1..n {
            data.push(p_norm((0..m).map(|k| x.get(&[i, k]) - x.get(&[j, k])), p));
        }
    }
    Arr { shape: vec![data.len()], data }
}

#[test]
fn pdist_pairs_rows_in_order() {
    let x = Arr::random(&[70, 3], -2.0, 2.0, 8);
    for p in [0.0, 1.0, 1.5, 2.0, f64::INFINITY] {
        let want = pdist_ref(&x, p);
        Op::new("_pdist_forward.default", &[&x], vec![("self", tensor_arg(0)), ("p", float(p))], &[&want.shape]).check(
            &format!("pdist p={p}"),
            &[&x],
            &[&want],
        );
    }
}

// ---- normalization ----

/// (out, mean, rstd) of normalizing `x` over the elements `group(index)` maps to one
/// group, then `affine(index, value)`.
fn normalize(
    x: &Arr,
    groups: usize,
    group: &dyn Fn(&[usize]) -> usize,
    affine: &dyn Fn(&[usize], f64) -> f64,
) -> (Arr, Vec<f64>, Vec<f64>) {
    let (mut sum, mut count) = (vec![0.0; groups], vec![0.0; groups]);
    each(&x.shape, &mut |i| {
        sum[group(i)] += x.get(i);
        count[group(i)] += 1.0
    });
    let mean: Vec<f64> = sum.iter().zip(&count).map(|(s, c)| s / c).collect();
    let mut ssq = vec![0.0; groups];
    each(&x.shape, &mut |i| ssq[group(i)] += (x.get(i) - mean[group(i)]).powi(2));
    let rstd: Vec<f64> = ssq.iter().zip(&count).map(|(s, c)| 1.0 / (s / c + 1e-5).sqrt()).collect();
    let out = Arr::from_fn(&x.shape, &mut |i| affine(i, (x.get(i) - mean[group(i)]) * rstd[group(i)]));
    (out, mean, rstd)
}

#[test]
fn batch_norm_without_affine_parameters() {
    let x = Arr::random(&[6, 3], -2.0, 2.0, 9);
    let bias = Arr::random(&[3], -1.0, 1.0, 10);
    let (out, mean, rstd) = normalize(&x, 3, &|i| i[1], &|i, v| v + bias.data[i[1]]);
    let args = vec![
        ("input", tensor_arg(0)),
        ("weight", none()),
        ("bias", tensor_arg(1)),
        ("training", json!({"as_bool": true})),
        ("momentum", float(0.1)),
        ("eps", float(1e-5)),
    ];
    Op::new("_native_batch_norm_legit.no_stats", &[&x, &bias], args, &[&[6, 3], &[3], &[3]]).check(
        "training batch norm",
        &[&x, &bias],
        &[&out, &Arr { shape: vec![3], data: mean }, &Arr { shape: vec![3], data: rstd }],
    );

    let x = Arr::random(&[2, 3, 4], -2.0, 2.0, 11);
    let (running_mean, running_var) = (Arr::random(&[3], -1.0, 1.0, 12), Arr::random(&[3], 0.5, 2.0, 13));
    let want =
        Arr::from_fn(&x.shape, &mut |i| (x.get(i) - running_mean.data[i[1]]) / (running_var.data[i[1]] + 1e-3).sqrt());
    let args = |training: bool| {
        vec![
            ("input", tensor_arg(0)),
            ("weight", none()),
            ("bias", none()),
            ("running_mean", tensor_arg(1)),
            ("running_var", tensor_arg(2)),
            ("training", json!({"as_bool": training})),
            ("momentum", float(0.1)),
            ("eps", float(1e-3)),
        ]
    };
    let empty = Arr::zeros(&[0]);
    Op::new(
        "_native_batch_norm_legit.default",
        &[&x, &running_mean, &running_var],
        args(false),
        &[&[2, 3, 4], &[0], &[0]],
    )
    .check("inference batch norm", &[&x, &running_mean, &running_var], &[&want, &empty, &empty]);
    let (_dir, out) = Op::new(
        "_native_batch_norm_legit.default",
        &[&x, &running_mean, &running_var],
        args(true),
        &[&[2, 3, 4], &[0], &[0]],
    )
    .compile();
    fails_with(&out, "batch norm in training mode updates running_mean and running_var in place");
}

#[test]
fn group_norm_rules_and_missing_weight() {
    let x = Arr::random(&[2, 6, 7], -2.0, 2.0, 14);
    let bias = Arr::random(&[6], -1.0, 1.0, 15);
    let (out, mean, rstd) = normalize(&x, 6, &|i| i[0] * 3 + i[1] / 2, &|i, v| v + bias.data[i[1]]);
    let args = |group: i64, hw: i64| {
        vec![
            ("input", tensor_arg(0)),
            ("weight", none()),
            ("bias", tensor_arg(1)),
            ("N", json!({"as_int": 2})),
            ("C", json!({"as_int": 6})),
            ("HxW", json!({"as_int": hw})),
            ("group", json!({"as_int": group})),
            ("eps", float(1e-5)),
        ]
    };
    let stats = |v: Vec<f64>| Arr { shape: vec![2, 3], data: v };
    Op::new("native_group_norm.default", &[&x, &bias], args(3, 7), &[&[2, 6, 7], &[2, 3], &[2, 3]]).check(
        "group norm",
        &[&x, &bias],
        &[&out, &stats(mean), &stats(rstd)],
    );
    let (_dir, bad) =
        Op::new("native_group_norm.default", &[&x, &bias], args(4, 7), &[&[2, 6, 7], &[2, 4], &[2, 4]]).compile();
    fails_with(&bad, "the channels divide into groups");
    let (_dir, bad) =
        Op::new("native_group_norm.default", &[&x, &bias], args(3, 8), &[&[2, 6, 7], &[2, 3], &[2, 3]]).compile();
    fails_with(&bad, "the input holds N * C * HxW elements: 84 == 96 does not hold");
}

/// The gradients of a normalization over groups: (grad_input, grad_weight, grad_bias),
/// the parameters indexed by `param(index)`.
#[allow(clippy::too_many_arguments)]
fn norm_backward_ref(
    dy: &Arr,
    x: &Arr,
    mean: &[f64],
    rstd: &[f64],
    weight: Option<&Arr>,
    group: &dyn Fn(&[usize]) -> usize,
    param: &dyn Fn(&[usize]) -> usize,
    params: usize,
) -> [Arr; 3] {
    let groups = mean.len();
    let x_hat = |i: &[usize]| (x.get(i) - mean[group(i)]) * rstd[group(i)];
    let g = |i: &[usize]| dy.get(i) * weight.map_or(1.0, |w| w.data[param(i)]);
    let (mut sum_g, mut sum_gx, mut count) = (vec![0.0; groups], vec![0.0; groups], vec![0.0; groups]);
    let (mut dw, mut db) = (vec![0.0; params], vec![0.0; params]);
    each(&x.shape, &mut |i| {
        sum_g[group(i)] += g(i);
        sum_gx[group(i)] += g(i) * x_hat(i);
        count[group(i)] += 1.0;
        dw[param(i)] += dy.get(i) * x_hat(i);
        db[param(i)] += dy.get(i);
    });
    let dx = Arr::from_fn(&x.shape, &mut |i| {
        let k = group(i);
        rstd[k] * (g(i) - sum_g[k] / count[k] - x_hat(i) * sum_gx[k] / count[k])
    });
    [dx, Arr { shape: vec![params], data: dw }, Arr { shape: vec![params], data: db }]
}

#[test]
fn norm_backward_with_partial_output_masks() {
    let (x, dy) = (Arr::random(&[2, 3, 4, 5], -2.0, 2.0, 16), Arr::random(&[2, 3, 4, 5], -2.0, 2.0, 17));
    let (mean, rstd) = (Arr::random(&[2, 3, 1, 1], -1.0, 1.0, 18), Arr::random(&[2, 3, 1, 1], 0.5, 1.5, 19));
    let weight = Arr::random(&[4, 5], -1.0, 1.0, 20);
    let row = |i: &[usize]| i[0] * 3 + i[1];
    let col = |i: &[usize]| i[2] * 5 + i[3];
    let [dx, dw, db] = norm_backward_ref(&dy, &x, &mean.data, &rstd.data, Some(&weight), &row, &col, 20);
    let (dw, db) = (Arr { shape: vec![4, 5], ..dw }, Arr { shape: vec![4, 5], ..db });
    let args = |mask: [bool; 3], weighted: bool| {
        vec![
            ("grad_out", tensor_arg(0)),
            ("input", tensor_arg(1)),
            ("normalized_shape", ints(&[4, 5])),
            ("mean", tensor_arg(2)),
            ("rstd", tensor_arg(3)),
            ("weight", if weighted { tensor_arg(4) } else { none() }),
            ("bias", none()),
            ("output_mask", json!({"as_bools": mask})),
        ]
    };
    Op::new(
        "native_layer_norm_backward.default",
        &[&dy, &x, &mean, &rstd, &weight],
        args([true, true, true], true),
        &[&x.shape, &[4, 5], &[4, 5]],
    )
    .check("layer norm backward", &[&dy, &x, &mean, &rstd, &weight], &[&dx, &dw, &db]);
    Op::new(
        "native_layer_norm_backward.default",
        &[&dy, &x, &mean, &rstd, &weight],
        args([false, true, false], true),
        &[&[4, 5]],
    )
    .check("layer norm backward, grad_weight only", &[&dy, &x, &mean, &rstd, &weight], &[&dw]);
    let [dx, _, db] = norm_backward_ref(&dy, &x, &mean.data, &rstd.data, None, &row, &col, 20);
    let db = Arr { shape: vec![4, 5], ..db };
    Op::new(
        "native_layer_norm_backward.default",
        &[&dy, &x, &mean, &rstd],
        args([true, false, true], false),
        &[&x.shape, &[4, 5]],
    )
    .check("layer norm backward without weight", &[&dy, &x, &mean, &rstd], &[&dx, &db]);

    let (x, dy) = (Arr::random(&[2, 4, 3], -2.0, 2.0, 21), Arr::random(&[2, 4, 3], -2.0, 2.0, 22));
    let (mean, rstd) = (Arr::random(&[2, 2], -1.0, 1.0, 23), Arr::random(&[2, 2], 0.5, 1.5, 24));
    let [dx, _, db] = norm_backward_ref(&dy, &x, &mean.data, &rstd.data, None, &|i| i[0] * 2 + i[1] / 2, &|i| i[1], 4);
    let args = vec![
        ("grad_out", tensor_arg(0)),
        ("input", tensor_arg(1)),
        ("mean", tensor_arg(2)),
        ("rstd", tensor_arg(3)),
        ("weight", none()),
        ("N", json!({"as_int": 2})),
        ("C", json!({"as_int": 4})),
        ("HxW", json!({"as_int": 3})),
        ("group", json!({"as_int": 2})),
        ("output_mask", json!({"as_bools": [true, false, true]})),
    ];
    Op::new("native_group_norm_backward.default", &[&dy, &x, &mean, &rstd], args, &[&x.shape, &[4]]).check(
        "group norm backward without weight",
        &[&dy, &x, &mean, &rstd],
        &[&dx, &db],
    );
}

// ---- grid sampling (GridSamplerKernel.cpp's vectorized formulas, float32) ----

struct Axis {
    size: usize,
    padding: i64,
    align_corners: bool,
}

impl Axis {
    fn unnormalize(&self, g: f32) -> f32 {
        if self.align_corners {
            (g + 1.0) * ((self.size - 1) as f32 / 2.0)
        } else {
            (g + 1.0) * (self.size as f32 / 2.0) - 0.5
        }
    }

    fn clip(&self, v: f32) -> f32 {
        (if v > 0.0 { v } else { 0.0 }).min((self.size - 1) as f32)
    }

    fn reflect(&self, v: f32) -> f32 {
        let (low, twice_span) =
            if self.align_corners { (0.0, (self.size - 1) as f32 * 2.0) } else { (-0.5, self.size as f32 * 2.0) };
        if self.align_corners && self.size <= 1 {
            return 0.0;
        }
        let a = (v - low).abs();
        let extra = a - (a / twice_span).trunc() * twice_span;
        extra.min(twice_span - extra) + low
    }

    fn pad(&self, v: f32) -> f32 {
        match self.padding {
            0 => v,
            1 => self.clip(v),
            _ => self.clip(self.reflect(v)),
        }
    }
}

fn cubic(t: f32) -> [f32; 4] {
    let a = -0.75f32;
    let outer = |x: f32| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let inner = |x: f32| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [outer(t + 1.0), inner(t), inner(1.0 - t), outer(2.0 - t)]
}

fn grid_ref(x: &Arr, grid: &Arr, interpolation: i64, padding: i64, align_corners: bool) -> Arr {
    let (h, w) = (x.shape[2], x.shape[3]);
    let (ay, ax) = (Axis { size: h, padding, align_corners }, Axis { size: w, padding, align_corners });
    Arr::from_fn(&[x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]], &mut |i| {
        let value = |y: f32, xx: f32| {
            if y > -1.0 && y < h as f32 && xx > -1.0 && xx < w as f32 {
                x.get(&[i[0], i[1], y as usize, xx as usize]) as f32
            } else {
                0.0
            }
        };
        let (gx, gy) = (grid.get(&[i[0], i[2], i[3], 0]) as f32, grid.get(&[i[0], i[2], i[3], 1]) as f32);
        (match interpolation {
            0 => {
                let (cx, cy) = (ax.pad(ax.unnormalize(gx)), ay.pad(ay.unnormalize(gy)));
                let (x0, y0) = (cx.floor(), cy.floor());
                let (wx, wy) = (cx - x0, cy - y0);
                value(y0, x0) * (1.0 - wx) * (1.0 - wy)
                    + value(y0, x0 + 1.0) * wx * (1.0 - wy)
                    + value(y0 + 1.0, x0) * (1.0 - wx) * wy
                    + value(y0 + 1.0, x0 + 1.0) * wx * wy
            }
            1 => value(ay.pad(ay.unnormalize(gy)).round_ties_even(), ax.pad(ax.unnormalize(gx)).round_ties_even()),
            _ => {
                let (cx, cy) = (ax.unnormalize(gx), ay.unnormalize(gy));
                let (fx, fy) = (cx.floor(), cy.floor());
                let (wx, wy) = (cubic(cx - fx), cubic(cy - fy));
                (0..4)
                    .map(|r| {
                        let y = ay.pad(fy - 1.0 + r as f32);
                        wy[r] * (0..4).map(|c| wx[c] * value(y, ax.pad(fx - 1.0 + c as f32))).sum::<f32>()
                    })
                    .sum()
            }
        }) as f64
    })
}

#[test]
fn grid_sampler_every_mode_and_padding() {
    let x = Arr::random(&[2, 3, 5, 4], -2.0, 2.0, 25);
    let mut grid = Arr::random(&[2, 3, 6, 2], -1.6, 1.6, 26);
    grid.data[..2].copy_from_slice(&[1.0, -1.0]); // the corners exactly
    for interpolation in 0..3 {
        for padding in 0..3 {
            for align_corners in [false, true] {
                let want = grid_ref(&x, &grid, interpolation, padding, align_corners);
                let args = vec![
                    ("input", tensor_arg(0)),
                    ("grid", tensor_arg(1)),
                    ("interpolation_mode", json!({"as_int": interpolation})),
                    ("padding_mode", json!({"as_int": padding})),
                    ("align_corners", json!({"as_bool": align_corners})),
                ];
                Op::new("grid_sampler_2d.default", &[&x, &grid], args, &[&want.shape]).check(
                    &format!("grid_sampler_2d mode {interpolation} padding {padding} align_corners {align_corners}"),
                    &[&x, &grid],
                    &[&want],
                );
            }
        }
    }
    let args = vec![
        ("input", tensor_arg(0)),
        ("grid", tensor_arg(1)),
        ("interpolation_mode", json!({"as_int": 0})),
        ("padding_mode", json!({"as_int": 0})),
        ("align_corners", json!({"as_bool": false})),
    ];
    let (_dir, out) =
        Op::new("grid_sampler_2d.default", &[&x, &Arr::zeros(&[3, 3, 6, 2])], args, &[&[2, 3, 3, 6]]).compile();
    fails_with(&out, "grid and input have the same batch size");
}

// ---- upsampling (UpSampleKernel.cpp, float32) ----

/// torch's area_pixel_compute_scale.
fn step(input: usize, output: usize, align_corners: bool, scale: Option<f64>) -> f32 {
    match (align_corners, scale) {
        (true, _) if output > 1 => (input - 1) as f32 / (output - 1) as f32,
        (true, _) => 0.0,
        (false, Some(s)) => (1.0 / s) as f32,
        (false, None) => input as f32 / output as f32,
    }
}

/// (index, weight) pairs of each output position along one axis.
fn taps(input: usize, output: usize, linear: bool, align_corners: bool, scale: Option<f64>) -> Vec<Vec<(usize, f32)>> {
    let s = step(input, output, align_corners, scale);
    let last = input as i64 - 1;
    (0..output)
        .map(|o| {
            if !linear {
                return vec![(((s * o as f32).floor() as i64).min(last) as usize, 1.0)];
            }
            if input == output {
                return vec![(o, 1.0), (o, 0.0)];
            }
            let c = if align_corners { s * o as f32 } else { (s * (o as f32 + 0.5) - 0.5).max(0.0) };
            let i0 = (c.floor() as i64).min(last);
            let lambda = (c - i0 as f32).clamp(0.0, 1.0);
            vec![(i0 as usize, 1.0 - lambda), ((i0 + (i0 < last) as i64) as usize, lambda)]
        })
        .collect()
}

fn upsample_ref(x: &Arr, out: [usize; 2], linear: bool, align_corners: bool, scales: [Option<f64>; 2]) -> Arr {
    let th = taps(x.shape[2], out[0], linear, align_corners, scales[0]);
    let tw = taps(x.shape[3], out[1], linear, align_corners, scales[1]);
    Arr::from_fn(&[x.shape[0], x.shape[1], out[0], out[1]], &mut |i| {
        th[i[2]]
            .iter()
            .map(|&(h, a)| a * tw[i[3]].iter().map(|&(w, b)| x.get(&[i[0], i[1], h, w]) as f32 * b).sum::<f32>())
            .sum::<f32>() as f64
    })
}

#[test]
fn upsampling_by_size_and_by_scale() {
    let x = Arr::random(&[2, 2, 5, 6], -2.0, 2.0, 27);
    let scaled = |s: [f64; 2]| [(5.0 * s[0]) as usize, (6.0 * s[1]) as usize];
    let nearest = |out: [usize; 2], scales: Option<[f64; 2]>| {
        let want = upsample_ref(&x, out, false, false, scales.map_or([None; 2], |s| s.map(Some)));
        let args = vec![
            ("input", tensor_arg(0)),
            ("output_size", if scales.is_some() { none() } else { ints(&out.map(|s| s as i64)) }),
            ("scale_factors", scales.map_or(none(), |s| json!({"as_floats": s}))),
        ];
        Op::new("upsample_nearest2d.vec", &[&x], args, &[&want.shape]).check(
            &format!("nearest {out:?} {scales:?}"),
            &[&x],
            &[&want],
        );
    };
    nearest([7, 3], None);
    nearest(scaled([1.7, 0.6]), Some([1.7, 0.6]));
    let bilinear = |out: [usize; 2], align_corners: bool, scales: Option<[f64; 2]>| {
        let want = upsample_ref(&x, out, true, align_corners, scales.map_or([None; 2], |s| s.map(Some)));
        let args = vec![
            ("input", tensor_arg(0)),
            ("output_size", if scales.is_some() { none() } else { ints(&out.map(|s| s as i64)) }),
            ("align_corners", json!({"as_bool": align_corners})),
            ("scale_factors", scales.map_or(none(), |s| json!({"as_floats": s}))),
        ];
        Op::new("upsample_bilinear2d.vec", &[&x], args, &[&want.shape]).check(
            &format!("bilinear {out:?} {align_corners} {scales:?}"),
            &[&x],
            &[&want],
        );
    };
    for align_corners in [false, true] {
        bilinear([9, 4], align_corners, None);
        bilinear([5, 1], align_corners, None);
    }
    bilinear(scaled([0.6, 1.3]), false, Some([0.6, 1.3]));
    // A scale that keeps the size: torch copies rather than applying 1/1.1.
    bilinear(scaled([1.1, 1.0]), false, Some([1.1, 1.0]));
    let args = vec![
        ("input", tensor_arg(0)),
        ("output_size", ints(&[7, 3])),
        ("scale_factors", json!({"as_floats": [1.0, 1.0]})),
    ];
    let (_dir, out) = Op::new("upsample_nearest2d.vec", &[&x], args, &[&[2, 2, 7, 3]]).compile();
    fails_with(&out, "exactly one of output_size and scale_factors must be given");
}

/// Symbolic spatial sizes: output sizes from scale factors are exact expressions
/// (s0 * 2.0 is 2*s0, s0 * 0.5 is s0 // 2), and one library serves every size.
#[test]
fn upsampling_symbolic_sizes() {
    let symbol = |name: &str| format!("Symbol('{name}', positive=True, integer=True)");
    let ranges = json!({"s0": {"min_val": 2, "max_val": 64}, "s1": {"min_val": 2, "max_val": 64}});
    let input = vec![json!({"as_int": 1}), json!({"as_int": 2}), sym(&symbol("s0"), 8), sym(&symbol("s1"), 12)];
    let twice = |name: &str, hint| sym(&format!("Mul(Integer(2), {})", symbol(name)), hint);
    let half = |name: &str, hint| sym(&format!("FloorDiv({}, Integer(2))", symbol(name)), hint);
    let cases = [
        ("upsample_nearest2d.vec", vec![], [twice("s0", 16), twice("s1", 24)], false, [2.0, 2.0]),
        (
            "upsample_bilinear2d.vec",
            vec![("align_corners", json!({"as_bool": false}))],
            [half("s0", 4), half("s1", 6)],
            true,
            [0.5, 0.5],
        ),
    ];
    for (target, extra, [h, w], linear, scales) in cases {
        let mut args =
            vec![("input", tensor_arg(0)), ("output_size", none()), ("scale_factors", json!({"as_floats": scales}))];
        args.extend(extra);
        let op = Op {
            target,
            inputs: vec![(aotc_abi::DType::F32, input.clone())],
            args,
            outputs: vec![(aotc_abi::DType::F32, vec![json!({"as_int": 1}), json!({"as_int": 2}), h, w])],
            sym_int_values: json!({}),
            range_constraints: ranges.clone(),
        };
        let xs: Vec<Arr> =
            [(8, 12), (7, 4)].iter().map(|&(a, b)| Arr::random(&[1, 2, a, b], -2.0, 2.0, a as u64)).collect();
        let got = op.run(&xs.iter().map(|x| vec![x.tensor()]).collect::<Vec<_>>());
        for (x, g) in xs.iter().zip(&got) {
            let out = [(x.shape[2] as f64 * scales[0]) as usize, (x.shape[3] as f64 * scales[1]) as usize];
            one_node::check(
                &format!("{target} of {:?}", x.shape),
                &g[0],
                &upsample_ref(x, out, linear, false, scales.map(Some)),
            );
        }
    }
}

// ---- col2im ----

#[allow(clippy::too_many_arguments)]
fn col2im_ref(
    cols: &Arr,
    out: [usize; 2],
    k: [usize; 2],
    dilation: [usize; 2],
    padding: [usize; 2],
    stride: [usize; 2],
) -> Arr {
    let blocks: Vec<usize> =
        (0..2).map(|d| (out[d] + 2 * padding[d] - dilation[d] * (k[d] - 1) - 1) / stride[d] + 1).collect();
    let channels = cols.shape[1] / (k[0] * k[1]);
    let mut img = Arr::zeros(&[cols.shape[0], channels, out[0], out[1]]);
    each(&[cols.shape[0], channels, k[0], k[1], blocks[0], blocks[1]], &mut |i| {
        let (h, w) = (
            (i[4] * stride[0] + i[2] * dilation[0]) as i64 - padding[0] as i64,
            (i[5] * stride[1] + i[3] * dilation[1]) as i64 - padding[1] as i64,
        );
        if (0..out[0] as i64).contains(&h) && (0..out[1] as i64).contains(&w) {
            let at = img.offset(&[i[0], i[1], h as usize, w as usize]);
            img.data[at] += cols.get(&[i[0], (i[1] * k[0] + i[2]) * k[1] + i[3], i[4] * blocks[1] + i[5]]);
        }
    });
    img
}

#[test]
fn col2im_with_stride_dilation_and_padding() {
    let (out, k, dilation, padding, stride) = ([7, 6], [2, 3], [2, 1], [1, 2], [2, 3]);
    let blocks = [(7 + 2 - 2 - 1) / 2 + 1, (6 + 4 - 2 - 1) / 3 + 1];
    let cols = Arr::random(&[2, 12, blocks[0] * blocks[1]], -2.0, 2.0, 28);
    let want = col2im_ref(&cols, out, k, dilation, padding, stride);
    let args = || {
        vec![
            ("self", tensor_arg(0)),
            ("output_size", ints(&[7, 6])),
            ("kernel_size", ints(&[2, 3])),
            ("dilation", ints(&[2, 1])),
            ("padding", ints(&[1, 2])),
            ("stride", ints(&[2, 3])),
        ]
    };
    Op::new("col2im.default", &[&cols], args(), &[&want.shape]).check("col2im", &[&cols], &[&want]);
    let unbatched = Arr { shape: cols.shape[1..].to_vec(), data: cols.data[..cols.data.len() / 2].to_vec() };
    let want = Arr { shape: want.shape[1..].to_vec(), data: want.data[..want.data.len() / 2].to_vec() };
    Op::new("col2im.default", &[&unbatched], args(), &[&want.shape]).check("unbatched col2im", &[&unbatched], &[&want]);
    let wrong = Arr::zeros(&[2, 12, 5]);
    let (_dir, bad) = Op::new("col2im.default", &[&wrong], args(), &[&[2, 2, 7, 6]]).compile();
    fails_with(&bad, "the input's dimension 2 holds one column per block: 5 == 12 does not hold");
}
