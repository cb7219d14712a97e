//! The float32 2-D convolution the generated code calls (`aotc_abi::conv::SYMBOL`): per
//! image and group, a GEMM of the weight `[O/G, C/G * KH * KW]` by the input's windows
//! (an implicit im2col: [`columns`] writes it in the GEMM's packed layout; for a 1x1 kernel
//! the input planes themselves), the bias and the residual added in the GEMM's output pass
//! (`gemm::Addend`: no pass over the output of its own); depthwise
//! convolutions have their own plane-by-plane kernel ([`depthwise`]) in the scratch the
//! compiler sized, and 3x3 ones whose weight the compiler transformed, Winograd's
//! ([`winograd`]). A weight the compiler packed (`WeightForm::Panels`) is the GEMM's left
//! operand as it is; one it packed as a right operand (`WeightForm::ColumnPanels`, planes
//! of few positions) runs the GEMM transposed ([`transposed`]). The GEMMs and the
//! depthwise planes run on the call's thread budget.

mod columns;
mod depthwise;
#[cfg(target_arch = "x86_64")]
mod direct;
mod frames;
mod max_pool;
mod scaled;
mod transposed;
mod winograd;

pub use max_pool::__aotc_max_pool2d_f32;

use crate::gemm::{gemm_packed, Operands, Packed, Problem};
use crate::guards::refuse_extern_call;
use crate::pool::{self, for_items};
use crate::spare::Handle;
use aotc_abi::conv::{Algorithm, Conv2d, InputTransform, WeightForm};
use scaled::Channels;

