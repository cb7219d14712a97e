//! The depthwise planes of the common geometries (square 3x3, 5x5 or 7x7 kernel, stride 1
//! or 2 in both dimensions, no dilation) with AVX2 + FMA or AVX-512 (`crate::simd`). Each
//! input plane is copied into a zero-padded plane in scratch (with AVX2 on either: a
//! copy), so that the loops read whole vectors with no bounds logic; with stride 2 each
//! padded row holds its even columns, then its odd ones, so that the outputs of a tap
//! read contiguous floats. Each output row is computed a vector of outputs at a time (8
//! or 16), up to 4 vectors at a time, the taps' weights broadcast once per plane; the
//! bias starts the sums, and the residual and the ReLU are applied as the row is stored,
//! any other activation in a pass over the finished plane.

use crate::isa::Isa;
use crate::simd::{for_each_isa, F32s};
use aotc_abi::conv::Conv2d;
use aotc_abi::gemm::Activation;
use std::arch::x86_64::*;

/// `MASK[8 - n..][..8]`: the first `n` lanes.
const MASK: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// A geometry the fast path takes, with its padded plane's layout.
#[derive(Clone, Copy)]
pub struct Kernel {
    /// The vector set of the planes' loops.
    isa: Isa,
    /// Kernel size (square) and stride (the same in both dimensions).
    size: usize,
    stride: usize,
    padding: [usize; 2],
    width: usize,
    out_size: [usize; 2],
    /// Floats per padded row (W + 2 PW).
    row: usize,
    /// Where a padded row's odd columns start (stride 2).
    half: usize,
    /// Floats of one padded plane with its slack: all that the loops read or write.
    len: usize,
    activation: Activation,
}

impl Kernel {
    /// The fast path for `g` on `isa` when the CPU runs it, `g` is one of its
    /// geometries and its padded planes, with the slack the loops read past each (whose
    /// lanes are never stored: a vector, two where [`shifts_windows`]), fit in `scratch`
    /// floats.
    pub fn new(g: &Conv2d, scratch: usize, isa: Isa) -> Option<Kernel> {
        let (size, stride) = (g.kernel[0], g.stride[0]);
        let shape =
            g.kernel == [size; 2] && matches!(size, 3 | 5 | 7) && g.stride == [stride; 2] && matches!(stride, 1 | 2);
        if !(shape && g.dilation == [1, 1] && isa.available()) {
            return None;
        }
        let lanes = match isa {
            Isa::Portable => return None,
            Isa::Avx2 => 8,
            Isa::Avx512 => 16,
        };
        let row = g.width.checked_add(2 * g.padding[1])?;
        let plane = g.height.checked_add(2 * g.padding[0])?.checked_mul(row)?;
        let half = row.div_ceil(2);
        // The loops read from each output row's first input row up to `reach` (the last
        // row's last tap, a whole vector past the last output; or each row's vectors and
        // one more, `Plane::tile_shifted`).
        let [out_h, out_w] = g.out_size;
        let last_tap = if shifts_windows(size, stride, lanes) {
            lanes
        } else {
            (0..size).map(|j| column(stride, half, j)).max()?
        };
        let reach = ((out_h.checked_sub(1)? * stride + size - 1) * row)
            .checked_add(last_tap + out_w.div_ceil(lanes) * lanes)?;
        // Loading a plane writes whole vectors from each row's first input column on
        // (`load_rows`, `load_split`): up to `written` in the last input row.
        let last_row = (g.height.checked_sub(1)? + g.padding[0]) * row;
        let written = if stride == 1 {
            g.padding[1] + g.width.div_ceil(8) * 8
        } else {
            half + g.padding[1] / 2 + g.width.div_ceil(16) * 8
        };
        let len = plane.checked_add(lanes)?.max(reach).max(last_row.checked_add(written)?);
        (len <= scratch).then_some(Kernel {
            isa,
            size,
            stride,
            padding: g.padding,
            width: g.width,
            out_size: g.out_size,
            row,
            half,
            len,
            activation: g.activation,
        })
    }

