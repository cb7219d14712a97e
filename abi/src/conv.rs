//! The float32 2-D convolution of the support library (`__aotc_conv2d_f32`), as the
//! compiler and the library both see it: the geometry passed as a list of int64 and the
//! choice of algorithm, decided here once so that the scratch the compiler allocates is
//! the scratch the library uses.

pub mod winograd;

use crate::gemm::Activation;

pub const SYMBOL: &str = "__aotc_conv2d_f32";
/// Max pooling over the same geometry (groups = channels = out_channels, no weight): the
/// maximum of each window, NaN winning, padding never chosen.
pub const MAX_POOL_SYMBOL: &str = "__aotc_max_pool2d_f32";
/// `void __aotc_conv_frames_f32(float *out, const float *x, const int64_t *geometry,
/// int64_t count)`: the input frames of one time tap of a 3-D convolution run as 2-D ones,
/// frames first. `geometry` is `[batch, channels, frames, plane, frames_out, stride,
/// first]` ([`Frames::from_list`]): `out[N, T_out, C, plane]` holds
/// `x[N, C, T, plane]`'s frame `t * stride + first`, zeros where that lies outside `0..T`
/// (the time padding).
pub const FRAMES_SYMBOL: &str = "__aotc_conv_frames_f32";

/// The geometry of [`FRAMES_SYMBOL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frames {
    pub batch: usize,
    pub channels: usize,
    pub frames: usize,
    /// Elements of one frame of one channel (height times width).
    pub plane: usize,
    pub frames_out: usize,
    pub stride: usize,
    /// The input frame of output frame 0: `kd * dilation - padding`, negative in the padding.
    pub first: i64,
}

impl Frames {
    pub fn from_list(list: &[i64]) -> Option<Frames> {
        let &[batch, channels, frames, plane, frames_out, stride, first] = list else { return None };
        let size = |v: i64| usize::try_from(v).ok();
        Some(Frames {
            batch: size(batch)?,
            channels: size(channels)?,
            frames: size(frames)?,
            plane: size(plane)?,
            frames_out: size(frames_out)?,
            stride: size(stride).filter(|&s| s > 0)?,
            first,
        })
    }

    /// The input frame output frame `t` reads, if inside the input.
    pub fn source(&self, t: usize) -> Option<usize> {
        let f = self.first.checked_add(i64::try_from(t.checked_mul(self.stride)?).ok()?)?;
        usize::try_from(f).ok().filter(|&f| f < self.frames)
    }
}

/// `out[N, O, OH, OW] = conv(x[N, C, H, W], weight[O, C / groups, KH, KW]) (+ bias[O])`,
/// all contiguous; padding is zeros. The weight is in one of the [`WeightForm`]s. With `residual`, a tensor shaped like `out`
/// is added to it, and then its `activation` is applied: the graph's residual add and
/// activation after the convolution, done in its output pass. With `pool`, what is
/// written is that result max-pooled over 2x2 windows at stride 2 (NaN winning, a last odd
/// row or column dropped): `out[N, O, OH / 2, OW / 2]`, the graph's max pool after the
/// convolution, so that the full-size output never reaches memory ([`Conv2d::written_size`]).
/// With an `input` transform ([`InputTransform`]), each input channel is first mapped
/// through it (the graph's squeeze-and-excite gate, or batch norm and ReLU, on a pointwise
/// convolution's input, which then never reaches memory transformed); only for
/// [`Algorithm::Pointwise`] with one group, a packed weight ([`WeightForm::Panels`] or
/// [`WeightForm::ColumnPanels`]) and no pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub batch: usize,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub out_channels: usize,
    pub kernel: [usize; 2],
    pub out_size: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub has_bias: bool,
    pub weight: WeightForm,
    pub residual: bool,
    pub activation: Activation,
    pub pool: bool,
    pub input: InputTransform,
}

