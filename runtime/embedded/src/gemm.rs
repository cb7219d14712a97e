//! Matrix multiplication `C = alpha * A @ B + beta * C` on strided operands, on up to a
//! given number of threads without a thread pool of its own: C is cut into blocks of rows
//! (or of columns when C is wider than tall), and each block is one single-threaded GEMM
//! on sub-matrices (offset pointers, the same strides). The threads come from the caller's
//! `parallel_for`: a `.so` is loaded and unloaded many times per process, so the support
//! library must not start a pool that outlives it.
//!
//! Products too small for blocking take [`tiny`]. The single-threaded kernel is
//! [`blocked`], compiled for AVX-512 or for AVX2 + FMA, whichever is the best [`Isa`] the
//! CPU has, else `matrixmultiply` ([`Element::PORTABLE`]). Float32 operands packed at
//! compile time ([`Packed`], layout in `aotc_abi::gemm`) go through [`gemm_packed`].

#[cfg(target_arch = "x86_64")]
mod blocked;
#[cfg(target_arch = "x86_64")]
mod simd;
#[cfg(target_arch = "x86_64")]
mod tiny;

pub use crate::isa::Isa;
use aotc_abi::gemm::Activation;
use std::ops::{Add, Mul};

/// Runs `f(0)`, ..., `f(chunks - 1)` spread over up to `threads` threads, the caller's
/// included, and returns when all have run.
pub type ParallelFor<'a> = &'a (dyn Fn(usize, usize, &(dyn Fn(usize) + Sync)) + Sync);

/// A single-threaded GEMM.
///
/// # Safety
/// The problem's pointers cover the matrices its sizes and strides describe.
pub type Kernel<T> = unsafe fn(Problem<T>);

/// Below this many multiply-adds per thread (about 3 us of one core's work), a region
/// costs more than it saves. A region whose worker is watching for it costs about 1 us
/// (the pool's workers watch between a call's regions); 4 times this (the `gemm` crate's
/// threshold) left ShuffleNet's small convolutions on one thread: 1.07 -> 0.94 ms on 2
/// threads (AMD EPYC Zen 4); half of it was no faster.
pub(crate) const MIN_WORK_PER_THREAD: usize = 48 * 48 * 64;

/// One GEMM: `C = alpha * A @ B + beta * C` where A is m x k, B is k x n and C is m x n,
/// strides in elements (any, zero included, for A and B). `beta == 0` ignores C's previous
/// contents, NaN included.
#[derive(Clone, Copy)]
pub struct Problem<T> {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub alpha: T,
    pub a: *const T,
    pub rsa: isize,
    pub csa: isize,
    pub b: *const T,
    pub rsb: isize,
    pub csb: isize,
    pub beta: T,
    pub c: *mut T,
    pub rsc: isize,
    pub csc: isize,
}

// SAFETY: `Problem::run` shares a problem between threads whose blocks write disjoint parts
// of C and only read A and B.
unsafe impl<T: Sync> Sync for Problem<T> {}

/// The element types the support library multiplies.
pub trait Element: Copy + PartialOrd + Send + Sync + Add<Output = Self> + Mul<Output = Self> + 'static {
    const ZERO: Self;
    const ONE: Self;
    /// `matrixmultiply`, for CPUs without AVX2 and FMA.
    const PORTABLE: Kernel<Self>;

    /// The kernel of `isa` (which must be available), and its register tile (rows,
    /// columns): blocks of C are cut at multiples of it.
    fn kernel(isa: Isa) -> (Kernel<Self>, (usize, usize));

    /// The fastest kernel on this CPU, and its register tile.
    fn best() -> (Kernel<Self>, (usize, usize)) {
        Self::kernel(Isa::best())
    }

    /// The kernel for `p` when it is too small for blocking (`tiny`), on this CPU.
    fn tiny(p: &Problem<Self>) -> Option<Kernel<Self>>;
}

