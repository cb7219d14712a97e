//! aotc: compiles torch.export programs into self-contained native shared libraries.
//!
//! ```text
//!  .pt2 / model.json ─► frontend ─► lower (aten → loop IR) ─► passes::plan ─► codegen::cpu ─► link ─► .so
//!                       (Source)     (ir::Program)             (Manifest)      (object)       (cc)
//! ```
//! See ARCHITECTURE.md at the repository root for the invariants of each stage.

pub mod bench;
pub mod codegen;
pub mod error;
pub mod frontend;
pub mod inspect;
pub mod ir;
pub mod link;
pub mod lower;
pub mod op_support;
pub mod passes;
pub mod profile;
pub mod tensor_io;
pub mod weights_out;

pub use error::{Error, Result};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Default, Clone)]
pub struct CompileOptions {
    /// A safetensors file whose tensors (keyed by FQN) replace the archive's weights.
    pub weights: Option<PathBuf>,
    /// Where the weights go: into the library, or into a file beside it.
    pub placement: WeightsPlacement,
    /// The external weights file (default: `<library stem>.weights.safetensors` beside it).
    pub weights_out: Option<PathBuf>,
    /// The device lowered for (see [`Target`]).
    pub device: Target,
    /// The CPU the generated code is compiled for (`--cpu`); the default (empty) is
    /// [`aotc_abi::cpu::DEFAULT`], the x86-64 baseline.
    pub cpu: aotc_abi::cpu::CpuTarget,
}

pub use lower::Target;

/// Where a compiled library's weights live.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightsPlacement {
    /// In the library up to [`AUTO_EXTERNAL_BYTES`], in a file beyond.
    #[default]
    Auto,
    /// Always in the library (`--embed-weights`).
    Embedded,
    /// Always in a file beside it (`--external-weights`).
    External,
}

/// Above this many bytes of weights, [`WeightsPlacement::Auto`] writes them to a file: an
/// embedded blob past 2 GiB puts the code's 32-bit PC-relative references to the GOT out of
/// range and the link fails (measured: `weights_out::MAX_EMBEDDED_BYTES`); 1 GiB leaves a
/// margin, and a library that size gains nothing from holding its weights.
pub const AUTO_EXTERNAL_BYTES: u64 = 1 << 30;

/// What a compilation did, for `aotc compile -v` and benchmarks.
pub struct CompileReport {
    pub kernels: usize,
    pub weight_bytes: usize,
    /// The external weights file written, if any.
    pub weights_file: Option<PathBuf>,
    pub stages: Vec<(&'static str, Duration)>,
    pub ir: String,
}

/// Parses and lowers `input` (no code generation): for inspection and tests.
pub fn lower_file(input: &Path, opts: &CompileOptions) -> Result<(frontend::Source, lower::Lowered)> {
    let src = frontend::load(input, opts.weights.as_deref())?;
    let mut lowered = lower::lower(&src, opts.device)?;
    passes::optimize(&mut lowered, opts.device);
    Ok((src, lowered))
}

/// The PTX module of `input` lowered for CUDA (`opts.device` is ignored): an error names
/// the extern kernels that have no CUDA form.
pub fn ptx_module(input: &Path, opts: &CompileOptions) -> Result<codegen::cuda::Module> {
    let (_, lowered) = lower_file(input, &CompileOptions { device: Target::Cuda, ..opts.clone() })?;
    codegen::cuda::require_no_extern(&lowered.program).map_err(Error::Unsupported)?;
    codegen::cuda::emit_module(&lowered.program).map_err(Error::Codegen)
}

/// Compiles `input` into the shared library `output`.
pub fn compile(input: &Path, output: &Path, opts: &CompileOptions) -> Result<CompileReport> {
    // Fail before the work, not at link time, when the output cannot be written there.
    let out_dir = output.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !out_dir.is_dir() {
        return Err(Error::Io {
            path: output.into(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the output directory {} does not exist", out_dir.display()),
            ),
        });
    }
    let mut stages = vec![];
    let mut t = Instant::now();
    let mut lap = |name, stages: &mut Vec<_>| {
        stages.push((name, t.elapsed()));
        t = Instant::now();
    };
    let src = frontend::load(input, opts.weights.as_deref())?;
    lap("frontend", &mut stages);
    let mut lowered = lower::lower(&src, opts.device)?;
    // The payloads now live in the program: with gigabytes of weights, a second copy matters.
    drop(src);
    lap("lower", &mut stages);
    passes::optimize(&mut lowered, opts.device);
    lap("optimize", &mut stages);
    let mut plan = passes::plan::plan(&lowered, &input.display().to_string())?;
    let weights_file = weights_out::place(&mut plan, output, opts)?;
    lap("plan", &mut stages);
    if opts.device == Target::Cuda {
        // The library runs the PTX plan; its CPU code (still generated: the driver and
        // data symbols come with it) is never called.
        codegen::cuda::require_no_extern(&lowered.program).map_err(Error::Unsupported)?;
        let module = codegen::cuda::emit_module(&lowered.program).map_err(Error::Codegen)?;
        plan.manifest.cuda =
            Some(codegen::cuda::launch_plan(&lowered.program, &module, &plan).map_err(Error::Codegen)?);
        lap("ptx", &mut stages);
    }
    plan.manifest.cpu = match opts.cpu.name.is_empty() {
        true => aotc_abi::cpu::CpuTarget::parse(aotc_abi::cpu::DEFAULT).map_err(Error::Codegen)?,
        false => opts.cpu.clone(),
    };
    // The weights go out first, from their sources: the manifest carries their content id.
    let written = weights_out::write(&lowered.program, &mut plan, weights_file.as_deref())?;
    lap("weights", &mut stages);
    let object = codegen::cpu::emit_object(&lowered.program, &plan)?;
    lap("codegen", &mut stages);
    link::link(&object, written.object(), output)?;
    written.commit()?;
    lap("link", &mut stages);
    Ok(CompileReport {
        kernels: lowered.program.kernels.len(),
        weight_bytes: plan.weights_bytes as usize,
        weights_file,
        stages,
        ir: lowered.program.to_string(),
    })
}