    /// Floats of one padded plane (a slot of scratch).
    pub fn len(&self) -> usize {
        self.len
    }

    /// The vector set of the loops.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The stride (the same in both dimensions).
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Floats per padded row.
    pub fn row(&self) -> usize {
        self.row
    }

    /// Where a padded row's odd columns start (stride 2).
    pub fn half(&self) -> usize {
        self.half
    }

    pub fn out_size(&self) -> [usize; 2] {
        self.out_size
    }

    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// Zeros a slot: its padding stays zero as planes are loaded into it.
    pub fn clear(&self, slot: &mut [f32]) {
        slot[..self.len].fill(0.0);
    }

    /// Copies an input plane into the inside of a cleared slot.
    pub fn load(&self, input: &[f32], slot: &mut [f32]) {
        // SAFETY: the CPU runs `self.isa` (`new`'s contract), which includes AVX2.
        unsafe {
            if self.stride == 1 {
                load_rows(self, input, slot)
            } else {
                load_split(self, input, slot)
            }
        }
    }

    /// `out = activation(conv(plane) + bias (+ residual))` for one output plane, from a slot
    /// holding its input plane; `w` holds the plane's taps.
    pub fn plane(&self, slot: &[f32], w: &[f32], bias: f32, residual: Option<&[f32]>, out: &mut [f32]) {
        let positions = self.out_size[0] * self.out_size[1];
        assert!(slot.len() >= self.len && w.len() == self.size * self.size && out.len() == positions);
        assert!(residual.is_none_or(|r| r.len() == positions));
        let isa = self.isa;
        // SAFETY: the CPU runs `self.isa` (`new`'s contract); the lengths are checked above.
        unsafe {
            match (self.size, self.stride) {
                (3, 1) => plane::<3, 1>(isa, self, slot, w, bias, residual, out),
                (3, 2) => plane::<3, 2>(isa, self, slot, w, bias, residual, out),
                (5, 1) => plane::<5, 1>(isa, self, slot, w, bias, residual, out),
                (5, 2) => plane::<5, 2>(isa, self, slot, w, bias, residual, out),
                (7, 1) => plane::<7, 1>(isa, self, slot, w, bias, residual, out),
                _ => plane::<7, 2>(isa, self, slot, w, bias, residual, out),
            }
        };
        // The other activations in a pass of their own over the plane, just written (in
        // L1 or L2): inlined into each of the ~280 tile shapes they took much of the
        // library's compile time, and ran no faster (EfficientNet-B0's 16 depthwise SiLU
        // layers, interleaved profiles on Zen 3: 4.3-4.8 ms per call either way).
        if self.activation != Activation::Relu {
            crate::activation::apply(self.activation, out);
        }
    }
}

for_each_isa! {
    /// [`Kernel::plane`] for K x K taps at stride S, its lengths checked.
    fn plane<const K: usize, const S: usize>(
        k: &Kernel, slot: &[f32], w: &[f32], bias: f32, residual: Option<&[f32]>, out: &mut [f32]
    ) => plane_of
}

/// Whether a plane of `size` x `size` taps at `stride` on `lanes` lanes shifts its
/// windows in registers ([`Plane::tile_shifted`]). Measured on Zen 4: 3 x 3 at stride 1
/// on 16 lanes 15% faster; 5 x 5 and 7 x 7 kernels, and 8 lanes (whose shifts take two
/// shuffles), slower.
fn shifts_windows(size: usize, stride: usize, lanes: usize) -> bool {
    size == 3 && stride == 1 && lanes == 16
}

/// The offset in a padded row of the column that kernel column `j` reads for the row's
/// first output (`half`: where the odd columns start with stride 2).
pub fn column(stride: usize, half: usize, j: usize) -> usize {
    if stride == 1 || j.is_multiple_of(2) {
        j / stride
    } else {
        half + j / 2
    }
}

/// The first `lanes` (at most 8) lanes.
fn mask(lanes: usize) -> __m256i {
    // SAFETY: `MASK` holds 16 floats.
    unsafe { _mm256_loadu_si256(MASK[8 - lanes..].as_ptr().cast()) }
}

