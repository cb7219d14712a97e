//! `aotc profile`: where the time of a compiled library goes, kernel by kernel, each
//! kernel named by the graph nodes it computes (the manifest records them) and timed by
//! the library itself (`aotc_profile_enable`): any library `aotc compile` made, as it is.

use aotc_abi::manifest::{GraphNode, Manifest};
use aotc_runtime::{Device, Model};
use std::path::Path;

pub struct ProfileOptions {
    pub iters: usize,
    pub warmup: usize,
    /// 0: the library's default ($AOTC_NUM_THREADS, else the available cores).
    pub threads: usize,
    pub device: Device,
    /// Weights to run with instead of the library's own (a weights file of its structure).
    pub weights_file: Option<std::path::PathBuf>,
}

#[derive(serde::Serialize)]
pub struct ProfileReport {
    pub library: String,
    /// Calls profiled.
    pub iters: usize,
    pub threads: usize,
    /// Mean time of a call inside the library, and in its kernels.
    pub call_ms: f64,
    pub kernels_ms: f64,
    /// Every kernel, slowest first.
    pub kernels: Vec<KernelTime>,
}

#[derive(serde::Serialize)]
pub struct KernelTime {
    pub rank: usize,
    /// Its index in the program (the manifest's `kernels`, the text IR's `; kernel N`).
    pub kernel: usize,
    pub kind: String,
    pub stage: usize,
    /// The graph value its output holds.
    pub writes: String,
    pub ms_per_call: f64,
    /// Its share of `call_ms`.
    pub percent: f64,
    pub nodes: Vec<GraphNode>,
}

pub fn profile(library: &Path, input: &Path, opts: &ProfileOptions) -> Result<ProfileReport, String> {
    let mut model = Model::load_with(
        library,
        opts.device,
        opts.threads,
        opts.weights_file.clone().map_or(aotc_runtime::Weights::Default, aotc_runtime::Weights::File),
    )
    .map_err(|e| e.to_string())?;
    let manifest: Manifest =
        serde_json::from_str(model.metadata_json()).map_err(|e| format!("embedded manifest: {e}"))?;
    let count = model.kernel_count().map_err(|e| e.to_string())?;
    if manifest.kernels.len() != count {
        return Err(format!("the manifest describes {} kernels, the library runs {count}", manifest.kernels.len()));
    }
    let inputs = crate::tensor_io::read_named_inputs(
        input,
        &model.inputs().iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
    )?;
    let iters = opts.iters.max(1);
    for i in 0..opts.warmup + iters {
        if i == opts.warmup {
            model.profile_enable(true).map_err(|e| e.to_string())?;
        }
        // Each call gets fresh inputs: a program may mutate them.
        let mut values = inputs.clone();
        model.run(&mut values).map_err(|e| format!("call {i}: {e}"))?;
    }
    let p = model.profile_read().map_err(|e| e.to_string())?;
    let per_call = |ns: f64| ns / 1e6 / p.calls.max(1) as f64;
    let call_ms = per_call(p.call_ns);
    let mut kernels: Vec<KernelTime> = manifest
        .kernels
        .iter()
        .zip(&p.kernel_ns)
        .enumerate()
        .map(|(k, (info, &ns))| KernelTime {
            rank: 0,
            kernel: k,
            kind: info.kind.clone(),
            stage: info.stage,
            writes: info.writes.clone(),
            ms_per_call: per_call(ns),
            percent: if call_ms > 0.0 { 100.0 * per_call(ns) / call_ms } else { 0.0 },
            nodes: info.nodes.iter().filter_map(|&n| manifest.nodes.get(n).cloned()).collect(),
        })
        .collect();
    kernels.sort_by(|a, b| b.ms_per_call.total_cmp(&a.ms_per_call).then(a.kernel.cmp(&b.kernel)));
    for (rank, k) in kernels.iter_mut().enumerate() {
        k.rank = rank + 1;
    }
    Ok(ProfileReport {
        library: library.display().to_string(),
        iters: p.calls as usize,
        threads: aotc_abi::thread_count(opts.threads as i64)?,
        call_ms,
        kernels_ms: per_call(p.kernel_ns.iter().sum()),
        kernels,
    })
}

/// "add_3, relu [layers.0.ff: FeedForward] (model.py:12)": the names, then the modules
/// and source lines they come from, each once.
fn describe(k: &KernelTime) -> String {
    if k.nodes.is_empty() {
        return format!("(no graph node: the copy into '{}')", k.writes);
    }
    let mut s = k.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ");
    let mut seen = vec![];
    for n in &k.nodes {
        let module = n.module.as_ref().map(|m| format!(" [{m}: {}]", n.module_type.as_deref().unwrap_or("?")));
        for place in [module, n.source.as_ref().map(|src| format!(" ({src})"))].into_iter().flatten() {
            if !seen.contains(&place) {
                s += &place;
                seen.push(place);
            }
        }
    }
    s
}

impl ProfileReport {
    pub fn text(&self) -> String {
        let mut s = format!(
            "{}: {} calls on {} thread(s), {:.4} ms per call inside the library\n",
            self.library, self.iters, self.threads, self.call_ms
        );
        s += &format!("{:>4}  {:>6}  {:<13} {:>9} {:>6}  nodes\n", "rank", "kernel", "kind", "ms/call", "%");
        for k in &self.kernels {
            s += &format!(
                "{:>4}  {:>6}  {:<13} {:>9.4} {:>5.1}%  {}\n",
                k.rank,
                format!("#{}", k.kernel),
                k.kind,
                k.ms_per_call,
                k.percent,
                describe(k)
            );
        }
        let share = if self.call_ms > 0.0 { 100.0 * self.kernels_ms / self.call_ms } else { 0.0 };
        s += &format!("total: kernels {:.4} ms per call, {share:.1}% of the call; the other {:.4} ms is the library's own work (input checks, allocation, copies)",
            self.kernels_ms, self.call_ms - self.kernels_ms);
        s
    }
}