/// What a pointwise convolution does to its input channels before the product, each
/// channel's factors in the buffers [`ARG_INPUT_SCALE`] and [`ARG_INPUT_SHIFT`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InputTransform {
    #[default]
    None,
    /// `x * scale[n, c]` (`[N, C]` factors): a squeeze-and-excite gate.
    Scale,
    /// `relu(x * scale[c] + shift[c])` (`[C]` each, the ReLU keeping NaN): an inference
    /// batch norm and ReLU, DenseNet's pre-activation.
    ScaleShiftRelu,
}

impl InputTransform {
    pub fn code(self) -> i64 {
        match self {
            InputTransform::None => 0,
            InputTransform::Scale => 1,
            InputTransform::ScaleShiftRelu => 2,
        }
    }

    pub fn from_code(code: i64) -> Option<InputTransform> {
        [InputTransform::None, InputTransform::Scale, InputTransform::ScaleShiftRelu]
            .into_iter()
            .find(|t| t.code() == code)
    }
}

/// How many int64s [`Conv2d::to_list`] writes.
pub const GEOMETRY_LEN: usize = 22;
/// The generated code's arguments after `out`, in order: buffers (base pointers), then the
/// geometry list (pointer, count).
pub const ARG_X: usize = 0;
pub const ARG_WEIGHT: usize = 1;
pub const ARG_BIAS: usize = 2;
pub const ARG_SCRATCH: usize = 3;
pub const ARG_RESIDUAL: usize = 4;
pub const ARG_INPUT_SCALE: usize = 5;
pub const ARG_INPUT_SHIFT: usize = 6;
pub const ARG_GEOMETRY: usize = 7;
/// Where the flags sit in the list.
pub const HAS_BIAS: usize = 16;
pub const RESIDUAL: usize = 18;
pub const POOL: usize = 20;
/// Not flags: the [`WeightForm`]'s code, the [`Activation`]'s and the [`InputTransform`]'s.
pub const INPUT_TRANSFORM: usize = 21;
pub const WEIGHT_FORM: usize = 17;
pub const ACTIVATION: usize = 19;

/// How the weight operand is laid out: as the graph has it, or packed at compile time by
/// the compiler for the algorithm that reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightForm {
    /// `[O, C / groups, KH, KW]`, contiguous.
    #[default]
    Rows,
    /// Each group's `[O / groups, depth]` matrix in `crate::gemm`'s layout for a GEMM's
    /// left operand, groups one after another ([`Conv2d::packed_group_len`] floats each);
    /// never for [`Algorithm::Depthwise`].
    Panels,
    /// The 36 matrices of [`winograd`]'s transformed weight, each a GEMM's packed left
    /// operand: the convolution is [`Algorithm::Winograd`].
    Winograd,
    /// Each group's weight transposed, `[depth, O / groups]`, in `crate::gemm`'s layout for
    /// a GEMM's right operand (panels of output channels), groups one after another
    /// ([`Conv2d::packed_group_len`] floats each): the GEMM runs transposed, output
    /// positions as its rows ([`positions_as_rows`]); for [`Algorithm::Columns`] and
    /// [`Algorithm::Pointwise`], never pooled.
    ColumnPanels,
}

impl WeightForm {
    pub const ALL: [WeightForm; 4] =
        [WeightForm::Rows, WeightForm::Panels, WeightForm::Winograd, WeightForm::ColumnPanels];

    pub fn code(self) -> i64 {
        self as i64
    }

    pub fn from_code(code: i64) -> Option<WeightForm> {
        Self::ALL.into_iter().find(|f| f.code() == code)
    }
}

/// How the library computes a convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// One input channel per group: each output plane is a sum of shifted, scaled input
    /// rows (no GEMM: a GEMM of one row per group would waste its tile).
    Depthwise,
    /// A 1x1 kernel with unit stride and no padding: the input planes are the GEMM's
    /// right operand as they are.
    Pointwise,
    /// A GEMM per group whose right operand, the input's windows (im2col), is gathered
    /// piece by piece as the GEMM packs it.
    Columns,
    /// A 3x3 kernel at unit stride and dilation, one group, its weight transformed by the
    /// compiler ([`WeightForm::Winograd`]): Winograd's F(4x4, 3x3), 36 GEMMs of 4
    /// times fewer multiplies than the windows' one ([`winograd`]).
    Winograd,
}