/// Stride 1: each input row into its padded row, 8 floats at a time. The last vector of a
/// row holds zeros past the row, so its lanes past the row zero padding or land on the
/// next row's columns, which are written after it (masked stores would cost about 10
/// cycles each on AMD's cores).
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn load_rows(k: &Kernel, input: &[f32], slot: &mut [f32]) {
    let [ph, pw] = k.padding;
    let width = k.width;
    let (vectors, tail) = (width.div_ceil(8), mask(width - 8 * (width.div_ceil(8) - 1)));
    for (ih, src) in input.chunks_exact(width).enumerate() {
        let at = (ih + ph) * k.row + pw;
        for v in 0..vectors {
            let src = &src[8 * v..];
            // SAFETY: the load reads `src`'s first 8 floats, or those of `tail` (all
            // `src` holds) for the last vector; the store writes the slice's 8 floats.
            unsafe {
                let x = if v + 1 < vectors {
                    _mm256_loadu_ps(src.as_ptr())
                } else {
                    _mm256_maskload_ps(src.as_ptr(), tail)
                };
                _mm256_storeu_ps(slot[at + 8 * v..][..8].as_mut_ptr(), x);
            }
        }
    }
}

/// Stride 2: each input row into its padded row, even padded columns first (input
/// column c is padded column c + PW), 16 input floats at a time. As in [`load_rows`], the
/// last vector of each part holds zeros past the row; those of the part at the start of
/// the row land on the other part's padding or its first vector, which is stored last.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn load_split(k: &Kernel, input: &[f32], slot: &mut [f32]) {
    let [ph, pw] = k.padding;
    let width = k.width;
    // Where the even and the odd input columns start in a padded row, and which of them
    // is at the start of the row.
    let (even, odd) = if pw.is_multiple_of(2) { (pw / 2, k.half + pw / 2) } else { (k.half + pw / 2, pw.div_ceil(2)) };
    let ((first, first_odd), second) = if even < odd { ((even, false), odd) } else { ((odd, true), even) };
    let chunks = width.div_ceil(16);
    let tail = width - 16 * (chunks - 1);
    let (tail_a, tail_b) = (mask(tail.min(8)), mask(tail.saturating_sub(8)));
    for (ih, src) in input.chunks_exact(width).enumerate() {
        let at = (ih + ph) * k.row;
        let mut second_first = _mm256_setzero_ps();
        for (c, src) in src.chunks(16).enumerate() {
            // SAFETY: the loads read `src`'s first 16 floats, or those of the tail masks
            // (all `src` holds) for the last chunk; the stores write the slices' 8 floats.
            unsafe {
                let (a, b) = if src.len() == 16 {
                    (_mm256_loadu_ps(src.as_ptr()), _mm256_loadu_ps(src[8..].as_ptr()))
                } else if tail > 8 {
                    (_mm256_maskload_ps(src.as_ptr(), tail_a), _mm256_maskload_ps(src[8..].as_ptr(), tail_b))
                } else {
                    (_mm256_maskload_ps(src.as_ptr(), tail_a), _mm256_setzero_ps())
                };
                // Per 128-bit half [a0 a2 b0 b2 | a4 a6 b4 b6] (and the odd ones); then
                // the 64-bit pairs in order.
                let in_order = |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(v)));
                let (even_v, odd_v) =
                    (in_order(_mm256_shuffle_ps::<0x88>(a, b)), in_order(_mm256_shuffle_ps::<0xDD>(a, b)));
                let (first_v, second_v) = if first_odd { (odd_v, even_v) } else { (even_v, odd_v) };
                _mm256_storeu_ps(slot[at + first + 8 * c..][..8].as_mut_ptr(), first_v);
                if c == 0 {
                    second_first = second_v;
                } else {
                    _mm256_storeu_ps(slot[at + second + 8 * c..][..8].as_mut_ptr(), second_v);
                }
            }
        }
        // SAFETY: the slice holds the 8 floats.
        unsafe { _mm256_storeu_ps(slot[at + second..][..8].as_mut_ptr(), second_first) };
    }
}

