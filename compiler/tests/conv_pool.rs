//! Convolution and pooling against reference implementations written here (direct loops
//! following PyTorch's kernels), over argument combinations the recorded fixtures leave
//! out: groups with dilation, transposed convolutions with groups, their gradients,
//! NaN and all -inf windows in max pooling, partial windows of every pooling kind.
//!
//! Each case is a one-node program built from a fixture's archive, compiled with the CLI
//! and run through the loader.

mod common;
mod one_node;

use aotc_abi::DType;
use common::fails_with;
use one_node::{each, ints, tensor_arg, Arr, Op};
use serde_json::{json, Value as Json};

/// Deterministic values in [-1, 1), distinct enough that max pooling has no ties.
fn random(shape: &[usize], seed: u64) -> Arr {
    Arr::random(shape, -1.0, 1.0, seed)
}

// ---- convolution ----

/// A convolution's geometry. Its kernel slides over the wide side (the input of a
/// regular convolution, the output of a transposed one) with one window per position of
/// the narrow side; the weight is [narrow channels, wide channels / groups, kernel...].
struct Conv {
    batch: usize,
    wide_channels: usize,
    narrow_channels: usize,
    groups: usize,
    wide: Vec<usize>,
    narrow: Vec<usize>,
    kernel: Vec<usize>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
}

impl Conv {
    /// A regular convolution of `input` (the wide side).
    #[allow(clippy::too_many_arguments)]
    fn regular(
        batch: usize,
        channels: [usize; 2],
        groups: usize,
        input: &[usize],
        kernel: &[usize],
        stride: &[i64],
        padding: &[i64],
        dilation: &[i64],
    ) -> Conv {
        let narrow = (0..input.len())
            .map(|d| {
                ((input[d] as i64 + 2 * padding[d] - dilation[d] * (kernel[d] as i64 - 1) - 1) / stride[d] + 1) as usize
            })
            .collect();
        Conv {
            batch,
            wide_channels: channels[0],
            narrow_channels: channels[1],
            groups,
            wide: input.to_vec(),
            narrow,
            kernel: kernel.to_vec(),
            stride: stride.to_vec(),
            padding: padding.to_vec(),
            dilation: dilation.to_vec(),
        }
    }

    /// A transposed convolution of `input` (the narrow side).
    #[allow(clippy::too_many_arguments)]
    fn transposed(
        batch: usize,
        channels: [usize; 2],
        groups: usize,
        input: &[usize],
        kernel: &[usize],
        stride: &[i64],
        padding: &[i64],
        dilation: &[i64],
        output_padding: &[i64],
    ) -> Conv {
        let wide = (0..input.len())
            .map(|d| {
                ((input[d] as i64 - 1) * stride[d] - 2 * padding[d]
                    + dilation[d] * (kernel[d] as i64 - 1)
                    + output_padding[d]
                    + 1) as usize
            })
            .collect();
        Conv {
            batch,
            wide_channels: channels[1],
            narrow_channels: channels[0],
            groups,
            wide,
            narrow: input.to_vec(),
            kernel: kernel.to_vec(),
            stride: stride.to_vec(),
            padding: padding.to_vec(),
            dilation: dilation.to_vec(),
        }
    }

    fn wide_shape(&self) -> Vec<usize> {
        [self.batch, self.wide_channels].into_iter().chain(self.wide.iter().copied()).collect()
    }

    fn narrow_shape(&self) -> Vec<usize> {
        [self.batch, self.narrow_channels].into_iter().chain(self.narrow.iter().copied()).collect()
    }

    fn weight_shape(&self) -> Vec<usize> {
        [self.narrow_channels, self.wide_channels / self.groups]
            .into_iter()
            .chain(self.kernel.iter().copied())
            .collect()
    }

