//! GEMM micro-benchmark: `cargo bench -p aotc-embedded --bench gemm`.
//!
//! Prints GFLOP/s (best and median of the runs) of f32 GEMMs for `matrixmultiply`, the
//! `gemm` crate and the support library's kernel for each instruction set this CPU has
//! (AVX2, AVX-512), each on the support library's partition of C over 1 and 2 threads, and
//! of the support library with A or B pre-packed as the compiler packs weights
//! (`gemm_packed`), next to the FMA peak of this machine measured by a register-only loop
//! (with AVX-512 FMAs where the CPU has them). The kernels take turns, so that load from
//! other processes falls on all alike; on a busy machine compare the rows of one run, not
//! runs.

use aotc_abi::peak::{fma_peak, Fma};
use aotc_embedded::gemm::{gemm_packed_on, Element, Isa, Kernel, Operands, Packed, Problem};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The signature of the support library's pool (`pool::parallel_for`), on scoped threads.
fn parallel_for(threads: usize, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
    let next = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= chunks {
            break;
        }
        f(i);
    };
    std::thread::scope(|s| {
        for _ in 1..threads.min(chunks) {
            s.spawn(work);
        }
        work();
    });
}

/// The `gemm` crate single-threaded (its own threading needs rayon's global pool).
unsafe fn gemm_crate(p: Problem<f32>) {
    // SAFETY: the Kernel contract. The gemm crate computes dst = alpha*dst + beta*lhs@rhs
    // and reads dst only when read_dst is set.
    unsafe {
        gemm::gemm(
            p.m,
            p.n,
            p.k,
            p.c,
            p.csc,
            p.rsc,
            p.beta != 0.0,
            p.a,
            p.csa,
            p.rsa,
            p.b,
            p.csb,
            p.rsb,
            p.beta,
            p.alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// Best and median seconds of each of `runs`, after a warm-up, taking turns for at least
/// `budget` in all.
fn time(runs: &[&dyn Fn()], budget: Duration) -> Vec<(f64, f64)> {
    runs.iter().for_each(|f| f());
    let mut times = vec![Vec::new(); runs.len()];
    let start = Instant::now();
    while times[0].len() < 5 || (start.elapsed() < budget && times[0].len() < 1000) {
        for (f, times) in runs.iter().zip(&mut times) {
            let t = Instant::now();
            f();
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            (t[0], t[t.len() / 2])
        })
        .collect()
}

struct Candidate {
    name: &'static str,
    kernel: Kernel<f32>,
    /// The register tile the partition aligns blocks of C to.
    tile: (usize, usize),
}

fn main() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
        println!("no AVX2+FMA: nothing to compare with");
        return;
    }
    let isas: Vec<Isa> = [Isa::Avx2, Isa::Avx512].into_iter().filter(|isa| isa.available()).collect();
    let widest = Fma::widest().expect("AVX2 and FMA were detected");
    let peak = [fma_peak(1, widest), fma_peak(2, widest)];
    println!("FMA peak ({}): {:.1} GFLOP/s on 1 thread, {:.1} on 2", widest.name(), peak[0], peak[1]);
    if widest == Fma::Avx512 {
        println!("(AVX2 FMAs: {:.1} GFLOP/s on 1 thread)", fma_peak(1, Fma::Avx2));
    }
    let mut candidates = vec![
        Candidate { name: "matrixmultiply", kernel: f32::PORTABLE, tile: (8, 8) },
        Candidate { name: "gemm crate", kernel: gemm_crate, tile: (8, 8) },
    ];
    for &isa in &isas {
        let (kernel, tile) = f32::kernel(isa);
        candidates.push(Candidate { name: if isa == Isa::Avx512 { "aotc avx512" } else { "aotc avx2" }, kernel, tile });
    }
    // The first three: 1024^3 and bench_mlp's layers; then ResNet-18's convolutions as the
    // support library runs them (weight rows x depth x positions: stem, layers 1, 3 and 4).
    let shapes: Vec<(usize, usize, usize)> = match std::env::var("AOTC_GEMM_SHAPES") {
        // "MxKxN,MxKxN,...": other shapes, for a quick look.
        Ok(list) => list
            .split(',')
            .filter_map(|s| {
                let v: Vec<usize> = s.split('x').filter_map(|x| x.parse().ok()).collect();
                (v.len() == 3).then(|| (v[0], v[1], v[2]))
            })
            .collect(),
        Err(_) => vec![
            (1024, 1024, 1024),
            (64, 1024, 4096),
            (64, 4096, 1024),
            (64, 147, 12544),
            (64, 576, 3136),
            (256, 2304, 196),
            (512, 4608, 49),
            (1, 512, 512),
            (8, 256, 256),
            (64, 64, 64),
        ],
    };
    println!("f32, row-major, C = A @ B; GFLOP/s; of peak = best / FMA peak on as many threads");
    println!("{:<16} {:>16} {:>7} {:>8} {:>8} {:>8}", "kernel", "m x k x n", "threads", "best", "median", "of peak");
    for (m, k, n) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.25).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
        let mut c = vec![0f32; m * n];
        let p = Problem {
            m,
            k,
            n,
            alpha: 1.0,
            a: a.as_ptr(),
            rsa: k as isize,
            csa: 1,
            b: b.as_ptr(),
            rsb: n as isize,
            csb: 1,
            beta: 0.0,
            c: c.as_mut_ptr(),
            rsc: n as isize,
            csc: 1,
        };
        let packed_a = aotc_abi::gemm::pack(k, m, aotc_abi::gemm::MR, |p, i| a[i * k + p]).expect("packed size");
        let packed_b = aotc_abi::gemm::pack(k, n, aotc_abi::gemm::NR, |p, j| b[p * n + j]).expect("packed size");
        let packed = [
            Operands { a: Packed::new(packed_a.as_ptr(), m, aotc_abi::gemm::MR), ..Operands::default() },
            Operands { b: Packed::new(packed_b.as_ptr(), n, aotc_abi::gemm::NR), ..Operands::default() },
        ];
        let flops = 2.0 * (m * k * n) as f64;
        for threads in [1, 2] {
            let mut runs: Vec<Box<dyn Fn()>> = candidates
                .iter()
                .map(|cand| -> Box<dyn Fn()> {
                    Box::new(move || {
                        // SAFETY: the vectors hold the row-major matrices p describes.
                        unsafe { p.run(cand.kernel, cand.tile, threads, &parallel_for) }
                    })
                })
                .collect();
            let mut names: Vec<String> = candidates.iter().map(|c| c.name.to_string()).collect();
            for &isa in &isas {
                for (packed, which) in packed.iter().zip(["A", "B"]) {
                    let packed = *packed;
                    // SAFETY: packed_a and packed_b hold A and B packed for exactly these
                    // sizes; `isa` is available.
                    runs.push(Box::new(move || unsafe { gemm_packed_on(isa, p, packed, threads, &parallel_for) }));
                    names.push(format!("{} packed {which}", if isa == Isa::Avx512 { "avx512" } else { "avx2" }));
                }
            }
            let runs: Vec<&dyn Fn()> = runs.iter().map(|f| &**f).collect();
            for (name, (best, median)) in names.iter().zip(time(&runs, Duration::from_secs(1))) {
                println!(
                    "{:<16} {:>16} {:>7} {:>8.1} {:>8.1} {:>8.2}",
                    name,
                    format!("{m}x{k}x{n}"),
                    threads,
                    flops / best / 1e9,
                    flops / median / 1e9,
                    flops / best / 1e9 / peak[threads - 1]
                );
            }
        }
    }
}
