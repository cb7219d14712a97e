//! Row and convolution kernel micro-benchmark, single-threaded:
//! `cargo bench -p aotc-embedded --bench kernels`.
//!
//! Prints each kernel's median time per call over several runs, through the entry points
//! the generated code calls (so on the widest vector set this CPU runs);
//! `AOTC_KERNELS=rows|stems|fire|planes|gemm|pointwise|dense` runs one group (planes: depthwise and max pool), and
//! `AOTC_KERNEL_ROW=text` only the convolution and pool rows whose name holds `text` (one row under `perf record`). Outside a loaded
//! library the calls run on the calling thread alone. On a busy machine compare the rows
//! of runs made alike, not single runs.

use aotc_abi::conv::{Conv2d, InputTransform, WeightForm};
use aotc_abi::gemm::Activation;
use aotc_embedded::{
    __aotc_conv2d_f32, __aotc_gelu_f32, __aotc_layer_norm_f32, __aotc_max_pool2d_f32, __aotc_softmax_f32,
};
use std::time::{Duration, Instant};

/// The median time of `f` over 11 runs of as many calls as fill about 20 ms.
fn median(mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    f();
    let once = start.elapsed().max(Duration::from_nanos(100));
    let calls = (Duration::from_millis(20).as_nanos() / once.as_nanos()).clamp(1, 100_000) as u32;
    let mut runs: Vec<Duration> = (0..11)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                f();
            }
            start.elapsed() / calls
        })
        .collect();
    runs.sort();
    runs[runs.len() / 2]
}

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919) % 113) as f32 / 11.0 - 5.0).collect()
}

/// Whether the row `name` runs: `AOTC_KERNEL_ROW` unset or a part of it.
fn selected(name: &str) -> bool {
    std::env::var("AOTC_KERNEL_ROW").map_or(true, |row| name.contains(&row))
}

fn report(name: &str, time: Duration) {
    println!("{name:<44} {:>10.1} us", time.as_secs_f64() * 1e6);
}

fn rows() {
    for (rows, len) in [(256, 1024), (1024, 197), (4096, 64)] {
        let x = values(rows * len);
        let mut out = vec![0f32; rows * len];
        for log in [0, 1] {
            // SAFETY: both hold rows * len floats.
            let t = median(|| unsafe {
                __aotc_softmax_f32(out.as_mut_ptr(), x.as_ptr(), rows as i64, len as i64, log);
            });
            report(&format!("{}softmax {rows} x {len}", if log == 1 { "log_" } else { "" }), t);
        }
        let (w, b) = (values(len), values(len + 3)[3..].to_vec());
        // SAFETY: x and out hold rows * len floats, w and b len.
        let t = median(|| unsafe {
            __aotc_layer_norm_f32(
                out.as_mut_ptr(),
                x.as_ptr(),
                w.as_ptr(),
                b.as_ptr(),
                rows as i64,
                len as i64,
                1,
                1,
                1e-5f64.to_bits() as i64,
            );
        });
        report(&format!("layer_norm {rows} x {len}"), t);
    }
    let x = values(1 << 20);
    let mut out = vec![0f32; x.len()];
    // SAFETY: both hold x.len() floats.
    let t = median(|| unsafe { __aotc_gelu_f32(out.as_mut_ptr(), x.as_ptr(), x.len() as i64) });
    report("gelu 1M", t);
}

/// A geometry of `channels` planes of `hw`, square kernel `k`, stride `s`, padding `p`;
/// `depthwise` (one group per channel) or a max pool.
fn geometry(channels: usize, hw: usize, k: usize, s: usize, p: usize, depthwise: bool) -> Conv2d {
    let out = (hw + 2 * p - k) / s + 1;
    Conv2d {
        batch: 1,
        channels,
        height: hw,
        width: hw,
        out_channels: channels,
        kernel: [k, k],
        out_size: [out, out],
        stride: [s, s],
        padding: [p, p],
        dilation: [1, 1],
        groups: if depthwise { channels } else { 1 },
        has_bias: depthwise,
        weight: WeightForm::default(),
        residual: false,
        activation: if depthwise { Activation::Relu } else { Activation::None },
        pool: false,
        input: InputTransform::None,
    }
}

