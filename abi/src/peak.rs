//! The machine's floating-point peak, measured rather than assumed: the throughput of
//! independent float32 multiply-adds, on `threads` threads (best of three short runs).
//! One measurement for `aotc bench` and the support library's GEMM benchmark alike.

use std::time::Instant;

/// The FMA instructions a peak is measured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fma {
    /// 8-lane `vfmadd` (AVX2 + FMA).
    Avx2,
    /// 16-lane `vfmadd` (AVX-512F).
    Avx512,
}

impl Fma {
    /// The widest FMA this CPU has; `None` without FMA. It is the machine's peak, whatever
    /// instruction set `AOTC_ISA` lets the kernels use.
    pub fn widest() -> Option<Fma> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") {
                return Some(if has!("avx512f") { Fma::Avx512 } else { Fma::Avx2 });
            }
        }
        None
    }

    pub fn name(self) -> &'static str {
        match self {
            Fma::Avx2 => "AVX2",
            Fma::Avx512 => "AVX-512",
        }
    }

    fn lanes(self) -> u64 {
        match self {
            Fma::Avx2 => 8,
            Fma::Avx512 => 16,
        }
    }
}

/// A measured peak and the instructions that reached it.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    pub gflops: f64,
    pub fma: Fma,
}

/// The peak of the widest FMA on `threads` threads; `None` without FMA.
pub fn widest_fma_peak(threads: usize) -> Option<Peak> {
    let fma = Fma::widest()?;
    Some(Peak { gflops: fma_peak(threads, fma), fma })
}

/// GFLOP/s of `fma` on `threads` threads.
///
/// # Panics
/// If the CPU lacks `fma` (ask [`Fma::widest`] first).
pub fn fma_peak(threads: usize, fma: Fma) -> f64 {
    assert!(Fma::widest().is_some_and(|w| w == fma || w == Fma::Avx512), "this CPU has no {} FMA", fma.name());
    const ITERS: u64 = 20_000_000;
    let threads = threads.max(1);
    let best = (0..3)
        .map(|_| {
            let t = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| std::hint::black_box(chains(fma, std::hint::black_box(ITERS))));
                }
            });
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    // ACCUMULATORS FMAs of `lanes` lanes, 2 FLOPs each, per iteration and thread.
    (threads as u64 * ITERS * ACCUMULATORS as u64 * fma.lanes() * 2) as f64 / best / 1e9
}

/// Enough independent chains to cover the FMA latency (4 cycles) on two ports.
const ACCUMULATORS: usize = 12;

#[cfg(target_arch = "x86_64")]
fn chains(fma: Fma, iters: u64) -> f32 {
    // SAFETY (both): fma_peak checked that the CPU has these instructions.
    match fma {
        Fma::Avx2 => unsafe { avx2_chains(iters) },
        Fma::Avx512 => unsafe { avx512_chains(iters) },
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn chains(_: Fma, _: u64) -> f32 {
    unreachable!("Fma::widest is None off x86-64")
}

/// `iters` rounds of [`ACCUMULATORS`] independent 8-lane FMAs.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_chains(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); ACCUMULATORS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    _mm256_cvtss_f32(acc.into_iter().fold(_mm256_setzero_ps(), |s, x| _mm256_add_ps(s, x)))
}

/// `iters` rounds of [`ACCUMULATORS`] independent 16-lane FMAs.
///
/// # Safety
/// The CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_chains(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut acc = [_mm512_set1_ps(1.0); ACCUMULATORS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    _mm512_reduce_add_ps(acc.into_iter().fold(_mm512_setzero_ps(), |s, x| _mm512_add_ps(s, x)))
}
