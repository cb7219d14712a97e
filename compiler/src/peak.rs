//! The machine's floating-point peak, measured rather than assumed: AVX2 FMA throughput
//! of independent multiply-adds on `threads` threads (best of three short runs).

use std::time::Instant;

/// GFLOP/s of f32 AVX2 FMA on `threads` threads; `None` without AVX2/FMA.
#[cfg(target_arch = "x86_64")]
pub fn fma_gflops(threads: usize) -> Option<f64> {
    if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
        return None;
    }
    const ITERS: u64 = 20_000_000;
    let threads = threads.max(1);
    let best = (0..3)
        .map(|_| {
            let t = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    // SAFETY: AVX2 and FMA were detected above.
                    s.spawn(|| std::hint::black_box(unsafe { fma_loop(ITERS) }));
                }
            });
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    // 12 accumulators x 8 lanes x 2 FLOPs per iteration and thread.
    Some((threads as u64 * ITERS * ACCUMULATORS as u64 * 8 * 2) as f64 / best / 1e9)
}

#[cfg(not(target_arch = "x86_64"))]
pub fn fma_gflops(_threads: usize) -> Option<f64> {
    None
}

/// Enough independent chains to cover the FMA latency on two ports.
#[cfg(target_arch = "x86_64")]
const ACCUMULATORS: usize = 12;

/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_loop(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm256_set1_ps(0.999_999);
    let b = _mm256_set1_ps(1e-7);
    let mut acc = [_mm256_set1_ps(1.0); ACCUMULATORS];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut sum = _mm256_setzero_ps();
    for x in acc {
        sum = _mm256_add_ps(sum, x);
    }
    let mut out = [0f32; 8];
    // SAFETY: out holds 8 floats; storeu has no alignment requirement.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
    out.iter().sum()
}