    /// Every (wide, weight, narrow) element triple the convolution multiplies.
    fn terms(&self) -> Vec<(usize, usize, usize)> {
        let (wide, weight, narrow) =
            (Arr::zeros(&self.wide_shape()), Arr::zeros(&self.weight_shape()), Arr::zeros(&self.narrow_shape()));
        let (wg, ng) = (self.wide_channels / self.groups, self.narrow_channels / self.groups);
        let mut out = vec![];
        each(&narrow.shape, &mut |n| {
            let group = n[1] / ng;
            each(&weight.shape[1..], &mut |wk| {
                let pos: Vec<i64> = (0..self.kernel.len())
                    .map(|d| n[2 + d] as i64 * self.stride[d] - self.padding[d] + wk[1 + d] as i64 * self.dilation[d])
                    .collect();
                if pos.iter().zip(&self.wide).all(|(&p, &s)| p >= 0 && (p as usize) < s) {
                    let wi: Vec<usize> =
                        [n[0], group * wg + wk[0]].into_iter().chain(pos.iter().map(|&p| p as usize)).collect();
                    let ki: Vec<usize> = [n[1]].into_iter().chain(wk.iter().copied()).collect();
                    out.push((wide.offset(&wi), weight.offset(&ki), narrow.offset(n)));
                }
            });
        });
        out
    }
}

fn conv_args(c: &Conv, transposed: bool, output_padding: &[i64]) -> Vec<(&'static str, Json)> {
    vec![
        ("stride", ints(&c.stride)),
        ("padding", ints(&c.padding)),
        ("dilation", ints(&c.dilation)),
        ("transposed", json!({"as_bool": transposed})),
        ("output_padding", ints(output_padding)),
        ("groups", json!({"as_int": c.groups})),
    ]
}

/// A regular convolution: x is the wide side, the result the narrow one.
fn check_regular(c: &Conv, bias: bool) {
    let (x, w, b) = (random(&c.wide_shape(), 1), random(&c.weight_shape(), 2), random(&[c.narrow_channels], 3));
    let mut y = Arr::zeros(&c.narrow_shape());
    for (xi, wi, yi) in c.terms() {
        y.data[yi] += x.data[xi] * w.data[wi];
    }
    if bias {
        each(&y.shape.clone(), &mut |i| {
            let at = y.offset(i);
            y.data[at] += b.data[i[1]]
        });
    }
    let mut args = vec![
        ("input", tensor_arg(0)),
        ("weight", tensor_arg(1)),
        ("bias", if bias { tensor_arg(2) } else { json!({"as_none": true}) }),
    ];
    args.extend(conv_args(c, false, &vec![0; c.kernel.len()]));
    let inputs: Vec<&Arr> = [&x, &w].into_iter().chain(bias.then_some(&b)).collect();
    Op::new("convolution.default", &inputs, args, &[&y.shape]).check("convolution", &inputs, &[&y]);
}

/// A transposed convolution: x is the narrow side, the result the wide one.
fn check_transposed(c: &Conv, output_padding: &[i64]) {
    let (x, w) = (random(&c.narrow_shape(), 4), random(&c.weight_shape(), 5));
    let mut y = Arr::zeros(&c.wide_shape());
    for (yi, wi, xi) in c.terms() {
        y.data[yi] += x.data[xi] * w.data[wi];
    }
    let mut args = vec![("input", tensor_arg(0)), ("weight", tensor_arg(1)), ("bias", json!({"as_none": true}))];
    args.extend(conv_args(c, true, output_padding));
    Op::new("convolution.default", &[&x, &w], args, &[&y.shape]).check("transposed convolution", &[&x, &w], &[&y]);
}