/// One output plane, `K` x `K` taps at stride `S`, in tiles of `R` rows by `C` vectors
/// (of `V::LANES` outputs each), their sums in registers: rows of up to 3 vectors tile
/// whole rows together, longer ones go 4 vectors at a time.
///
/// # Safety
/// The CPU runs V's set; `slot` holds `k.len` floats, `w` `K * K`, `out` (and
/// `residual`) a plane of outputs, and `k` came from [`Kernel::new`] for V's set.
#[inline(always)]
unsafe fn plane_of<V: F32s, const K: usize, const S: usize>(
    k: &Kernel,
    slot: &[f32],
    w: &[f32],
    bias: f32,
    residual: Option<&[f32]>,
    out: &mut [f32],
) {
    let [out_h, out_w] = k.out_size;
    let lanes = V::LANES;
    let p = Plane {
        weights: std::array::from_fn(|t| w.get(t).copied().unwrap_or(0.0)),
        // SAFETY: the caller's.
        bias: unsafe { V::splat(bias) },
        activation: k.activation,
        row: k.row,
        half: k.half,
        tile_row: S * k.row,
        out_size: k.out_size,
    };
    let (src, dst, res) = (slot.as_ptr(), out.as_mut_ptr(), residual.map(|r| r.as_ptr()));
    // The vectors of a row from which on they are partial.
    let whole = out_w / lanes;
    // SAFETY (each tile): its outputs are inside the plane (rows below out_h, vectors of
    // a row up to out_w), and the input rows and columns they read inside the slot, up
    // to the last output's reach (`Kernel::new`).
    match out_w.div_ceil(lanes) {
        1 => unsafe { p.columns::<K, S>(src, dst, res, whole) },
        2 => unsafe { p.rows::<K, S, 4, 2>(src, dst, res, whole) },
        3 => unsafe { p.rows::<K, S, 2, 3>(src, dst, res, whole) },
        vectors => {
            // Pairs of rows, then the last one.
            let mut oh = 0;
            while oh < out_h {
                let (mut src, mut dst, mut res) =
                    unsafe { (src.add(oh * p.tile_row), dst.add(oh * out_w), res.map(|r| r.add(oh * out_w))) };
                let pair = oh + 2 <= out_h;
                let mut v = 0;
                while v + 4 <= vectors {
                    unsafe {
                        if pair {
                            p.tile::<K, S, 2, 4>(src, dst, res, whole - v)
                        } else {
                            p.tile::<K, S, 1, 4>(src, dst, res, whole - v)
                        }
                    };
                    (src, dst, res) =
                        unsafe { (src.add(4 * lanes), dst.add(4 * lanes), res.map(|r| r.add(4 * lanes))) };
                    v += 4;
                }
                match (vectors - v, pair) {
                    (1, true) => unsafe { p.tile::<K, S, 2, 1>(src, dst, res, whole - v) },
                    (2, true) => unsafe { p.tile::<K, S, 2, 2>(src, dst, res, whole - v) },
                    (3, true) => unsafe { p.tile::<K, S, 2, 3>(src, dst, res, whole - v) },
                    (1, false) => unsafe { p.tile::<K, S, 1, 1>(src, dst, res, whole - v) },
                    (2, false) => unsafe { p.tile::<K, S, 1, 2>(src, dst, res, whole - v) },
                    (3, false) => unsafe { p.tile::<K, S, 1, 3>(src, dst, res, whole - v) },
                    _ => {}
                }
                oh += if pair { 2 } else { 1 };
            }
        }
    }
}

/// A plane's taps, output pass and sizes, for vectors `V`.
struct Plane<V> {
    /// The taps' weights (the first `K * K`).
    weights: [f32; 49],
    bias: V,
    activation: Activation,
    /// Floats per padded row, where its odd columns start (stride 2), and between the
    /// first input rows of consecutive output rows.
    row: usize,
    half: usize,
    tile_row: usize,
    out_size: [usize; 2],
}