/// One call of the library's convolution on buffers that hold what `g` describes (the
/// scratch `g.scratch_len()` floats, no residual).
fn convolve(g: &Conv2d, out: &mut [f32], x: &[f32], weight: &[f32], bias: &[f32], scratch: &mut [f32]) {
    convolve_transformed(g, out, x, weight, bias, scratch, &[], &[])
}

/// [`convolve`] with the input transform's `scale` and `shift` (`[C]` each), passed when the
/// geometry's `input` is a batch norm and ReLU.
#[allow(clippy::too_many_arguments)]
fn convolve_transformed(
    g: &Conv2d,
    out: &mut [f32],
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    scratch: &mut [f32],
    scale: &[f32],
    shift: &[f32],
) {
    let (x_len, weight_len, out_len) = g.lens().unwrap();
    let transformed = g.input == InputTransform::ScaleShiftRelu;
    assert!(!transformed || (scale.len() == g.channels && shift.len() == g.channels));
    assert!(x.len() == x_len && weight.len() == weight_len && out.len() == out_len);
    assert!(scratch.len() == g.scratch_len().unwrap() && bias.len() == g.out_channels);
    let list = g.to_list();
    // SAFETY: the buffers hold what the geometry describes (checked above).
    unsafe {
        __aotc_conv2d_f32(
            out.as_mut_ptr(),
            x.as_ptr(),
            weight.as_ptr(),
            bias.as_ptr(),
            scratch.as_mut_ptr(),
            std::ptr::null(),
            if transformed { scale.as_ptr() } else { std::ptr::null() },
            if transformed { shift.as_ptr() } else { std::ptr::null() },
            list.as_ptr(),
            list.len() as i64,
        )
    }
}

fn convolutions() {
    // MobileNet's, and EfficientNet-B0's with their SiLU (one also with ReLU: SiLU's cost).
    let (relu, silu) = (Activation::Relu, Activation::Silu);
    for (channels, hw, k, s, p, activation) in [
        (96, 56, 3, 1, 1, relu),
        (96, 112, 3, 2, 1, relu),
        (240, 14, 5, 1, 2, relu),
        (672, 14, 5, 2, 2, relu),
        (1152, 7, 5, 1, 2, relu),
        (480, 14, 3, 1, 1, relu),
        (144, 56, 3, 1, 1, relu),
        (144, 56, 3, 1, 1, silu),
        (672, 14, 5, 1, 2, silu),
    ] {
        let name = format!("depthwise {k}x{k} /{s} {channels} x {hw}x{hw} + {activation:?}").to_lowercase();
        if !selected(&name) {
            continue;
        }
        let g = Conv2d { activation, ..geometry(channels, hw, k, s, p, true) };
        let (x_len, weight_len, out_len) = g.lens().unwrap();
        let (x, weight, bias) = (values(x_len), values(weight_len), values(channels));
        let (mut out, mut scratch) = (vec![0f32; out_len], vec![0f32; g.scratch_len().unwrap()]);
        let t = median(|| convolve(&g, &mut out, &x, &weight, &bias, &mut scratch));
        report(&name, t);
    }
    // ResNet's, a 2x2, a stride-1 one, and SqueezeNet 1.1's three.
    for (channels, hw, k, s, p) in [
        (64, 112, 3, 2, 1),
        (32, 64, 2, 2, 0),
        (64, 56, 3, 1, 1),
        (64, 111, 3, 2, 0),
        (128, 55, 3, 2, 0),
        (256, 27, 3, 2, 0),
    ] {
        let name = format!("max_pool {k}x{k} /{s} {channels} x {hw}x{hw}");
        if !selected(&name) {
            continue;
        }
        let g = geometry(channels, hw, k, s, p, false);
        let (x_len, _, out_len) = g.lens().unwrap();
        let x = values(x_len);
        let mut out = vec![0f32; out_len];
        let list = g.to_list();
        // SAFETY: the buffers hold what the geometry describes.
        let t = median(|| unsafe {
            __aotc_max_pool2d_f32(out.as_mut_ptr(), x.as_ptr(), list.as_ptr(), list.len() as i64);
        });
        report(&name, t);
    }
}