/// All three gradients, of a regular or a transposed convolution.
fn check_backward(c: &Conv, transposed: bool, output_padding: &[i64]) {
    let (wide, narrow) = (random(&c.wide_shape(), 6), random(&c.narrow_shape(), 7));
    let w = random(&c.weight_shape(), 8);
    // The forward's input x and output gradient g.
    let (x, g) = if transposed { (&narrow, &wide) } else { (&wide, &narrow) };
    let mut grad_x = Arr::zeros(&x.shape);
    let mut grad_w = Arr::zeros(&w.shape);
    let mut grad_b = Arr::zeros(&[g.shape[1]]);
    for (wi, ki, ni) in c.terms() {
        let (xi, gi) = if transposed { (ni, wi) } else { (wi, ni) };
        grad_x.data[xi] += g.data[gi] * w.data[ki];
        grad_w.data[ki] += g.data[gi] * x.data[xi];
    }
    each(&g.shape, &mut |i| grad_b.data[i[1]] += g.data[g.offset(i)]);
    let mut args = vec![
        ("grad_output", tensor_arg(0)),
        ("input", tensor_arg(1)),
        ("weight", tensor_arg(2)),
        ("bias_sizes", ints(&[g.shape[1] as i64])),
    ];
    args.extend(conv_args(c, transposed, output_padding));
    args.push(("output_mask", json!({"as_bools": [true, true, true]})));
    Op::new("convolution_backward.default", &[g, x, &w], args, &[&grad_x.shape, &grad_w.shape, &grad_b.shape]).check(
        "convolution gradients (input, weight, bias)",
        &[g, x, &w],
        &[&grad_x, &grad_w, &grad_b],
    );
}

/// Groups 2 (4 → 6 channels), stride (2, 1), dilation (2, 1), padding 1: 7x6 → 3x7.
fn grouped_dilated_2d() -> Conv {
    Conv::regular(2, [4, 6], 2, &[7, 6], &[3, 2], &[2, 1], &[1, 1], &[2, 1])
}

/// Groups 2 (4 → 6 channels), stride (2, 3), dilation (2, 1), output_padding (1, 2): 3x4 → 8x13.
fn grouped_dilated_transposed_2d() -> Conv {
    Conv::transposed(2, [4, 6], 2, &[3, 4], &[3, 2], &[2, 3], &[1, 0], &[2, 1], &[1, 2])
}

#[test]
fn regular_convolutions_match_the_reference() {
    check_regular(&grouped_dilated_2d(), true);
    // Depthwise 1-D, padding 2, stride 3, dilation 2: 10 → 4.
    check_regular(&Conv::regular(1, [3, 3], 3, &[10], &[3], &[3], &[2], &[2]), true);
    // 3-D, padding along one dimension only.
    check_regular(&Conv::regular(1, [2, 2], 1, &[4, 5, 3], &[2, 3, 1], &[1, 1, 1], &[1, 0, 0], &[1, 1, 1]), false);
}

#[test]
fn transposed_convolutions_match_the_reference() {
    check_transposed(&grouped_dilated_transposed_2d(), &[1, 2]);
    // An output_padding beyond the stride (allowed below the dilation): 5 → 11.
    check_transposed(&Conv::transposed(1, [2, 2], 1, &[5], &[3], &[1], &[1], &[3], &[2]), &[2]);
}

#[test]
fn convolution_gradients_match_the_reference() {
    check_backward(&grouped_dilated_2d(), false, &[0, 0]);
    check_backward(&grouped_dilated_transposed_2d(), true, &[1, 2]);
}

// ---- pooling ----

/// Pooling windows along the trailing dims (torch's pooling_output_shape).
struct Pool {
    kernel: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    ceil_mode: bool,
}

impl Pool {
    fn output(&self, input: &[usize]) -> Vec<usize> {
        input
            .iter()
            .enumerate()
            .map(|(d, &n)| {
                let (k, s, p, dl) = (self.kernel[d], self.stride[d], self.padding[d], self.dilation[d]);
                let span = n as i64 + 2 * p - dl * (k - 1) - 1 + if self.ceil_mode { s - 1 } else { 0 };
                let mut out = span.div_euclid(s) + 1;
                if self.ceil_mode && (out - 1) * s >= n as i64 + p {
                    out -= 1;
                }
                out as usize
            })
            .collect()
    }

    fn args(&self) -> Vec<(&'static str, Json)> {
        vec![
            ("kernel_size", ints(&self.kernel)),
            ("stride", ints(&self.stride)),
            ("padding", ints(&self.padding)),
            ("ceil_mode", json!({"as_bool": self.ceil_mode})),
        ]
    }
}

