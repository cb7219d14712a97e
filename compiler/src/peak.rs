//! The machine's floating-point peak, measured rather than assumed: the throughput of
//! independent float32 multiply-adds of the widest FMA the CPU has (AVX-512 where
//! present, else AVX2), on `threads` threads (best of three short runs). It is the
//! machine's peak, whatever instruction set `AOTC_ISA` lets the kernels use.

use std::time::Instant;

/// A measured peak and the instructions that reached it.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    pub gflops: f64,
    /// "AVX-512" or "AVX2".
    pub fma: &'static str,
}

/// The peak on `threads` threads; `None` without FMA.
#[cfg(target_arch = "x86_64")]
pub fn fma_peak(threads: usize) -> Option<Peak> {
    use std::is_x86_feature_detected as has;
    if !(has!("avx2") && has!("fma")) {
        return None;
    }
    let avx512 = has!("avx512f");
    // SAFETY (both): the features were detected above.
    let chains: fn(u64) -> f32 = if avx512 { |n| unsafe { avx512_chains(n) } } else { |n| unsafe { avx2_chains(n) } };
    let lanes = if avx512 { 16 } else { 8 };
    const ITERS: u64 = 20_000_000;
    let threads = threads.max(1);
    let best = (0..3)
        .map(|_| {
            let t = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| std::hint::black_box(chains(ITERS)));
                }
            });
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    // ACCUMULATORS FMAs of `lanes` lanes, 2 FLOPs each, per iteration and thread.
    let gflops = (threads as u64 * ITERS * ACCUMULATORS as u64 * lanes * 2) as f64 / best / 1e9;
    Some(Peak { gflops, fma: if avx512 { "AVX-512" } else { "AVX2" } })
}

#[cfg(not(target_arch = "x86_64"))]
pub fn fma_peak(_threads: usize) -> Option<Peak> {
    None
}

/// Enough independent chains to cover the FMA latency (4 cycles) on two ports.
#[cfg(target_arch = "x86_64")]
const ACCUMULATORS: usize = 12;

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
    let sum = acc.into_iter().fold(_mm256_setzero_ps(), |s, x| _mm256_add_ps(s, x));
    let mut out = [0f32; 8];
    // SAFETY: out holds 8 floats; storeu has no alignment requirement.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
    out.iter().sum()
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