/// ResNet's 3x3 convolutions (layer1..layer4 at 224) with the weight as the compiler
/// prepares it: packed as the windows' GEMM's left operand, transposed as a right one (the
/// product with positions as rows), and Winograd-transformed (whose GFLOP/s count the
/// direct computation); GFLOP/s beside the time.
fn gemm_convolutions() {
    for (channels, hw) in [(64, 56), (128, 28), (256, 14), (512, 7)] {
        for form in [WeightForm::Panels, WeightForm::ColumnPanels, WeightForm::Winograd] {
            let g = Conv2d {
                has_bias: true,
                activation: Activation::Relu,
                weight: form,
                ..geometry(channels, hw, 3, 1, 1, false)
            };
            packed_convolution(&g, &format!("conv 3x3 {channels} x {hw}x{hw} + bias + relu, {form:?}"));
        }
    }
    // bench_convnet's layers: 4 images, batch norm, ReLU and the 2x2 max pool fused.
    for (channels, hw) in [(32, 32), (64, 16), (128, 8)] {
        for form in [WeightForm::Panels, WeightForm::Winograd] {
            let g = Conv2d {
                batch: 4,
                out_channels: 2 * channels,
                has_bias: true,
                activation: Activation::Relu,
                pool: true,
                weight: form,
                ..geometry(channels, hw, 3, 1, 1, false)
            };
            packed_convolution(
                &g,
                &format!("conv 3x3 {channels} -> {} x 4x{hw}x{hw} + relu + pool, {form:?}", 2 * channels),
            );
        }
    }
    // DenseNet-121's growth convolutions of its last two blocks: 128 -> 32 at 14x14 and 7x7.
    for hw in [14, 7] {
        for form in [WeightForm::Panels, WeightForm::ColumnPanels, WeightForm::Winograd] {
            let g = Conv2d { out_channels: 32, weight: form, ..geometry(128, hw, 3, 1, 1, false) };
            packed_convolution(&g, &format!("conv 3x3 128 -> 32 x {hw}x{hw}, {form:?}"));
        }
    }
}

/// Stem convolutions (3 input channels, stride 2, at 224: MobileNetV3's, EfficientNet's,
/// SqueezeNet's and ResNet's), weight packed as a left operand; GFLOP/s beside the time.
fn stem_convolutions() {
    for (out_channels, k) in [(16, 3), (24, 3), (32, 3), (64, 3), (64, 7)] {
        let g = Conv2d {
            channels: 3,
            out_channels,
            has_bias: true,
            activation: Activation::Relu,
            weight: WeightForm::Panels,
            groups: 1,
            ..geometry(3, 224, k, 2, k / 2, false)
        };
        packed_convolution(&g, &format!("conv {k}x{k} /2 3 -> {out_channels} x 224x224 + bias + relu"));
    }
    // A small image of rows narrower than a vector (the cnn_float16 fixture's first layer).
    let g = Conv2d {
        batch: 2,
        out_channels: 8,
        has_bias: true,
        weight: WeightForm::Panels,
        groups: 1,
        ..geometry(3, 16, 3, 1, 1, false)
    };
    packed_convolution(&g, "conv 3x3 3 -> 8 x 2x16x16 + bias");
}

/// Times one call of the convolution `g` (one group, no residual) with its weight packed
/// as the compiler packs it for `g.weight`, and reports it as `name` with its GFLOP/s.
fn packed_convolution(g: &Conv2d, name: &str) {
    if !selected(name) {
        return;
    }
    use aotc_abi::gemm::{pack, MR, NR};
    let (depth, out_channels) = (g.depth(), g.out_channels);
    let rows = values(out_channels * depth);
    let weight = match g.weight {
        WeightForm::Winograd => aotc_abi::conv::winograd::transform_weight(&rows, out_channels, g.channels).unwrap(),
        form => {
            let width = if form == WeightForm::Panels { MR } else { NR };
            pack(depth, out_channels, width, |p, o| rows[o * depth + p]).unwrap()
        }
    };
    let (x_len, _, out_len) = g.lens().unwrap();
    let (x, bias, mut out) = (values(x_len), values(out_channels), vec![0f32; out_len]);
    let (scale, shift) = (values(g.channels), values(g.channels + 1)[1..].to_vec());
    let t = median(|| convolve_transformed(g, &mut out, &x, &weight, &bias, &mut [], &scale, &shift));
    let flops = 2.0 * (g.batch * out_channels * depth * g.positions()) as f64;
    println!("{name:<52} {:>10.1} us {:>7.1} GFLOP/s", t.as_secs_f64() * 1e6, flops / t.as_secs_f64() / 1e9);
}