/// Splits a shape into its leading dims and `nd` spatial ones.
fn split(shape: &[usize], nd: usize) -> (&[usize], &[usize]) {
    shape.split_at(shape.len() - nd)
}

/// torch's max pooling: values and flat spatial indices (the last NaN wins; an all -inf
/// window reports its first element inside the input).
fn max_pool_reference(x: &Arr, p: &Pool) -> (Arr, Arr) {
    let nd = p.kernel.len();
    let (lead, input) = split(&x.shape, nd);
    let out_shape: Vec<usize> = lead.iter().copied().chain(p.output(input)).collect();
    let (mut values, mut indices) = (Arr::zeros(&out_shape), Arr::zeros(&out_shape));
    each(&out_shape, &mut |o| {
        let (mut best, mut best_at) = (f64::NEG_INFINITY, None);
        let kernel: Vec<usize> = p.kernel.iter().map(|&k| k as usize).collect();
        each(&kernel, &mut |k| {
            let pos: Vec<i64> = (0..nd)
                .map(|d| o[lead.len() + d] as i64 * p.stride[d] - p.padding[d] + k[d] as i64 * p.dilation[d])
                .collect();
            if pos.iter().zip(input).all(|(&q, &n)| q >= 0 && (q as usize) < n) {
                let flat = pos.iter().zip(input).fold(0, |acc, (&q, &n)| acc * n + q as usize);
                let v = x.data[x.offset(
                    &o[..lead.len()].iter().copied().chain(pos.iter().map(|&q| q as usize)).collect::<Vec<_>>(),
                )];
                if best_at.is_none() {
                    best_at = Some(flat);
                }
                if v > best || v.is_nan() {
                    (best, best_at) = (v, Some(flat));
                }
            }
        });
        let at = values.offset(o);
        values.data[at] = best;
        indices.data[at] = best_at.expect("every window holds an input element") as f64;
    });
    (values, indices)
}

fn check_max_pool(x: &Arr, p: &Pool) {
    let nd = p.kernel.len();
    let (values, indices) = max_pool_reference(x, p);
    let mut args = vec![("self", tensor_arg(0))];
    args.extend(p.args());
    args.push(("dilation", ints(&p.dilation)));
    let target = format!("max_pool{nd}d_with_indices.default");
    let mut op = Op::new(&target, &[x], args, &[&values.shape, &indices.shape]);
    op.outputs[1].0 = DType::I64;
    op.check("max pool (values, indices)", &[x], &[&values, &indices]);
}

#[test]
fn max_pooling_matches_the_reference() {
    // Dilation, padding and ceil mode together, one NaN.
    let mut x = random(&[2, 3, 7, 8], 9);
    x.data[17] = f64::NAN;
    check_max_pool(
        &x,
        &Pool { kernel: vec![3, 2], stride: vec![2, 3], padding: vec![1, 1], dilation: vec![2, 1], ceil_mode: true },
    );
    // Windows of -inf only: the index of their first element inside the input.
    let mut x = random(&[1, 1, 5, 5], 10);
    x.data.iter_mut().take(12).for_each(|v| *v = f64::NEG_INFINITY);
    check_max_pool(
        &x,
        &Pool { kernel: vec![3, 3], stride: vec![2, 2], padding: vec![1, 1], dilation: vec![1, 1], ceil_mode: false },
    );
    let x = random(&[2, 5, 4, 6], 11);
    check_max_pool(
        &x,
        &Pool {
            kernel: vec![2, 3, 2],
            stride: vec![1, 2, 2],
            padding: vec![1, 1, 0],
            dilation: vec![1, 1, 2],
            ceil_mode: true,
        },
    );
}

/// torch's avg pooling divisor of window `o` and its clipped range per dimension.
fn avg_window(
    p: &Pool,
    input: &[usize],
    o: &[usize],
    include_pad: bool,
    divisor: Option<i64>,
) -> (Vec<(usize, usize)>, f64) {
    let mut size = 1;
    let mut clipped = 1;
    let ranges = (0..input.len())
        .map(|d| {
            let start = o[d] as i64 * p.stride[d] - p.padding[d];
            let end = (start + p.kernel[d]).min(input[d] as i64 + p.padding[d]);
            size *= end - start;
            let (start, end) = (start.max(0), end.min(input[d] as i64));
            clipped *= end - start;
            (start as usize, end as usize)
        })
        .collect();
    (ranges, divisor.unwrap_or(if include_pad { size } else { clipped }) as f64)
}