/// Whether the compiler should run a GEMM convolution transposed ([`WeightForm::ColumnPanels`]),
/// from its output positions per plane: when they are few and would leave much of the
/// usual orientation's last panel of [`crate::gemm::NR`] columns empty (ResNet's 7x7
/// layer4: 49 positions fill 64 columns; as rows they fill whole tiles but one row, and
/// the output channels fill the panels). Measured on a Xeon (AVX-512), 1 thread:
/// 512 x 4608 x 49 at 0.50 of the FMA peak, 49 x 4608 x 512 at 0.74; 256 x 2304 x 196
/// and its transpose alike (0.79).
pub fn positions_as_rows(positions: usize) -> bool {
    const MAX_POSITIONS: usize = 192;
    let padded = positions.next_multiple_of(crate::gemm::NR);
    positions > 0 && positions < MAX_POSITIONS && padded * 20 > positions * 21
}

/// [`positions_as_rows`] for a pointwise convolution that applies a batch norm and ReLU to
/// its input itself ([`InputTransform::ScaleShiftRelu`]): the transposed GEMM then wins over
/// more positions.
/// Measured on an AMD EPYC Zen 4 (AVX-512), 1 thread, DenseNet-121's bottlenecks (a batch
/// norm and ReLU on the input, 128 outputs): at 14x14, 992 -> 128 at 96.6 GFLOP/s
/// transposed against 83.5, 256 -> 128 at 93.8 against 87.9; at 28x28 either way by
/// turns (`benches/kernels.rs`, group `dense`).
pub fn transformed_positions_as_rows(positions: usize) -> bool {
    const MAX_POSITIONS: usize = 256;
    (1..=MAX_POSITIONS).contains(&positions)
}

/// Sizes the scratch formula is written over: `usize` (checked: None on overflow) in the
/// library, symbolic sizes in the compiler, so that both size it alike.
pub trait Size: Clone {
    fn int(v: usize) -> Self;
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
}

impl Size for Option<usize> {
    fn int(v: usize) -> Self {
        Some(v)
    }
    fn add(self, other: Self) -> Self {
        self?.checked_add(other?)
    }
    fn mul(self, other: Self) -> Self {
        self?.checked_mul(other?)
    }
}

impl Size for crate::sym::SymExpr {
    fn int(v: usize) -> Self {
        crate::sym::SymExpr::Int(v as i64)
    }
    fn add(self, other: Self) -> Self {
        crate::sym::SymExpr::add([self, other])
    }
    fn mul(self, other: Self) -> Self {
        crate::sym::SymExpr::mul([self, other])
    }
}

/// The most scratch slots a depthwise convolution uses: one per chunk of planes, and the
/// library makes at most 4 chunks per thread.
pub const DEPTHWISE_SLOTS: usize = 64;

/// Floats of scratch a convolution needs, reused image by image: for
/// [`Algorithm::Depthwise`] min(O, [`DEPTHWISE_SLOTS`]) x ((H + 2 PH)(W + 2 PW) +
/// positions + taps), room for a zero-padded input plane per slot and more (the kernel
/// uses one padded plane, plus a vector of slack, per chunk of planes); none for the GEMMs.
#[allow(clippy::too_many_arguments)]
pub fn scratch_len<S: Size>(
    algorithm: Algorithm,
    out_channels: usize,
    kernel: [usize; 2],
    padding: [usize; 2],
    [height, width]: [S; 2],
    [out_h, out_w]: [S; 2],
) -> S {
    let taps = kernel[0] * kernel[1];
    let positions = out_h.mul(out_w);
    match algorithm {
        // (The Winograd transforms' blocks are the library's own, per thread.)
        Algorithm::Columns | Algorithm::Pointwise | Algorithm::Winograd => S::int(0),
        Algorithm::Depthwise => {
            let padded = height.add(S::int(2 * padding[0])).mul(width.add(S::int(2 * padding[1])));
            S::int(out_channels.min(DEPTHWISE_SLOTS)).mul(padded.add(positions).add(S::int(taps)))
        }
    }
}

