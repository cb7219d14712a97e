//! Matrix multiplication `C = alpha * A @ B + beta * C` on strided operands, on up to a
//! given number of threads without a thread pool of its own: C is cut into blocks of rows
//! (or of columns when C is wider than tall), and each block is one single-threaded GEMM
//! on sub-matrices (offset pointers, the same strides). The threads come from the caller's
//! `parallel_for`: a `.so` is loaded and unloaded many times per process, so the support
//! library must not start a pool that outlives it.
//!
//! The single-threaded kernel is [`avx2`] where the CPU has AVX2 and FMA, else
//! `matrixmultiply` ([`Element::PORTABLE`]). A float32 B packed at compile time
//! ([`PackedB`], layout in `aotc_abi::gemm`) goes through [`gemm_packed_b`].

#[cfg(target_arch = "x86_64")]
mod avx2;

use std::ops::{Add, Mul};

/// Runs `f(0)`, ..., `f(chunks - 1)` spread over up to `threads` threads, the caller's
/// included, and returns when all have run.
pub type ParallelFor<'a> = &'a (dyn Fn(usize, usize, &(dyn Fn(usize) + Sync)) + Sync);

/// A single-threaded GEMM.
///
/// # Safety
/// The problem's pointers cover the matrices its sizes and strides describe.
pub type Kernel<T> = unsafe fn(Problem<T>);

/// Below this many multiply-adds per thread, waking another thread costs more than it saves
/// (a few microseconds of work; the `gemm` crate uses the same threshold).
const MIN_WORK_PER_THREAD: usize = 48 * 48 * 256;

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
pub trait Element: Copy + PartialEq + Send + Sync + Add<Output = Self> + Mul<Output = Self> + 'static {
    const ZERO: Self;
    const ONE: Self;
    /// `matrixmultiply`, for CPUs without AVX2 and FMA.
    const PORTABLE: Kernel<Self>;

    /// The fastest kernel on this CPU, and its register tile (rows, columns): blocks of C
    /// are cut at multiples of it.
    fn best() -> (Kernel<Self>, (usize, usize));
}

macro_rules! element {
    ($t:ty, $portable:path) => {
        impl Element for $t {
            const ZERO: $t = 0.0;
            const ONE: $t = 1.0;
            const PORTABLE: Kernel<$t> = |p| {
                // SAFETY: the Kernel contract; matrixmultiply takes the same arguments.
                unsafe { $portable(p.m, p.k, p.n, p.alpha, p.a, p.rsa, p.csa, p.b, p.rsb, p.csb, p.beta, p.c, p.rsc, p.csc) }
            };

            fn best() -> (Kernel<$t>, (usize, usize)) {
                #[cfg(target_arch = "x86_64")]
                if avx2::available() {
                    return (avx2::gemm::<$t>, avx2::register_tile::<$t>());
                }
                (Self::PORTABLE, (8, 8))
            }
        }
    };
}

element!(f32, matrixmultiply::sgemm);
element!(f64, matrixmultiply::dgemm);

/// A float32 right operand in `aotc_abi::gemm`'s packed layout, from column `col0` (a
/// multiple of `NR`) on: the blocks of C a thread computes start there.
#[derive(Clone, Copy)]
pub struct PackedB {
    pub data: *const f32,
    /// `aotc_abi::gemm::padded_cols` of the whole operand.
    pub n_padded: usize,
    pub col0: usize,
}

// SAFETY: the threads of `gemm_packed_b` only read through it.
unsafe impl Sync for PackedB {}

impl PackedB {
    /// The operand from column `col0` on (a method, so that closures capture the whole
    /// `PackedB`).
    fn from_col(self, col0: usize) -> Self {
        PackedB { col0, ..self }
    }

    /// The first panel of columns `col0 + j..` (j a multiple of NR) of the depth block
    /// starting at row `pc` of a `k`-row operand; the block's next panels follow it.
    fn panels(self, k: usize, pc: usize, j: usize) -> *const f32 {
        self.data.wrapping_add(aotc_abi::gemm::panel_offset(k, self.n_padded, pc, self.col0 + j))
    }
}