fn avg_pool_reference(x: &Arr, p: &Pool, include_pad: bool, divisor: Option<i64>) -> Arr {
    let nd = p.kernel.len();
    let (lead, input) = split(&x.shape, nd);
    let out_shape: Vec<usize> = lead.iter().copied().chain(p.output(input)).collect();
    let mut y = Arr::zeros(&out_shape);
    each(&out_shape, &mut |o| {
        let (ranges, div) = avg_window(p, input, &o[lead.len()..], include_pad, divisor);
        let extent: Vec<usize> = ranges.iter().map(|(s, e)| e - s).collect();
        let mut sum = 0.0;
        each(&extent, &mut |k| {
            sum += x.data[x.offset(
                &o[..lead.len()].iter().copied().chain((0..nd).map(|d| ranges[d].0 + k[d])).collect::<Vec<_>>(),
            )]
        });
        let at = y.offset(o);
        y.data[at] = sum / div;
    });
    y
}

fn avg_args(p: &Pool, include_pad: bool, divisor: Option<i64>) -> Vec<(&'static str, Json)> {
    let mut args = p.args();
    args.push(("count_include_pad", json!({"as_bool": include_pad})));
    args.push(("divisor_override", divisor.map_or(json!({"as_none": true}), |d| json!({"as_int": d}))));
    args
}

#[test]
fn avg_pooling_matches_the_reference() {
    // 9 taps: summed in the expression; the 3-D kernel's 12 below: a reduction.
    let p = Pool { kernel: vec![3, 3], stride: vec![2, 3], padding: vec![1, 1], dilation: vec![1, 1], ceil_mode: true };
    let x = random(&[1, 2, 8, 7], 12);
    for (include_pad, divisor) in [(true, None), (false, None), (false, Some(4))] {
        let y = avg_pool_reference(&x, &p, include_pad, divisor);
        let mut args = vec![("self", tensor_arg(0))];
        args.extend(avg_args(&p, include_pad, divisor));
        Op::new("avg_pool2d.default", &[&x], args, &[&y.shape]).check("avg_pool2d", &[&x], &[&y]);
    }
    let p = Pool {
        kernel: vec![2, 3, 2],
        stride: vec![2, 1, 3],
        padding: vec![1, 1, 0],
        dilation: vec![1, 1, 1],
        ceil_mode: true,
    };
    let x = random(&[3, 5, 4, 7], 13);
    let y = avg_pool_reference(&x, &p, false, None);
    let mut args = vec![("self", tensor_arg(0))];
    args.extend(avg_args(&p, false, None));
    Op::new("avg_pool3d.default", &[&x], args, &[&y.shape]).check("avg_pool3d", &[&x], &[&y]);
}

/// Adaptive window `i` of `n` elements split `out` ways.
fn adaptive(i: usize, n: usize, out: usize) -> (usize, usize) {
    (i * n / out, ((i + 1) * n).div_ceil(out))
}

fn adaptive_reference(x: &Arr, out: &[usize]) -> Arr {
    let (lead, input) = split(&x.shape, out.len());
    let out_shape: Vec<usize> = lead.iter().chain(out).copied().collect();
    let mut y = Arr::zeros(&out_shape);
    each(&out_shape, &mut |o| {
        let ranges: Vec<(usize, usize)> =
            (0..out.len()).map(|d| adaptive(o[lead.len() + d], input[d], out[d])).collect();
        let extent: Vec<usize> = ranges.iter().map(|(s, e)| e - s).collect();
        let mut sum = 0.0;
        each(&extent, &mut |k| {
            sum += x.data[x.offset(
                &o[..lead.len()].iter().copied().chain((0..out.len()).map(|d| ranges[d].0 + k[d])).collect::<Vec<_>>(),
            )]
        });
        let at = y.offset(o);
        y.data[at] = sum / extent.iter().product::<usize>() as f64;
    });
    y
}