impl<V: F32s> Plane<V> {
    /// Rows of one vector, 8 at a time, then those left together: a tile waits for
    /// each sum's FMAs in turn (4 cycles), so that fewer than 8 sums leave the FMA units
    /// idle (7 x 7 planes are one tile).
    ///
    /// # Safety
    /// As [`Plane::tile`], for every row of the plane.
    #[inline(always)]
    unsafe fn columns<const K: usize, const S: usize>(
        &self,
        src: *const f32,
        dst: *mut f32,
        res: Option<*const f32>,
        whole: usize,
    ) {
        let [out_h, out_w] = self.out_size;
        let (mut src, mut dst, mut res) = (src, dst, res);
        // SAFETY: the caller's contract, tile by tile.
        unsafe {
            let mut oh = 0;
            while oh + 8 <= out_h {
                self.tile::<K, S, 8, 1>(src, dst, res, whole);
                (src, dst, res) = (src.add(8 * self.tile_row), dst.add(8 * out_w), res.map(|r| r.add(8 * out_w)));
                oh += 8;
            }
            match out_h - oh {
                1 => self.tile::<K, S, 1, 1>(src, dst, res, whole),
                2 => self.tile::<K, S, 2, 1>(src, dst, res, whole),
                3 => self.tile::<K, S, 3, 1>(src, dst, res, whole),
                4 => self.tile::<K, S, 4, 1>(src, dst, res, whole),
                5 => self.tile::<K, S, 5, 1>(src, dst, res, whole),
                6 => self.tile::<K, S, 6, 1>(src, dst, res, whole),
                7 => self.tile::<K, S, 7, 1>(src, dst, res, whole),
                _ => {}
            }
        }
    }

    /// Whole rows of `C` vectors, `R` rows at a time, then the rows left (fewer than 4)
    /// together.
    ///
    /// # Safety
    /// As [`Plane::tile`], for every row of the plane.
    #[inline(always)]
    unsafe fn rows<const K: usize, const S: usize, const R: usize, const C: usize>(
        &self,
        src: *const f32,
        dst: *mut f32,
        res: Option<*const f32>,
        whole: usize,
    ) {
        let [out_h, out_w] = self.out_size;
        let (mut src, mut dst, mut res) = (src, dst, res);
        // SAFETY: the caller's contract, tile by tile.
        unsafe {
            let mut oh = 0;
            while oh + R <= out_h {
                self.tile::<K, S, R, C>(src, dst, res, whole);
                (src, dst, res) = (src.add(R * self.tile_row), dst.add(R * out_w), res.map(|r| r.add(R * out_w)));
                oh += R;
            }
            match out_h - oh {
                1 => self.tile::<K, S, 1, C>(src, dst, res, whole),
                2 => self.tile::<K, S, 2, C>(src, dst, res, whole),
                3 => self.tile::<K, S, 3, C>(src, dst, res, whole),
                _ => {}
            }
        }
    }

    /// `R` rows by `C` vectors of outputs: the first's window at `src` (its top left),
    /// its outputs (and residual) at `dst` (`res`); each row's vectors `partial..` hold
    /// only the outputs left in the row.
    ///
    /// # Safety
    /// The CPU runs V's set (the caller is compiled for it: this inlines into it); every
    /// vector read from `src` and written to `dst` (and read from `res`) lies inside its
    /// buffer.
    #[inline(always)]
    unsafe fn tile<const K: usize, const S: usize, const R: usize, const C: usize>(
        &self,
        src: *const f32,
        dst: *mut f32,
        res: Option<*const f32>,
        partial: usize,
    ) {
        if shifts_windows(K, S, V::LANES) {
            // SAFETY: the caller's contract.
            return unsafe { self.tile_shifted::<K, R, C>(src, dst, res, partial) };
        }
        let lanes = V::LANES;
        // The weights are loaded tap by tap, as they are used: hoisted out of the loops
        // over tiles they would take the registers of the sums.
        let weights = std::hint::black_box(&self.weights);
        // SAFETY: the caller's contract.
        unsafe {
            let mut sums = [[self.bias; C]; R];
            // Each tile row's current input row.
            let mut from = [src; R];
            for r in 1..R {
                from[r] = from[r - 1].add(self.tile_row);
            }
            for i in 0..K {
                for j in 0..K {
                    let w = V::splat(weights[i * K + j]);
                    for (sums, from) in sums.iter_mut().zip(&from) {
                        // With stride 2, odd kernel columns read the odd half of the row.
                        let at = if S == 2 && j % 2 == 1 { from.add(self.half).add(j / 2) } else { from.add(j / S) };
                        for (v, sum) in sums.iter_mut().enumerate() {
                            *sum = V::load(at.add(lanes * v)).mul_add(w, *sum);
                        }
                    }
                }
                for f in &mut from {
                    *f = f.add(self.row);
                }
            }
            self.store(sums, dst, res, partial);
        }
    }