/// Computes `p` with B read from `b` instead of `p.b`, on up to `threads` threads.
///
/// # Safety
/// `b.data` holds `aotc_abi::gemm::packed_len(p.k, n)` floats packed for some `n >= p.n`
/// with `b.n_padded = padded_cols(n)`, `b.col0 == 0`; A and C as in [`gemm`].
pub unsafe fn gemm_packed_b(p: Problem<f32>, b: PackedB, threads: usize, parallel_for: ParallelFor<'_>) {
    let nr = aotc_abi::gemm::NR;
    // Blocks of C start at whole panels of the packed B.
    let tile = (f32::best().1 .0, nr);
    // Blocks of columns keep p.b (csb = 0) and say where they start instead.
    let p = Problem { b: b.data, rsb: 0, csb: 0, ..p };
    // SAFETY: the caller's contract; each block reads the panels of its own columns.
    unsafe {
        p.run_blocks(tile, threads, parallel_for, &|part, col0| {
            let b = b.from_col(col0);
            #[cfg(target_arch = "x86_64")]
            if avx2::available() {
                return avx2::gemm_packed_b(part, b);
            }
            portable_packed_b(part, b)
        })
    }
}

/// [`gemm_packed_b`] on one thread without AVX2: a `matrixmultiply` call per panel.
///
/// # Safety
/// As [`gemm_packed_b`], for `b.col0` on.
unsafe fn portable_packed_b(p: Problem<f32>, b: PackedB) {
    use aotc_abi::gemm::{KC, NR};
    if p.k == 0 {
        // SAFETY: C = beta * C reads no operand.
        return unsafe { f32::PORTABLE(p) };
    }
    for pc in (0..p.k).step_by(KC) {
        let kc = KC.min(p.k - pc);
        let beta = if pc == 0 { p.beta } else { 1.0 };
        for j in (0..p.n).step_by(NR) {
            let part = Problem {
                k: kc,
                n: NR.min(p.n - j),
                a: p.a.wrapping_offset(pc as isize * p.csa),
                b: b.panels(p.k, pc, j),
                rsb: NR as isize,
                csb: 1,
                beta,
                c: p.c.wrapping_offset(j as isize * p.csc),
                ..p
            };
            // SAFETY: the panel holds kc rows of NR floats; A's columns pc..pc + kc and C's
            // columns j.. lie inside the caller's matrices.
            unsafe { f32::PORTABLE(part) }
        }
    }
}

/// Computes `p` with this CPU's fastest kernel on up to `threads` threads.
///
/// # Safety
/// The pointers cover the matrices the sizes and strides describe, and no two elements of C
/// share an address nor overlap A or B.
pub unsafe fn gemm<T: Element>(p: Problem<T>, threads: usize, parallel_for: ParallelFor<'_>) {
    let (kernel, tile) = T::best();
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
        unsafe { self.run_blocks(tile, threads, parallel_for, &|part, _| kernel(part)) }
    }

    /// [`Problem::run`] with any single-threaded `kernel`, told each block's first column.
    ///
    /// # Safety
    /// As [`gemm`], for every block `kernel` is given.
    unsafe fn run_blocks(self, tile: (usize, usize), threads: usize, parallel_for: ParallelFor<'_>, kernel: &(dyn Fn(Self, usize) + Sync)) {
        let work = self.m.saturating_mul(self.n).saturating_mul(self.k.max(1));
        let threads = threads.min(work / MIN_WORK_PER_THREAD).max(1);
        // Each block packs a copy of the operand it shares with the other blocks: cutting
        // the longer side of C keeps that copy the smaller one.
        let split_rows = self.m >= self.n;
        let (len, align) = if split_rows { (self.m, tile.0) } else { (self.n, tile.1) };
        let block = len.div_ceil(threads).next_multiple_of(align.max(1)).max(1);
        let chunks = len.div_ceil(block);
        if chunks <= 1 {
            return kernel(self, 0);
        }
        parallel_for(threads, chunks, &|i| {
            let (part, col0) = if split_rows { (self.rows(i * block, block), 0) } else { (self.cols(i * block, block), i * block) };
            // A block of C with its rows of A or its columns of B lies inside the matrices
            // of the caller's contract, and the blocks of C are disjoint.
            kernel(part, col0)
        });
    }
}

#[cfg(test)]
mod tests;