/// SqueezeNet 1.1's expand 3x3 convolutions (few input channels, 4 times as many out), on
/// the windows' GEMM and as Winograd (whose GFLOP/s count the direct computation), as
/// `stem_convolutions`.
fn fire_convolutions() {
    for (channels, hw) in [(16, 55), (32, 27), (48, 13), (64, 13)] {
        for form in [WeightForm::Panels, WeightForm::Winograd] {
            let g = Conv2d {
                out_channels: 4 * channels,
                has_bias: true,
                activation: Activation::Relu,
                weight: form,
                ..geometry(channels, hw, 3, 1, 1, false)
            };
            packed_convolution(
                &g,
                &format!("conv 3x3 {channels} -> {} x {hw}x{hw} + bias + relu, {form:?}", 4 * channels),
            );
        }
    }
}

/// ResNet-50's pointwise convolutions and EfficientNet-B0's expansions with their SiLU (in
/// -> out channels at a plane size, stride 1), weight packed as a left operand, as
/// `stem_convolutions`.
fn pointwise_convolutions() {
    let (relu, silu) = (Activation::Relu, Activation::Silu);
    for (channels, out_channels, hw, activation) in [
        (64, 256, 56, relu),
        (256, 64, 56, relu),
        (512, 128, 28, relu),
        (128, 512, 28, relu),
        (1024, 256, 14, relu),
        (256, 1024, 14, relu),
        (2048, 512, 7, relu),
        (512, 2048, 7, relu),
        (192, 1024, 7, relu),
        (16, 96, 112, silu),
        (40, 240, 28, silu),
        // SqueezeNet 1.1's first fire module: expand 1x1, squeeze.
        (16, 64, 55, relu),
        (128, 16, 55, relu),
    ] {
        // As the compiler packs it: for few positions, as a right operand (the positions
        // as the GEMM's rows).
        let weight =
            if aotc_abi::conv::positions_as_rows(hw * hw) { WeightForm::ColumnPanels } else { WeightForm::Panels };
        let g = Conv2d { out_channels, has_bias: true, activation, weight, ..geometry(channels, hw, 1, 1, 0, false) };
        let name = format!("conv 1x1 {channels} -> {out_channels} x {hw}x{hw} + bias + {activation:?}, {weight:?}");
        packed_convolution(&g, &name.to_lowercase());
    }
}

/// DenseNet-121's bottleneck 1x1 convolutions: a batch norm and ReLU on the concatenated
/// input (the block's features so far), 128 outputs, bias and ReLU after.
fn dense_convolutions() {
    for (channels, hw) in [(64, 56), (160, 56), (256, 56), (128, 28), (480, 28), (256, 14), (992, 14), (512, 7)] {
        for weight in [WeightForm::Panels, WeightForm::ColumnPanels] {
            let g = Conv2d {
                out_channels: 128,
                has_bias: true,
                activation: Activation::Relu,
                input: InputTransform::ScaleShiftRelu,
                weight,
                ..geometry(channels, hw, 1, 1, 0, false)
            };
            let name = format!("conv 1x1 bn-relu {channels} -> 128 x {hw}x{hw} + bias + relu, {weight:?}");
            packed_convolution(&g, &name.to_lowercase());
        }
    }
}

fn main() {
    let groups: [(&str, fn()); 7] = [
        ("rows", rows),
        ("stems", stem_convolutions),
        ("fire", fire_convolutions),
        ("planes", convolutions),
        ("gemm", gemm_convolutions),
        ("pointwise", pointwise_convolutions),
        ("dense", dense_convolutions),
    ];
    let only = std::env::var("AOTC_KERNELS").ok();
    for (name, group) in groups {
        if only.as_deref().is_none_or(|o| o == name) {
            group();
        }
    }
}