    /// [`Plane::tile`] where [`shifts_windows`]: each input row under
    /// the tile is loaded once, `C + 1` vectors, and the windows of a vector are it
    /// shifted into the next one in registers: a shuffle per window and output vector
    /// instead of a load per window, output row and vector (most of which crossed cache
    /// lines).
    ///
    /// # Safety
    /// As [`Plane::tile`], and a vector past each row's last is read (inside the slot:
    /// `Kernel::new`).
    #[inline(always)]
    unsafe fn tile_shifted<const K: usize, const R: usize, const C: usize>(
        &self,
        src: *const f32,
        dst: *mut f32,
        res: Option<*const f32>,
        partial: usize,
    ) {
        let lanes = V::LANES;
        let weights = std::hint::black_box(&self.weights);
        // SAFETY: the caller's contract.
        unsafe {
            let mut sums = [[self.bias; C]; R];
            for input_row in 0..K + R - 1 {
                let from = src.add(input_row * self.row);
                let mut vectors = [V::zero(); 8];
                for (c, v) in vectors.iter_mut().enumerate().take(C + 1) {
                    *v = V::load(from.add(lanes * c));
                }
                for j in 0..K {
                    for c in 0..C {
                        let window = vectors[c].shifted(vectors[c + 1], j);
                        // Output row r reads this input row with kernel row input_row - r.
                        for (r, sums) in sums.iter_mut().enumerate() {
                            if (r..r + K).contains(&input_row) {
                                let w = V::splat(weights[(input_row - r) * K + j]);
                                sums[c] = window.mul_add(w, sums[c]);
                            }
                        }
                    }
                }
            }
            self.store(sums, dst, res, partial);
        }
    }

    /// Stores a tile's sums: `R` rows of `C` vectors from `dst`, the residual (at `res`)
    /// added and the ReLU applied; vectors `partial..` of a row hold only the
    /// outputs left in it.
    ///
    /// # Safety
    /// The CPU runs V's set; the vectors lie inside `out` (and the residual).
    #[inline(always)]
    unsafe fn store<const R: usize, const C: usize>(
        &self,
        sums: [[V; C]; R],
        dst: *mut f32,
        res: Option<*const f32>,
        partial: usize,
    ) {
        let lanes = V::LANES;
        let tail = self.out_size[1] % lanes;
        // SAFETY: the caller's contract.
        unsafe {
            let (mut dst, mut res) = (dst, res);
            for mut row in sums {
                if let Some(r) = res {
                    for (v, sum) in row.iter_mut().enumerate() {
                        let r = r.add(lanes * v);
                        *sum = sum.add(if v < partial { V::load(r) } else { V::load_first(r, tail, 0.0) });
                    }
                }
                if self.activation == Activation::Relu {
                    for sum in &mut row {
                        *sum = crate::activation::lanes(*sum, Activation::Relu);
                    }
                }
                for (v, sum) in row.into_iter().enumerate() {
                    if v < partial {
                        sum.store(dst.add(lanes * v));
                    } else {
                        sum.store_first(dst.add(lanes * v), tail);
                    }
                }
                dst = dst.add(self.out_size[1]);
                res = res.map(|r| r.add(self.out_size[1]));
            }
        }
    }
}