#[test]
fn adaptive_pooling_matches_the_reference() {
    for (target, shape, out) in [
        ("_adaptive_avg_pool2d.default", vec![2, 3, 7, 5], vec![3, 4]),
        ("adaptive_avg_pool1d.default", vec![2, 10], vec![4]),
        ("_adaptive_avg_pool3d.default", vec![1, 2, 6, 5, 9], vec![4, 5, 3]),
    ] {
        let x = random(&shape, 14);
        let y = adaptive_reference(&x, &out);
        let args =
            vec![("self", tensor_arg(0)), ("output_size", ints(&out.iter().map(|&o| o as i64).collect::<Vec<_>>()))];
        Op::new(target, &[&x], args, &[&y.shape]).check(target, &[&x], &[&y]);
    }
}

#[test]
fn pooling_gradients_match_the_reference() {
    // max: each window's gradient goes to the element its index names.
    let p = Pool { kernel: vec![3, 2], stride: vec![2, 1], padding: vec![1, 1], dilation: vec![2, 1], ceil_mode: true };
    let x = random(&[2, 2, 7, 5], 15);
    let (values, indices) = max_pool_reference(&x, &p);
    let g = random(&values.shape, 16);
    let mut want = Arr::zeros(&x.shape);
    let plane: usize = x.shape[2..].iter().product();
    each(&g.shape, &mut |o| {
        want.data[(o[0] * x.shape[1] + o[1]) * plane + indices.data[indices.offset(o)] as usize] += g.data[g.offset(o)]
    });
    let mut args = vec![("grad_output", tensor_arg(0)), ("self", tensor_arg(1))];
    args.extend(p.args());
    args.extend([("dilation", ints(&p.dilation)), ("indices", tensor_arg(2))]);
    let mut op = Op::new("max_pool2d_with_indices_backward.default", &[&g, &x, &indices], args, &[&want.shape]);
    op.inputs[2].0 = DType::I64;
    op.check("max_pool2d backward", &[&g, &x, &indices], &[&want]);

    // avg: each window's gradient spread over its clipped range, over its divisor.
    let p = Pool { kernel: vec![3, 2], stride: vec![2, 2], padding: vec![1, 1], dilation: vec![1, 1], ceil_mode: true };
    let x = random(&[1, 2, 6, 7], 17);
    let out_shape: Vec<usize> = x.shape[..2].iter().copied().chain(p.output(&x.shape[2..])).collect();
    let g = random(&out_shape, 18);
    for (include_pad, divisor) in [(true, None), (false, None), (false, Some(3))] {
        let mut want = Arr::zeros(&x.shape);
        each(&g.shape, &mut |o| {
            let (ranges, div) = avg_window(&p, &x.shape[2..], &o[2..], include_pad, divisor);
            for h in ranges[0].0..ranges[0].1 {
                for w in ranges[1].0..ranges[1].1 {
                    let at = want.offset(&[o[0], o[1], h, w]);
                    want.data[at] += g.data[g.offset(o)] / div;
                }
            }
        });
        let mut args = vec![("grad_output", tensor_arg(0)), ("self", tensor_arg(1))];
        args.extend(avg_args(&p, include_pad, divisor));
        Op::new("avg_pool2d_backward.default", &[&g, &x], args, &[&want.shape]).check(
            "avg_pool2d backward",
            &[&g, &x],
            &[&want],
        );
    }

    // adaptive: each window's gradient spread over it, over its size.
    let x = random(&[2, 3, 7, 5], 19);
    let g = random(&[2, 3, 3, 4], 20);
    let mut want = Arr::zeros(&x.shape);
    each(&g.shape, &mut |o| {
        let (h, w) = (adaptive(o[2], 7, 3), adaptive(o[3], 5, 4));
        let size = ((h.1 - h.0) * (w.1 - w.0)) as f64;
        for i in h.0..h.1 {
            for j in w.0..w.1 {
                let at = want.offset(&[o[0], o[1], i, j]);
                want.data[at] += g.data[g.offset(o)] / size;
            }
        }
    });
    let args = vec![("grad_output", tensor_arg(0)), ("self", tensor_arg(1))];
    Op::new("_adaptive_avg_pool2d_backward.default", &[&g, &x], args, &[&want.shape]).check(
        "adaptive_avg_pool2d backward",
        &[&g, &x],
        &[&want],
    );
}