impl Algorithm {
    /// Whether the library pools the output as it writes it (`Conv2d::pool`).
    pub fn pools(self) -> bool {
        matches!(self, Algorithm::Columns | Algorithm::Winograd)
    }

    /// The algorithm for a geometry whose weight is not in [`WeightForm::Winograd`]; the
    /// compiler decides it from these alone (the spatial sizes may be symbolic).
    pub fn choose(
        group_channels: usize,
        groups: usize,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Algorithm {
        if group_channels == 1 && groups > 1 {
            Algorithm::Depthwise
        } else if kernel == [1, 1] && stride == [1, 1] && padding == [0, 0] {
            Algorithm::Pointwise
        } else {
            Algorithm::Columns
        }
    }
}

impl Conv2d {
    /// The order the generated code passes the geometry in (see [`Conv2d::from_list`]).
    pub fn to_list(&self) -> [i64; GEOMETRY_LEN] {
        let v = |x: usize| x as i64;
        [
            v(self.batch),
            v(self.channels),
            v(self.height),
            v(self.width),
            v(self.out_channels),
            v(self.kernel[0]),
            v(self.kernel[1]),
            v(self.out_size[0]),
            v(self.out_size[1]),
            v(self.stride[0]),
            v(self.stride[1]),
            v(self.padding[0]),
            v(self.padding[1]),
            v(self.dilation[0]),
            v(self.dilation[1]),
            v(self.groups),
            self.has_bias as i64,
            self.weight.code(),
            self.residual as i64,
            self.activation.code(),
            self.pool as i64,
            self.input.code(),
        ]
    }

    /// The geometry from its list, or None unless it is consistent: sizes non-negative,
    /// stride, dilation and groups positive, groups dividing both channel counts, and each
    /// output size the one the input, kernel, stride, padding and dilation give; a pooled
    /// output only without a residual and for the algorithms that pool
    /// ([`Algorithm::pools`]).
    pub fn from_list(l: &[i64]) -> Option<Conv2d> {
        let g = Conv2d::windows_from_list(l)?;
        let sizes_agree =
            [(g.height, 0), (g.width, 1)].iter().all(|&(input, d)| g.expected_out(input, d) == Some(g.out_size[d]));
        let packing_fits = match g.weight {
            WeightForm::Rows => true,
            WeightForm::Panels => g.algorithm() != Algorithm::Depthwise,
            WeightForm::Winograd => winograd::fits(g.kernel, g.stride, g.dilation, g.groups),
            WeightForm::ColumnPanels => !g.pool && g.algorithm() != Algorithm::Depthwise,
        };
        let pool_fits = !g.pool || (!g.residual && g.algorithm().pools());
        let input_fits = g.input == InputTransform::None
            || (g.algorithm() == Algorithm::Pointwise
                && g.groups == 1
                && !g.pool
                && matches!(g.weight, WeightForm::Panels | WeightForm::ColumnPanels));
        let groups_divide = g.channels % g.groups == 0 && g.out_channels % g.groups == 0;
        (sizes_agree && packing_fits && pool_fits && input_fits && groups_divide).then_some(g)
    }

    /// The geometry from its list with any output sizes (a pooling's ceil mode adds a
    /// window): None unless sizes are non-negative and stride, dilation, kernel and groups
    /// positive. The library clamps every window to the input.
    pub fn windows_from_list(l: &[i64]) -> Option<Conv2d> {
        if l.len() != GEOMETRY_LEN || l.iter().any(|&x| x < 0) {
            return None;
        }
        let u = |i: usize| l[i] as usize;
        let g = Conv2d {
            batch: u(0),
            channels: u(1),
            height: u(2),
            width: u(3),
            out_channels: u(4),
            kernel: [u(5), u(6)],
            out_size: [u(7), u(8)],
            stride: [u(9), u(10)],
            padding: [u(11), u(12)],
            dilation: [u(13), u(14)],
            groups: u(15),
            has_bias: l[HAS_BIAS] != 0,
            weight: WeightForm::from_code(l[WEIGHT_FORM])?,
            residual: l[RESIDUAL] != 0,
            activation: Activation::from_code(l[ACTIVATION])?,
            pool: l[POOL] != 0,
            input: InputTransform::from_code(l[INPUT_TRANSFORM])?,
        };
        let positive = g.stride.iter().chain(&g.dilation).chain(&g.kernel).all(|&x| x > 0) && g.groups > 0;
        (positive && [HAS_BIAS, RESIDUAL, POOL].iter().all(|&flag| l[flag] <= 1)).then_some(g)
    }