macro_rules! element {
    ($t:ty, $portable:path) => {
        impl Element for $t {
            const ZERO: $t = 0.0;
            const ONE: $t = 1.0;
            const PORTABLE: Kernel<$t> = |p| {
                // SAFETY: the Kernel contract; matrixmultiply takes the same arguments.
                unsafe {
                    $portable(p.m, p.k, p.n, p.alpha, p.a, p.rsa, p.csa, p.b, p.rsb, p.csb, p.beta, p.c, p.rsc, p.csc)
                }
            };

            fn tiny(_p: &Problem<$t>) -> Option<Kernel<$t>> {
                #[cfg(target_arch = "x86_64")]
                if tiny::fits(_p) && Isa::best() >= Isa::Avx2 {
                    return Some(tiny::gemm::<$t>);
                }
                None
            }

            fn kernel(isa: Isa) -> (Kernel<$t>, (usize, usize)) {
                // SAFETY (each kernel): `isa` is available (the caller's word), and the
                // Kernel contract.
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => (
                        |p| unsafe { blocked::avx512::<$t>(p, Operands::default()) },
                        blocked::register_tile::<$t, simd::Avx512>(),
                    ),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => (
                        |p| unsafe { blocked::avx2::<$t>(p, Operands::default()) },
                        blocked::register_tile::<$t, simd::Avx2>(),
                    ),
                    _ => (Self::PORTABLE, (8, 8)),
                }
            }
        }
    };
}

element!(f32, matrixmultiply::sgemm);
element!(f64, matrixmultiply::dgemm);

/// A float32 operand in `aotc_abi::gemm`'s packed layout (A in panels of `MR` rows, B in
/// panels of `NR` columns), from row/column `start` (a multiple of the width) on: where
/// the block of C a thread computes starts.
#[derive(Clone, Copy)]
pub struct Packed {
    pub data: *const f32,
    /// `aotc_abi::gemm::padded` of the whole operand's rows (A) or columns (B).
    pub padded: usize,
    pub start: usize,
}

// SAFETY: the threads of `gemm_packed` only read through it.
unsafe impl Sync for Packed {}

impl Packed {
    /// The whole operand of `len` rows (A, width MR) or columns (B, width NR) at `data`.
    pub fn new(data: *const f32, len: usize, width: usize) -> Option<Packed> {
        Some(Packed { data, padded: aotc_abi::gemm::padded(len, width)?, start: 0 })
    }

    /// The operand from `offset` rows/columns further on (a multiple of the width).
    pub(crate) fn skip(self, offset: usize) -> Self {
        Packed { start: self.start + offset, ..self }
    }

    /// The first panel from row/column `start + i` (i a multiple of the width) of the depth
    /// block starting at `pc` of a depth-`k` operand; the block's next panels follow it.
    fn panels(self, k: usize, pc: usize, i: usize) -> *const f32 {
        self.data.wrapping_add(aotc_abi::gemm::panel_offset(k, self.padded, pc, self.start + i))
    }
}

/// A float32 bias added to the product in the GEMM's first depth block: one value per
/// row of C (a convolution's output channels) or per column (a Linear layer's outputs).
#[derive(Clone, Copy, Default)]
pub enum Bias {
    #[default]
    None,
    Rows(*const f32),
    Cols(*const f32),
}

impl Bias {
    /// The bias of the block of C at (`row0`, `col0`).
    fn skip(self, row0: usize, col0: usize) -> Self {
        match self {
            Bias::None => Bias::None,
            Bias::Rows(b) => Bias::Rows(b.wrapping_add(row0)),
            Bias::Cols(b) => Bias::Cols(b.wrapping_add(col0)),
        }
    }
}

/// A float32 matrix shaped as C added to the product in the GEMM's first depth block (a
/// convolution's residual): element (i, j) at `at + i * rs + j`, rows of contiguous
/// elements, overlapping no element of C.
#[derive(Clone, Copy)]
pub struct Addend {
    pub at: *const f32,
    pub rs: isize,
}

impl Addend {
    /// The addend of the block of C at (`row0`, `col0`).
    pub fn skip(self, row0: usize, col0: usize) -> Self {
        Addend { at: self.at.wrapping_offset(row0 as isize * self.rs + col0 as isize), ..self }
    }