// ---- shape rules ----

/// Operands that do not fit together are refused with an error naming the rule.
#[test]
fn inconsistent_operands_are_refused() {
    let conv = |x: &[usize], w: &[usize], stride: i64, padding: i64, groups: i64, out: &[usize]| {
        let args = vec![
            ("input", tensor_arg(0)),
            ("weight", tensor_arg(1)),
            ("bias", json!({"as_none": true})),
            ("stride", ints(&[stride])),
            ("padding", ints(&[padding])),
            ("dilation", ints(&[1])),
            ("transposed", json!({"as_bool": false})),
            ("output_padding", ints(&[0])),
            ("groups", json!({"as_int": groups})),
        ];
        Op::new("convolution.default", &[&Arr::zeros(x), &Arr::zeros(w)], args, &[out]).compile()
    };
    let pool = |x: &[usize], kernel: i64, padding: i64, out: &[usize]| {
        let args = vec![
            ("self", tensor_arg(0)),
            ("kernel_size", ints(&[kernel])),
            ("stride", ints(&[1])),
            ("padding", ints(&[padding])),
        ];
        let mut op = Op::new("max_pool2d_with_indices.default", &[&Arr::zeros(x)], args, &[out, out]);
        op.outputs[1].0 = DType::I64;
        op.compile()
    };
    let cases = [
        (
            conv(&[1, 4, 8], &[2, 3, 3], 1, 0, 1, &[1, 2, 6]),
            "the input has weight.size(1) * groups channels: 4 == 3 does not hold",
        ),
        (
            conv(&[1, 4, 8], &[3, 2, 3], 1, 0, 2, &[1, 3, 6]),
            "the output channels (weight.size(0)) (3) must divide by groups (2)",
        ),
        (
            conv(&[1, 4, 2], &[2, 4, 5], 1, 1, 1, &[1, 2, 1]),
            "spatial dimension 0 of size 2 (padding 1) must hold at least one window of 5",
        ),
        (conv(&[1, 4, 8], &[2, 4, 3], 0, 0, 1, &[1, 2, 6]), "stride and dilation must be positive"),
        (conv(&[1, 4, 8], &[2, 4, 3], 1, 0, 0, &[1, 2, 6]), "groups must be positive, got 0"),
        (
            pool(&[1, 2, 8, 8], 3, 2, &[1, 2, 10, 10]),
            "padding 2 of spatial dimension 0 must be at most half of the kernel (1)",
        ),
        (pool(&[1, 8, 8], 0, 0, &[1, 9, 9]), "kernel_size and dilation must be positive"),
    ];
    for ((_dir, out), needle) in cases {
        fails_with(&out, needle);
    }
    // A gradient of another shape than the pooled output.
    let args = vec![
        ("grad_output", tensor_arg(0)),
        ("self", tensor_arg(1)),
        ("kernel_size", ints(&[2])),
        ("stride", ints(&[2])),
        ("padding", ints(&[0])),
        ("ceil_mode", json!({"as_bool": false})),
        ("count_include_pad", json!({"as_bool": true})),
        ("divisor_override", json!({"as_none": true})),
    ];
    let (_dir, out) = Op::new(
        "avg_pool2d_backward.default",
        &[&Arr::zeros(&[1, 2, 5, 4]), &Arr::zeros(&[1, 2, 8, 8])],
        args,
        &[&[1, 2, 8, 8]],
    )
    .compile();
    fails_with(&out, "grad_output has the pooled shape at dimension 2: 5 == 4 does not hold");
}