/// `out = activation(conv(input_transform(x), weight) (+ bias) (+ residual))`, the
/// geometry `geometry[..count]` in [`Conv2d::to_list`]'s order (its flags say which parts
/// exist). `bias`, `residual`, `input_scale` and `input_shift` are read only when the
/// geometry says there is one; `scratch` holds `scratch_len()` floats (none unless
/// depthwise).
///
/// # Safety
/// The buffers hold the contiguous tensors the geometry describes (`residual` shaped as
/// `out`; `input_scale` `[N, C]` for `InputTransform::Scale`, `input_scale` and
/// `input_shift` `[C]` each for `ScaleShiftRelu`), and `out` and `scratch` overlap nothing
/// else.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn __aotc_conv2d_f32(
    out: *mut f32,
    x: *const f32,
    weight: *const f32,
    bias: *const f32,
    scratch: *mut f32,
    residual: *const f32,
    input_scale: *const f32,
    input_shift: *const f32,
    geometry: *const i64,
    count: i64,
) {
    // SAFETY: the generated code passes its geometry list and its length.
    let list = unsafe { std::slice::from_raw_parts(geometry, count.max(0) as usize) };
    // The compiler passes only geometries it checked (statically or by guards); a list
    // that is not consistent writes nothing rather than out of bounds, and fails the call.
    let Some((g, (x_len, weight_len, out_len))) = Conv2d::from_list(list).and_then(|g| Some((g, g.lens()?))) else {
        return refuse_extern_call("__aotc_conv2d_f32");
    };
    if g.batch == 0 {
        return;
    }
    let (image_in, image_out) = (x_len / g.batch, out_len / g.batch);
    // SAFETY: the caller's contract (sizes from the geometry).
    let (x, weight, out) = unsafe {
        (
            std::slice::from_raw_parts(x, x_len),
            std::slice::from_raw_parts(weight, weight_len),
            std::slice::from_raw_parts_mut(out, out_len),
        )
    };
    // SAFETY: as above.
    let bias = g.has_bias.then(|| unsafe { std::slice::from_raw_parts(bias, g.out_channels) });
    // SAFETY: as above: the residual is shaped as the output.
    let residual = g.residual.then(|| unsafe { std::slice::from_raw_parts(residual, out_len) });
    // SAFETY: as above: a factor per image and input channel, or per input channel and an
    // offset as many.
    let (input_scale, input_shift) = unsafe {
        match g.input {
            InputTransform::None => (None, None),
            InputTransform::Scale => (Some(std::slice::from_raw_parts(input_scale, g.batch * g.channels)), None),
            InputTransform::ScaleShiftRelu => (
                Some(std::slice::from_raw_parts(input_scale, g.channels)),
                Some(std::slice::from_raw_parts(input_shift, g.channels)),
            ),
        }
    };
    if image_out == 0 {
        return;
    }
    // SAFETY: as above (`lens` checked that the scratch length does not overflow).
    let scratch = unsafe { std::slice::from_raw_parts_mut(scratch, g.scratch_len().unwrap_or(0)) };
    if image_in == 0 {
        // No input channels: the sums are empty.
        start_sums(&g, bias, residual, out);
        return crate::activation::apply(g.activation, out);
    }
    match g.algorithm() {
        Algorithm::Depthwise => return depthwise::run(&g, x, weight, bias, residual, scratch, out),
        Algorithm::Winograd => return winograd::run(&g, x, weight, bias, residual, out, pool::threads()),
        Algorithm::Columns | Algorithm::Pointwise => {}
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(k) = direct::kernel(&g) {
        let Some(len) = g.packed_group_len() else { return refuse_extern_call("__aotc_conv2d_f32") };
        return direct::run(&g, &k, x, &weight[..len], bias, residual, out, pool::threads(), Handle::current());
    }
    // Image i's input and output, and (from `from_list`: a pointwise convolution of one
    // group) its input transform.
    let image = |i: usize, x: &[f32], out: &mut [f32]| {
        // The running thread's seat's buffers (images may run on workers): those it used
        // last call, still in its core's caches (another core's would first be moved line
        // by line).
        let spare = Handle::current();
        let transform = input_scale.map(|s| Channels {
            scale: if g.input == InputTransform::Scale { &s[i * g.channels..][..g.channels] } else { s },
            shift: input_shift,
        });
        for group in 0..g.groups {
            let bias = bias.map(|b| &b[group * g.group_out_channels()..][..g.group_out_channels()]);
            let planes =
                &x[group * g.group_channels() * g.height * g.width..][..g.group_channels() * g.height * g.width];
            let (og, [out_h, out_w]) = (g.group_out_channels(), g.written_size());
            let group_len = og * out_h * out_w;
            let out = &mut out[group * group_len..][..group_len];
            // (A residual is shaped as the output, never pooled.)
            let residual = residual.map(|r| &r[i * image_out + group * group_len..][..group_len]);
            let sums = Sums { bias, residual };
            let lhs = match (g.weight, g.packed_group_len(), transform) {
                (WeightForm::ColumnPanels, Some(len), _) => {
                    let weight = &weight[group * len..][..len];
                    transposed::product(&g, weight, planes, transform, out, sums, pool::threads());
                    continue;
                }
                (WeightForm::Panels, Some(len), Some(transform)) => {
                    let weight = &weight[group * len..][..len];
                    scaled::product(&g, weight, planes, transform, out, sums, pool::threads());
                    continue;
                }
                (WeightForm::Panels, Some(len), None) => Weight::Packed(&weight[group * len..][..len]),
                _ => Weight::Rows(&weight[group * og * g.depth()..][..og * g.depth()]),
            };
            product(&g, lhs, planes, out, sums, spare);
        }
    };
    // Several images: each thread takes whole images (its GEMMs then run on one thread),
    // rather than every image's GEMMs being cut across the threads and joined; but only
    // with a GEMM's worth of work per thread.
    let work = [g.out_channels, g.positions(), g.depth()].iter().fold(g.batch, |w, &x| w.saturating_mul(x));
    if g.batch > 1 && threads_for(work, 2) > 1 {
        for_items(out, g.batch, image_out, work, &|begin, end, part| {
            for (i, out) in (begin..end).zip(part.chunks_exact_mut(image_out)) {
                image(i, &x[i * image_in..][..image_in], out);
            }
        });
    } else {
        for (i, (x, out)) in x.chunks_exact(image_in).zip(out.chunks_exact_mut(image_out)).enumerate() {
            image(i, x, out);
        }
    }
}

/// The output of a convolution without input channels (empty sums): each output plane's
/// bias plus the residual, where there are such (a pooled plane of one value is that
/// value).
fn start_sums(g: &Conv2d, bias: Option<&[f32]>, residual: Option<&[f32]>, out: &mut [f32]) {
    let [out_h, out_w] = g.written_size();
    let positions = out_h * out_w;
    for (i, plane) in out.chunks_exact_mut(positions).enumerate() {
        let b = bias.map_or(0.0, |b| b[i % g.out_channels]);
        match residual {
            Some(r) => plane.iter_mut().zip(&r[i * positions..]).for_each(|(o, r)| *o = r + b),
            None if bias.is_some() => plane.fill(b),
            None => {}
        }
    }
}

/// The threads for `work` multiply-adds: the caller's `threads`, or the caller alone below
/// two GEMM blocks of work (see `gemm::MIN_WORK_PER_THREAD`).
fn threads_for(work: usize, threads: usize) -> usize {
    if work < 2 * crate::gemm::MIN_WORK_PER_THREAD {
        1
    } else {
        threads.max(1)
    }
}

/// The output columns one kernel column reaches and the input column the first of them
/// reads: the same for every row and plane of a call, so worked out once (for small
/// planes the divisions would cost more than the work of the taps).
struct TapColumns {
    outputs: std::ops::Range<usize>,
    first: usize,
}

impl TapColumns {
    /// For each kernel column of `g`.
    /// (Inline for kernels up to 8 wide: a call allocates nothing.)
    fn of(g: &Conv2d) -> smallvec::SmallVec<[TapColumns; 8]> {
        (0..g.kernel[1])
            .map(|j| {
                let offset = j * g.dilation[1];
                let outputs = valid_outputs(offset, g.padding[1], g.stride[1], g.width, g.out_size[1]);
                // (Clamped for a tap that reaches no output: its range is empty.)
                let first = (outputs.start * g.stride[1] + offset).saturating_sub(g.padding[1]).min(g.width);
                TapColumns { outputs, first }
            })
            .collect()
    }
}

/// The outputs `o < count` of one spatial dimension whose input position
/// `o * stride + offset - pad` lies in `0..input` (`offset`: the tap's `k * dilation`).
fn valid_outputs(offset: usize, pad: usize, stride: usize, input: usize, count: usize) -> std::ops::Range<usize> {
    let lo = pad.saturating_sub(offset).div_ceil(stride);
    let hi = (input + pad).saturating_sub(offset).div_ceil(stride);
    lo.min(count)..hi.min(count).max(lo.min(count))
}

/// One group's weight: its `[O / G, depth]` rows, or those packed by the compiler.
enum Weight<'a> {
    Rows(&'a [f32]),
    Packed(&'a [f32]),
}

/// What one group's product adds in its output pass: a bias per output channel, and the
/// residual, shaped as the group's output.
#[derive(Clone, Copy)]
struct Sums<'a> {
    bias: Option<&'a [f32]>,
    residual: Option<&'a [f32]>,
}

impl Sums<'_> {
    /// The bias of a GEMM whose rows are the output channels.
    fn bias(self) -> crate::gemm::Bias {
        self.bias.map_or(crate::gemm::Bias::None, |b| crate::gemm::Bias::Rows(b.as_ptr()))
    }

    /// The residual of a GEMM whose C is the group's output (`positions` per row) from
    /// column `first` on.
    fn addend(self, positions: usize, first: usize) -> Option<crate::gemm::Addend> {
        self.residual.map(|r| crate::gemm::Addend { at: r.as_ptr(), rs: positions as isize }.skip(0, first))
    }
}