    /// Where element (i, j) is, as a `T` (float32 only ever has an addend).
    #[inline(always)]
    fn at<T>(self, i: usize, j: usize) -> *const T {
        self.at.wrapping_offset(i as isize * self.rs + j as isize).cast()
    }
}

/// How a float32 GEMM gets its operands when not through `Problem`'s pointers and strides
/// (which are then not read for that operand): A or B packed; and its output pass: a bias
/// and an addend added and an activation applied as C is written.
#[derive(Clone, Copy, Default)]
pub struct Operands {
    pub a: Option<Packed>,
    pub b: Option<Packed>,
    pub bias: Bias,
    pub addend: Option<Addend>,
    pub activation: Activation,
}

// SAFETY: the bias and addend pointers are only read (by the threads of `gemm_packed`).
unsafe impl Sync for Operands {}
unsafe impl Send for Operands {}

impl Operands {
    /// The operands of the block of C at (`row0`, `col0`) (a method, so that closures
    /// capture the whole struct).
    fn block(self, row0: usize, col0: usize) -> Self {
        Operands {
            a: self.a.map(|a| a.skip(row0)),
            b: self.b.map(|b| b.skip(col0)),
            bias: self.bias.skip(row0, col0),
            addend: self.addend.map(|d| d.skip(row0, col0)),
            activation: self.activation,
        }
    }
}

/// Computes `p` with the operands `packed` gives, on up to `threads` threads.
///
/// # Safety
/// A packed A holds `packed_len(p.k, m, MR)` floats packed for `m >= start + p.m` rows
/// with that `padded` (its `start` a multiple of MR), a packed B likewise with `n >= start +
/// p.n` columns and NR; a row fill writes exactly the elements asked for; the other
/// operands and C as in [`gemm`].
pub unsafe fn gemm_packed(p: Problem<f32>, packed: Operands, threads: usize, parallel_for: ParallelFor<'_>) {
    // SAFETY: the caller's contract; the best instruction set is available.
    unsafe { gemm_packed_on(Isa::best(), p, packed, threads, parallel_for) }
}

/// [`gemm_packed`] with the kernels of `isa`.
///
/// # Safety
/// `isa` is available, and as [`gemm_packed`].
pub unsafe fn gemm_packed_on(
    isa: Isa,
    p: Problem<f32>,
    packed: Operands,
    threads: usize,
    parallel_for: ParallelFor<'_>,
) {
    use aotc_abi::gemm::{MR, NR};
    // Blocks of C start at whole panels of the packed operands.
    let (rows, cols) = f32::kernel(isa).1;
    let tile = (if packed.a.is_some() { MR } else { rows }, if packed.b.is_some() { NR } else { cols });
    // A packed operand's pointer is never offset: its strides become 0.
    let (rsa, csa) = if packed.a.is_some() { (0, 0) } else { (p.rsa, p.csa) };
    let (rsb, csb) = if packed.b.is_some() { (0, 0) } else { (p.rsb, p.csb) };
    let p = Problem { rsa, csa, rsb, csb, ..p };
    if p.k == 0 {
        // No depth block to apply the output pass in: C = activation(beta * C + bias).
        // SAFETY: the caller's contract (C, and the bias's rows or columns).
        return unsafe { empty_product(p, packed) };
    }
    // SAFETY: the caller's contract; each block reads the panels of its own rows and columns.
    unsafe {
        p.run_blocks(tile, threads, parallel_for, &|part, row0, col0| {
            let packed = packed.block(row0, col0);
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => blocked::avx512(part, packed),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => blocked::avx2(part, packed),
                _ => portable_packed(part, packed),
            }
        })
    }
}