    /// `(input + 2 padding - dilation (kernel - 1) - 1) / stride + 1`, None when the
    /// window does not fit once.
    fn expected_out(&self, input: usize, d: usize) -> Option<usize> {
        let span = self.dilation[d].checked_mul(self.kernel[d] - 1)?.checked_add(1)?;
        let padded = input.checked_add(self.padding[d].checked_mul(2)?)?;
        Some(padded.checked_sub(span)? / self.stride[d] + 1)
    }

    /// Elements of (input, weight, output), None if one overflows: the library reads no
    /// buffer whose size it cannot state.
    pub fn lens(&self) -> Option<(usize, usize, usize)> {
        let product = |v: &[usize]| v.iter().try_fold(1usize, |acc, &x| acc.checked_mul(x));
        let input = product(&[self.batch, self.channels, self.height, self.width])?;
        let weight = match self.weight {
            WeightForm::Rows => product(&[self.out_channels, self.group_channels(), self.kernel[0], self.kernel[1]])?,
            WeightForm::Panels | WeightForm::ColumnPanels => self.groups.checked_mul(self.packed_group_len()?)?,
            WeightForm::Winograd => winograd::weight_len(self.channels, self.out_channels)?,
        };
        let [out_h, out_w] = self.written_size();
        let output = product(&[self.batch, self.out_channels, out_h, out_w])?;
        self.scratch_len()?;
        Some((input, weight, output))
    }

    pub fn group_channels(&self) -> usize {
        self.channels / self.groups
    }

    pub fn group_out_channels(&self) -> usize {
        self.out_channels / self.groups
    }

    /// Floats of one group's packed weight: its output channels padded to whole panels,
    /// of `gemm::MR` rows for [`WeightForm::Panels`], of `gemm::NR` columns for
    /// [`WeightForm::ColumnPanels`]; None for the other forms, or on overflow.
    pub fn packed_group_len(&self) -> Option<usize> {
        let width = match self.weight {
            WeightForm::Panels => crate::gemm::MR,
            WeightForm::ColumnPanels => crate::gemm::NR,
            WeightForm::Rows | WeightForm::Winograd => return None,
        };
        let depth = self.group_channels().checked_mul(self.kernel[0])?.checked_mul(self.kernel[1])?;
        crate::gemm::packed_len(depth, self.group_out_channels(), width)
    }

    /// Output positions per plane of the convolution (before any pooling).
    pub fn positions(&self) -> usize {
        self.out_size[0] * self.out_size[1]
    }

    /// The sizes of a plane of `out`: the convolution's, or halved (rounded down) when it is
    /// pooled.
    pub fn written_size(&self) -> [usize; 2] {
        let [h, w] = self.out_size;
        if self.pool {
            [h / 2, w / 2]
        } else {
            [h, w]
        }
    }

    /// The GEMM's depth: input channels per group times kernel taps.
    pub fn depth(&self) -> usize {
        self.group_channels() * self.kernel[0] * self.kernel[1]
    }

    pub fn algorithm(&self) -> Algorithm {
        if self.weight == WeightForm::Winograd {
            return Algorithm::Winograd;
        }
        Algorithm::choose(self.group_channels(), self.groups, self.kernel, self.stride, self.padding)
    }