/// One group's `out[O/G, positions] = weight @ windows + sums` on the call's threads, the
/// windows being the input planes themselves (a pointwise kernel) or written piece by
/// piece in the GEMM's packed layout ([`columns::product`]).
fn product(g: &Conv2d, lhs: Weight, planes: &[f32], out: &mut [f32], sums: Sums, spare: Handle) {
    if g.algorithm() == Algorithm::Columns {
        return columns::product(g, lhs, planes, out, sums, pool::threads(), spare);
    }
    let (m, k, n) = (g.group_out_channels(), g.depth(), g.positions());
    let (k_, n_) = (k as isize, n as isize);
    let a = match lhs {
        Weight::Rows(rows) | Weight::Packed(rows) => rows.as_ptr(),
    };
    let p = Problem {
        m,
        k,
        n,
        alpha: 1.0,
        a,
        rsa: k_,
        csa: 1,
        b: planes.as_ptr(),
        rsb: n_,
        csb: 1,
        beta: 0.0,
        c: out.as_mut_ptr(),
        rsc: n_,
        csc: 1,
    };
    let mut operands =
        Operands { activation: g.activation, bias: sums.bias(), addend: sums.addend(n, 0), ..Operands::default() };
    if let Weight::Packed(_) = lhs {
        // `lens` computed the padded size already: this cannot fail.
        let Some(a) = Packed::new(a, m, aotc_abi::gemm::MR) else { return refuse_extern_call("__aotc_conv2d_f32") };
        operands.a = Some(a);
    }
    // SAFETY: A is the m x k row-major matrix or its packed form as `lhs` says (a packed
    // slice is `packed_group_len` floats, checked against the geometry by `lens`); B is
    // the input planes, k x n row-major for a pointwise kernel; `out` is the m x n
    // row-major C, a unique borrow that overlaps neither operand; the bias holds m floats.
    unsafe { gemm_packed(p, operands, pool::threads(), &pool::parallel_for) }
}

#[cfg(test)]
mod tests;