/// [`gemm_packed`] on one thread with the portable kernel: a `matrixmultiply` call per panel of each
/// packed operand and depth block.
///
/// # Safety
/// As [`gemm_packed`], for the operands' `start` on.
unsafe fn portable_packed(p: Problem<f32>, packed: Operands) {
    use aotc_abi::gemm::{KC, MR, NR};
    if p.k == 0 {
        // SAFETY: the caller's contract.
        return unsafe { empty_product(p, packed) };
    }
    // The bias and addend first, then the products accumulate onto them.
    let p = match (packed.bias, packed.addend) {
        (Bias::None, None) => p,
        _ => {
            // SAFETY: C's m x n elements, the bias's m or n values and the addend's m x n
            // (the caller's contract).
            unsafe { add_sums(p, packed) };
            Problem { beta: 1.0, ..p }
        }
    };
    for pc in (0..p.k).step_by(KC) {
        let kc = KC.min(p.k - pc);
        let beta = if pc == 0 { p.beta } else { 1.0 };
        // (first row, rows, A, its row and column strides) of each part of A, and the same
        // for the columns of B.
        let a_parts: Vec<_> = match packed.a {
            Some(a) => {
                (0..p.m).step_by(MR).map(|i| (i, MR.min(p.m - i), a.panels(p.k, pc, i), 1, MR as isize)).collect()
            }
            None => vec![(0, p.m, p.a.wrapping_offset(pc as isize * p.csa), p.rsa, p.csa)],
        };
        let b_parts: Vec<_> = match packed.b {
            Some(b) => {
                (0..p.n).step_by(NR).map(|j| (j, NR.min(p.n - j), b.panels(p.k, pc, j), NR as isize, 1)).collect()
            }
            None => vec![(0, p.n, p.b.wrapping_offset(pc as isize * p.rsb), p.rsb, p.csb)],
        };
        for &(i, m, a, rsa, csa) in &a_parts {
            for &(j, n, b, rsb, csb) in &b_parts {
                let c = p.c.wrapping_offset(i as isize * p.rsc + j as isize * p.csc);
                // SAFETY: each part lies inside its operand (a panel holds kc depths of its
                // width), and rows i.., columns j.. of C inside the caller's C.
                unsafe { f32::PORTABLE(Problem { m, k: kc, n, a, rsa, csa, b, rsb, csb, beta, c, ..p }) }
            }
        }
    }
    // SAFETY: as above.
    unsafe { activate(p, packed.activation) }
}

/// `C = activation(beta * C + bias + addend)`: the whole GEMM when the depth is 0.
///
/// # Safety
/// As [`add_sums`].
unsafe fn empty_product(p: Problem<f32>, packed: Operands) {
    // SAFETY: the caller's contract.
    unsafe {
        add_sums(p, packed);
        activate(p, packed.activation);
    }
}

/// `C = beta * C + bias + addend` (`beta == 0` ignoring C), for a product that adds onto
/// it.
///
/// # Safety
/// C's m x n elements lie where its pointer and strides say; the bias holds m (rows) or n
/// (columns) floats, the addend m x n.
unsafe fn add_sums(p: Problem<f32>, packed: Operands) {
    for i in 0..p.m {
        for j in 0..p.n {
            // SAFETY: (i, j) is inside C, i and j inside the bias, (i, j) inside the addend.
            unsafe {
                let c = p.c.offset(i as isize * p.rsc + j as isize * p.csc);
                let b = match packed.bias {
                    Bias::None => 0.0,
                    Bias::Rows(b) => *b.add(i),
                    Bias::Cols(b) => *b.add(j),
                };
                let d = packed.addend.map_or(0.0, |d| *d.at::<f32>(i, j));
                *c = if p.beta == 0.0 { b + d } else { p.beta * *c + b + d };
            }
        }
    }
}

/// `C = activation(C)` element by element.
///
/// # Safety
/// C's m x n elements lie where its pointer and strides say.
unsafe fn activate(p: Problem<f32>, activation: Activation) {
    if activation == Activation::None {
        return;
    }
    for i in 0..p.m as isize {
        for j in 0..p.n as isize {
            // SAFETY: (i, j) is inside C.
            unsafe {
                let c = p.c.offset(i * p.rsc + j * p.csc);
                *c = crate::activation::scalar(activation, *c);
            }
        }
    }
}

