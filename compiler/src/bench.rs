//! `aotc bench`: the latency of a compiled library on given inputs (min/median/max over
//! timed calls after warm-up calls), and its GEMM FLOP rate against this machine's peak
//! where the compiler counted the FLOPs.

use aotc_abi::available_cores;
use aotc_abi::manifest::{InputSpec, Manifest};
use aotc_abi::sym::SymExpr;
use aotc_runtime::{Device, Model, Value};
use std::path::Path;
use std::time::Instant;

pub struct BenchOptions {
    pub iters: usize,
    pub warmup: usize,
    /// 0: the library's default ($AOTC_NUM_THREADS, else the available cores).
    pub threads: usize,
    pub device: Device,
    /// Weights to run with instead of the library's own (a weights file of its structure).
    pub weights_file: Option<std::path::PathBuf>,
}

#[derive(serde::Serialize)]
pub struct BenchReport {
    pub library: String,
    pub iters: usize,
    pub threads: usize,
    pub min_ms: f64,
    pub median_ms: f64,
    pub max_ms: f64,
    /// GEMM FLOPs of one call, when known.
    pub gflop: Option<f64>,
    pub gflops: Option<f64>,
    /// Measured FMA peak for `threads` threads (GFLOP/s), when this CPU has FMA.
    pub peak_gflops: Option<f64>,
    /// The FMA instructions of that peak: the widest the CPU has ("AVX-512", "AVX2").
    pub peak_fma: Option<&'static str>,
    pub fraction_of_peak: Option<f64>,
}

pub fn bench(library: &Path, input: &Path, opts: &BenchOptions) -> Result<BenchReport, String> {
    let mut model = Model::load_with(
        library,
        opts.device,
        opts.threads,
        opts.weights_file.clone().map_or(aotc_runtime::Weights::Default, aotc_runtime::Weights::File),
    )
    .map_err(|e| e.to_string())?;
    let manifest: Manifest =
        serde_json::from_str(model.metadata_json()).map_err(|e| format!("embedded manifest: {e}"))?;
    let inputs = crate::tensor_io::read_named_inputs(
        input,
        &model.inputs().iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
    )?;
    let mut times = Vec::with_capacity(opts.iters);
    for i in 0..opts.warmup + opts.iters.max(1) {
        // Each call gets fresh inputs: a program may mutate them.
        let mut values = inputs.clone();
        let elapsed = match opts.device {
            // On a GPU the inputs are copied to the device before the clock starts.
            Device::Cuda(_) => {
                let staged = model.stage(&mut values).map_err(|e| format!("call {i}: {e}"))?;
                let t = Instant::now();
                // SAFETY: the staged descriptors point at device copies alive until `staged` drops.
                unsafe { model.run_descriptors(staged.descriptors()) }.map_err(|e| format!("call {i}: {e}"))?;
                t.elapsed()
            }
            Device::Cpu => {
                let t = Instant::now();
                model.run(&mut values).map_err(|e| format!("call {i}: {e}"))?;
                t.elapsed()
            }
        };
        if i >= opts.warmup {
            times.push(elapsed.as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    let threads = aotc_abi::thread_count(opts.threads as i64)?;
    let gflop = call_flops(&manifest, &inputs).map(|f| f / 1e9).filter(|&f| f > 0.0);
    let median = times[times.len() / 2];
    let gflops = gflop.map(|g| g / (median / 1e3));
    let peak = aotc_abi::peak::widest_fma_peak(threads.min(available_cores()));
    Ok(BenchReport {
        library: library.display().to_string(),
        iters: times.len(),
        threads,
        min_ms: times[0],
        median_ms: median,
        max_ms: times[times.len() - 1],
        gflop,
        gflops,
        peak_gflops: peak.map(|p| p.gflops),
        peak_fma: peak.map(|p| p.fma.name()),
        fraction_of_peak: gflops.zip(peak).map(|(g, p)| g / p.gflops),
    })
}

/// The FLOPs of one call: the manifest's count with the symbols the inputs' shapes bind
/// (a dimension that is a bare symbol); `None` if some symbol stays unknown.
fn call_flops(m: &Manifest, inputs: &[Value]) -> Option<f64> {
    let mut syms = vec![None; m.symbols.len()];
    for (spec, v) in m.inputs.iter().zip(inputs) {
        if let (InputSpec::Tensor(t), Value::Tensor(x)) = (spec, v) {
            for (e, &n) in t.sizes.iter().zip(&x.shape) {
                if let SymExpr::Sym(s) = e {
                    syms[*s as usize] = Some(n);
                }
            }
        }
    }
    m.flops.eval(&syms).ok().map(|f| f as f64)
}

impl BenchReport {
    pub fn text(&self) -> String {
        let mut s = format!(
            "{}: {} calls on {} thread(s): min {:.4} ms, median {:.4} ms, max {:.4} ms",
            self.library, self.iters, self.threads, self.min_ms, self.median_ms, self.max_ms
        );
        match (self.gflop, self.gflops) {
            (Some(g), Some(r)) => {
                s += &format!("\n  GEMM work {g:.4} GFLOP per call: {r:.1} GFLOP/s");
                if let (Some(p), Some(f), Some(fma)) = (self.peak_gflops, self.fraction_of_peak, self.peak_fma) {
                    s += &format!(
                        ", {:.0}% of the measured {fma} FMA peak ({p:.1} GFLOP/s on {} thread(s))",
                        f * 100.0,
                        self.threads.min(available_cores())
                    );
                }
            }
            _ => s += "\n  no GEMM FLOP count (no matmul/convolution, or sizes the inputs do not bind)",
        }
        s
    }
}