    /// Floats of scratch the library needs ([`scratch_len`]), None if that overflows.
    pub fn scratch_len(&self) -> Option<usize> {
        let s = |v: usize| Some(v);
        scratch_len(
            self.algorithm(),
            self.out_channels,
            self.kernel,
            self.padding,
            [s(self.height), s(self.width)],
            [s(self.out_size[0]), s(self.out_size[1])],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resnet_stem() -> Conv2d {
        Conv2d {
            batch: 1,
            channels: 3,
            height: 224,
            width: 224,
            out_channels: 64,
            kernel: [7, 7],
            out_size: [112, 112],
            stride: [2, 2],
            padding: [3, 3],
            dilation: [1, 1],
            groups: 1,
            has_bias: false,
            weight: WeightForm::Rows,
            residual: false,
            activation: Activation::None,
            pool: false,
            input: InputTransform::None,
        }
    }

    #[test]
    fn few_positions_that_leave_a_panel_mostly_empty_run_as_rows() {
        let chosen: Vec<usize> =
            [49, 64, 98, 100, 144, 196, 0, 1, 15].into_iter().filter(|&n| positions_as_rows(n)).collect();
        assert_eq!(chosen, [49, 98, 100, 1, 15]);
    }

    #[test]
    fn the_list_round_trips_and_inconsistent_ones_are_refused() {
        let g = resnet_stem();
        assert_eq!(Conv2d::from_list(&g.to_list()), Some(g));
        let mut bad = g.to_list();
        bad[7] = 113;
        assert_eq!(Conv2d::from_list(&bad), None, "wrong output size");
        let mut bad = g.to_list();
        bad[15] = 2;
        assert_eq!(Conv2d::from_list(&bad), None, "groups not dividing 3 channels");
        let mut bad = g.to_list();
        bad[9] = 0;
        assert_eq!(Conv2d::from_list(&bad), None, "zero stride");
        let mut bad = g.to_list();
        bad[5] = 0;
        assert_eq!(Conv2d::from_list(&bad), None, "empty kernel");
        let mut bad = g.to_list();
        bad[0] = i64::MAX;
        let huge = Conv2d::from_list(&bad).unwrap();
        assert_eq!(huge.lens(), None, "element counts overflow");
        assert_eq!(g.lens(), Some((3 * 224 * 224, 64 * 3 * 49, 64 * 112 * 112)));
        assert_eq!(Conv2d::from_list(&g.to_list()[..GEOMETRY_LEN - 1]), None);
        for activation in Activation::ALL {
            let fused = Conv2d { residual: true, activation, ..g };
            assert_eq!(Conv2d::from_list(&fused.to_list()), Some(fused));
        }
        let mut bad = g.to_list();
        bad[RESIDUAL] = 2;
        assert_eq!(Conv2d::from_list(&bad), None, "a flag that is not 0 or 1");
        let mut bad = g.to_list();
        bad[ACTIVATION] = Activation::ALL.len() as i64;
        assert_eq!(Conv2d::from_list(&bad), None, "no such activation");
        let packed = Conv2d { weight: WeightForm::Panels, ..g };
        assert_eq!(Conv2d::from_list(&packed.to_list()), Some(packed));
        assert_eq!(packed.lens().unwrap().1, 66 * 3 * 49, "64 rows padded to 11 panels of 6");
        let depthwise = Conv2d {
            channels: 64,
            out_channels: 64,
            groups: 64,
            kernel: [3, 3],
            padding: [1, 1],
            weight: WeightForm::Panels,
            ..g
        };
        assert_eq!(Conv2d::from_list(&depthwise.to_list()), None, "a packed depthwise weight");
        assert_eq!(
            Conv2d::from_list(&Conv2d { weight: WeightForm::Winograd, ..g }.to_list()),
            None,
            "a 7x7 kernel at stride 2 in Winograd's form"
        );
        let three = Conv2d {
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            out_size: [224, 224],
            weight: WeightForm::Winograd,
            ..g
        };
        assert_eq!(Conv2d::from_list(&three.to_list()), Some(three));
        assert_eq!((three.algorithm(), three.lens().unwrap().1), (Algorithm::Winograd, 36 * 66 * 3));
        let mut bad = three.to_list();
        bad[WEIGHT_FORM] = WeightForm::ALL.len() as i64;
        assert_eq!(Conv2d::from_list(&bad), None, "no such weight form");
        let transposed = Conv2d { weight: WeightForm::ColumnPanels, ..g };
        assert_eq!(Conv2d::from_list(&transposed.to_list()), Some(transposed));
        assert_eq!(transposed.lens().unwrap().1, 3 * 49 * 64, "64 columns: 4 whole panels of 16");
        let odd = Conv2d { out_channels: 20, ..transposed };
        assert_eq!(odd.lens().unwrap().1, 3 * 49 * 32, "20 columns padded to 2 panels");
        assert_eq!(Conv2d::from_list(&Conv2d { pool: true, ..transposed }.to_list()), None, "a transposed pool");
        assert_eq!(
            Conv2d::from_list(&Conv2d { weight: WeightForm::ColumnPanels, ..depthwise }.to_list()),
            None,
            "a transposed depthwise weight"
        );
        let pooled = Conv2d { pool: true, ..three };
        assert_eq!(Conv2d::from_list(&pooled.to_list()), Some(pooled));
        assert_eq!((pooled.written_size(), pooled.lens().unwrap().2), ([112, 112], 64 * 112 * 112));
        assert_eq!(
            Conv2d::from_list(&Conv2d { pool: true, ..g }.to_list()).map(|p| p.written_size()),
            Some([56, 56]),
            "columns pool"
        );
        assert_eq!(Conv2d::from_list(&Conv2d { residual: true, ..pooled }.to_list()), None, "a residual with pooling");
        let pointwise =
            Conv2d { kernel: [1, 1], stride: [1, 1], padding: [0, 0], out_size: [224, 224], pool: true, ..g };
        assert_eq!(Conv2d::from_list(&pointwise.to_list()), None, "a pooled pointwise convolution");
        let gated = Conv2d { pool: false, input: InputTransform::Scale, weight: WeightForm::Panels, ..pointwise };
        assert_eq!(Conv2d::from_list(&gated.to_list()), Some(gated));
        let normed = Conv2d { input: InputTransform::ScaleShiftRelu, weight: WeightForm::ColumnPanels, ..gated };
        assert_eq!(Conv2d::from_list(&normed.to_list()), Some(normed));
        assert_eq!(
            Conv2d::from_list(&Conv2d { input: InputTransform::Scale, ..g }.to_list()),
            None,
            "a scaled 7x7 input"
        );
        let unpacked = Conv2d { weight: WeightForm::Rows, ..gated };
        assert_eq!(Conv2d::from_list(&unpacked.to_list()), None, "a scaled input with an unpacked weight");
        assert_eq!(
            Conv2d::from_list(&Conv2d { input: InputTransform::Scale, pool: true, ..pointwise }.to_list()),
            None,
            "a scaled pooled input"
        );
        let mut bad = pooled.to_list();
        bad[POOL] = 2;
        assert_eq!(Conv2d::from_list(&bad), None, "a pool flag that is not 0 or 1");
        let mut bad = gated.to_list();
        bad[INPUT_TRANSFORM] = 3;
        assert_eq!(Conv2d::from_list(&bad), None, "an input transform code that is none");
    }

    #[test]
    fn algorithms() {
        let g = resnet_stem();
        assert_eq!(g.algorithm(), Algorithm::Columns);
        assert_eq!(g.scratch_len(), Some(0));
        let dw = Conv2d { channels: 64, out_channels: 64, groups: 64, kernel: [3, 3], padding: [1, 1], ..g };
        assert_eq!((dw.algorithm(), dw.scratch_len()), (Algorithm::Depthwise, Some(64 * (226 * 226 + 112 * 112 + 9))));
        let pw = Conv2d { kernel: [1, 1], stride: [1, 1], padding: [0, 0], out_size: [224, 224], ..g };
        assert_eq!((pw.algorithm(), pw.scratch_len()), (Algorithm::Pointwise, Some(0)));
    }
}