/// Computes `p` with this CPU's fastest kernel on up to `threads` threads.
///
/// # Safety
/// The pointers cover the matrices the sizes and strides describe, and no two elements of C
/// share an address nor overlap A or B.
pub unsafe fn gemm<T: Element>(p: Problem<T>, threads: usize, parallel_for: ParallelFor<'_>) {
    // SAFETY: the caller's contract; the best instruction set is available.
    unsafe { gemm_on(Isa::best(), p, threads, parallel_for) }
}

/// [`gemm`] with the kernels of `isa` (tiny products included, which need AVX2).
///
/// # Safety
/// `isa` is available, and as [`gemm`].
pub unsafe fn gemm_on<T: Element>(isa: Isa, p: Problem<T>, threads: usize, parallel_for: ParallelFor<'_>) {
    if isa != Isa::Portable {
        if let Some(kernel) = T::tiny(&p) {
            // SAFETY: the caller's contract.
            return unsafe { kernel(p) };
        }
    }
    let (kernel, tile) = T::kernel(isa);
    // SAFETY: the caller's contract.
    unsafe { p.run(kernel, tile, threads, parallel_for) }
}

impl<T: Element> Problem<T> {
    /// Rows `start..start + len` of C (and of A).
    fn rows(self, start: usize, len: usize) -> Self {
        let (s, len) = (start as isize, len.min(self.m - start));
        Problem { m: len, a: self.a.wrapping_offset(s * self.rsa), c: self.c.wrapping_offset(s * self.rsc), ..self }
    }

    /// Columns `start..start + len` of C (and of B).
    fn cols(self, start: usize, len: usize) -> Self {
        let (s, len) = (start as isize, len.min(self.n - start));
        Problem { n: len, b: self.b.wrapping_offset(s * self.csb), c: self.c.wrapping_offset(s * self.csc), ..self }
    }

    /// Computes the problem with `kernel` on up to `threads` threads, in blocks of C whose
    /// sizes are multiples of `tile` (rows, columns), so that only the last block of each
    /// call ends in a partial register tile.
    ///
    /// # Safety
    /// As [`gemm`].
    pub unsafe fn run(self, kernel: Kernel<T>, tile: (usize, usize), threads: usize, parallel_for: ParallelFor<'_>) {
        // SAFETY: the caller's contract.
        unsafe { self.run_blocks(tile, threads, parallel_for, &|part, _, _| kernel(part)) }
    }

    /// [`Problem::run`] with any single-threaded `kernel`, told each block's first row and
    /// column.
    ///
    /// # Safety
    /// As [`gemm`], for every block `kernel` is given.
    unsafe fn run_blocks(
        self,
        tile: (usize, usize),
        threads: usize,
        parallel_for: ParallelFor<'_>,
        kernel: &(dyn Fn(Self, usize, usize) + Sync),
    ) {
        // Fewer rows than a register tile still stream all of B through the tile, at the
        // pace of the loads (from L3 or memory for a weight) rather than of the
        // multiply-adds: such a product costs about a whole tile's rows. (ShuffleNet's
        // 1 x 1024 x 1000 classifier, a 4 MB weight, allowed 2 threads: 76 -> 38 us.)
        let work = self.m.max(tile.0).saturating_mul(self.n).saturating_mul(self.k.max(1));
        let threads = threads.min(work / MIN_WORK_PER_THREAD).max(1);
        // Each block packs a copy of the operand it shares with the other blocks: cutting
        // the longer side of C keeps that copy the smaller one.
        let split_rows = self.m >= self.n;
        let (len, align) = if split_rows { (self.m, tile.0) } else { (self.n, tile.1) };
        let block = len.div_ceil(threads).next_multiple_of(align.max(1)).max(1);
        let chunks = len.div_ceil(block);
        if chunks <= 1 {
            return kernel(self, 0, 0);
        }
        parallel_for(threads, chunks, &|i| {
            // A block of C with its rows of A or its columns of B lies inside the matrices
            // of the caller's contract, and the blocks of C are disjoint.
            if split_rows {
                kernel(self.rows(i * block, block), i * block, 0)
            } else {
                kernel(self.cols(i * block, block), 0, i * block)
            }
        });
    }
}

#[cfg(test)]
mod tests;
