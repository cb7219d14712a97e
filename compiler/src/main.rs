//! The `aotc` command line: compile, run, bench, profile, inspect.

use aotc::{compile, inspect, tensor_io, CompileOptions, WeightsPlacement};
use aotc_abi::manifest::Manifest;
use aotc_runtime::{Device, Model, Value, Weights};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(name = "aotc", version, about = "Compile torch.export programs into self-contained native shared libraries")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile a .pt2 archive (or a bare model.json) into a shared library.
    Compile {
        /// The program: a .pt2 archive written by torch.export.save(torch.export.export(model,
        /// args), "model.pt2"), or the models/model.json inside one (its weights are then read
        /// from ../data/weights beside it, or from --weights).
        model: PathBuf,
        /// The shared library to write (e.g. model.so).
        #[arg(short, long)]
        output: PathBuf,
        /// safetensors file of weights keyed by FQN (overrides the archive's).
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Keep the weights outside the library, in a safetensors file beside it (every
        /// tensor 64-byte aligned, memory-mapped at load, swappable); automatic above 1 GiB.
        #[arg(long, conflicts_with = "embed_weights")]
        external_weights: bool,
        /// Keep the weights inside the library, whatever their size.
        #[arg(long)]
        embed_weights: bool,
        /// The external weights file (default: <library stem>.weights.safetensors beside
        /// the library, where the library looks for it); implies --external-weights.
        #[arg(long)]
        weights_out: Option<PathBuf>,
        /// The device the library runs on: cpu, or cuda (a library that runs the program
        /// as PTX kernels on an NVIDIA GPU, and only there). Default: $AOTC_DEVICE, else cpu.
        #[arg(long, env = "AOTC_DEVICE", default_value = "cpu", value_parser = ["cpu", "cuda"])]
        device: String,
        /// The CPU the generated code runs on: x86-64 (the baseline every 64-bit x86 CPU
        /// has), x86-64-v2, x86-64-v3 (AVX2, FMA), x86-64-v4 (AVX-512), or native (this
        /// machine's features). A library is refused (AOTC_ERR_CPU) on a CPU that lacks
        /// its target's features; the support library's kernels pick AVX-512 or AVX2 at run
        /// time whatever the target. Default: $AOTC_CPU, else x86-64.
        #[arg(long, env = "AOTC_CPU", default_value = aotc_abi::cpu::DEFAULT)]
        cpu: String,
        /// Print stage timings and the loop IR.
        #[arg(short, long)]
        verbose: bool,
    },
    /// Run a compiled library on input files, one call per file, in order (one instance:
    /// the buffers a call mutates carry over to the next), printing or saving the outputs.
    #[command(after_help = tensor_io::INPUT_FORMAT)]
    Run {
        /// The shared library `aotc compile` wrote.
        library: PathBuf,
        /// An inputs file (safetensors, see below): one call each; repeat for more calls.
        #[arg(long = "input", required = true)]
        inputs: Vec<PathBuf>,
        /// Write each call's outputs there as outputs_N.safetensors (keyed by flat output
        /// index), and the user inputs it mutated as mutated_N.safetensors. Without it the
        /// outputs are printed.
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// The device to run on: cpu, cuda or cuda:N (a library compiled with --device cuda).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Weights to run with instead of the library's own: a weights file of the same
        /// structure (aotc compile --external-weights [--weights NEW.safetensors]).
        #[arg(long)]
        weights_file: Option<PathBuf>,
        /// Print every output (the first 16 values of each); the default without --output-dir.
        #[arg(long)]
        print: bool,
    },
    /// Time a compiled library on one input file: min/median/max ms per call, and GEMM
    /// GFLOP/s against the measured FMA peak where the compiler counted the FLOPs.
    #[command(after_help = tensor_io::INPUT_FORMAT)]
    Bench {
        /// The shared library `aotc compile` wrote.
        library: PathBuf,
        /// The inputs of every timed call: one inputs file (safetensors, see below).
        #[arg(long)]
        input: PathBuf,
        /// Timed calls.
        #[arg(long, default_value_t = 100)]
        iters: usize,
        /// Untimed calls first.
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        /// Threads per call (0: $AOTC_NUM_THREADS, else the available cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// The device to run on: cpu, cuda or cuda:N (a library compiled with --device cuda).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Weights to run with instead of the library's own (see `aotc run`).
        #[arg(long)]
        weights_file: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Time each kernel of a compiled library on one input file, slowest first, each named
    /// by the graph nodes it computes (no special build needed).
    #[command(after_help = tensor_io::INPUT_FORMAT)]
    Profile {
        /// The shared library `aotc compile` wrote.
        library: PathBuf,
        /// The inputs of every profiled call: one inputs file (safetensors, see below).
        #[arg(long)]
        input: PathBuf,
        /// Profiled calls.
        #[arg(long, default_value_t = 100)]
        iters: usize,
        /// Unprofiled calls first.
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        /// Threads per call (0: $AOTC_NUM_THREADS, else the available cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// The device to run on: cpu, cuda or cuda:N (a library compiled with --device cuda).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Weights to run with instead of the library's own (see `aotc run`).
        #[arg(long)]
        weights_file: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the PTX module of a program lowered for CUDA, without compiling a library: one
    /// entry per kernel (sm_80, PTX 7.8).
    ///
    /// The text `aotc compile --device cuda` embeds in the library, for reading or for
    /// checking with ptxas (`ptxas -arch=sm_80 model.ptx`); no GPU needed. Fails naming any
    /// extern kernel with no CUDA form (the FFT and nonzero's scan have one).
    ///
    /// Example: aotc ptx model.pt2 -o model.ptx
    Ptx {
        /// The program: a .pt2 archive or a model.json, as for `aotc compile`.
        model: PathBuf,
        /// The PTX file to write (e.g. model.ptx).
        #[arg(short, long)]
        output: PathBuf,
        /// safetensors file of weights keyed by FQN (overrides the archive's).
        #[arg(long)]
        weights: Option<PathBuf>,
    },
    /// List the Core ATen operators and whether aotc supports each.
    Ops,
    /// Describe a program or a compiled library: inputs (the names an inputs file may use),
    /// outputs, buffers, weights.
    Inspect {
        /// A .pt2 archive or model.json (described after lowering), or a library `aotc
        /// compile` wrote (described from its embedded manifest).
        path: PathBuf,
        /// For a program: safetensors file of weights keyed by FQN (overrides the archive's).
        #[arg(long)]
        weights: Option<PathBuf>,
    },
}

/// Exit status of an internal error (a bug in aotc, not in the input): sysexits' EX_SOFTWARE.
const EXIT_INTERNAL: u8 = 70;

fn main() -> ExitCode {
    // A closed pipe (`aotc bench ... | head`) ends the process quietly, as it does other
    // command-line tools, rather than failing a write with an error.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // A bug must still end in one clear line naming the node being lowered, not a backtrace.
    let panic_message = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let slot = panic_message.clone();
    std::panic::set_hook(Box::new(move |info| {
        let node = aotc::lower::current_node().map(|n| format!(" while lowering {n}")).unwrap_or_default();
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        if let Ok(mut m) = slot.lock() {
            *m = format!("internal error{node}: {what}{at} (this is a bug in aotc; please report it with the input)");
        }
    }));
    match std::panic::catch_unwind(|| run(cli)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("error: {}", panic_message.lock().map(|m| m.clone()).unwrap_or_default());
            ExitCode::from(EXIT_INTERNAL)
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Compile {
            model,
            output,
            weights,
            external_weights,
            embed_weights,
            weights_out,
            device,
            cpu,
            verbose,
        } => {
            let t = Instant::now();
            let placement = match (external_weights, embed_weights) {
                (true, _) => WeightsPlacement::External,
                (_, true) => WeightsPlacement::Embedded,
                _ => WeightsPlacement::Auto,
            };
            let report = compile(
                &model,
                &output,
                &CompileOptions {
                    weights,
                    placement,
                    weights_out,
                    device: if device == "cuda" { aotc::Target::Cuda } else { aotc::Target::Cpu },
                    cpu: aotc_abi::cpu::CpuTarget::parse(&cpu)?,
                },
            )
            .map_err(|e| e.to_string())?;
            let size = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
            println!(
                "compiled {} -> {} in {:.1} ms ({} kernels, {} weight bytes, {} byte library)",
                model.display(),
                output.display(),
                t.elapsed().as_secs_f64() * 1e3,
                report.kernels,
                report.weight_bytes,
                size
            );
            if let Some(file) = &report.weights_file {
                println!("weights -> {}", file.display());
            }
            if verbose {
                for (stage, d) in &report.stages {
                    println!("  {stage:<9} {:8.2} ms", d.as_secs_f64() * 1e3);
                }
                print!("{}", report.ir);
            }
            Ok(())
        }
        Command::Bench { library, input, iters, warmup, threads, device, weights_file, json } => {
            let device = Device::parse(&device).map_err(|e| e.to_string())?;
            let report = aotc::bench::bench(
                &library,
                &input,
                &aotc::bench::BenchOptions { iters, warmup, threads, device, weights_file },
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            } else {
                println!("{}", report.text());
            }
            Ok(())
        }
        Command::Profile { library, input, iters, warmup, threads, device, weights_file, json } => {
            let device = Device::parse(&device).map_err(|e| e.to_string())?;
            let report = aotc::profile::profile(
                &library,
                &input,
                &aotc::profile::ProfileOptions { iters, warmup, threads, device, weights_file },
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            } else {
                println!("{}", report.text());
            }
            Ok(())
        }
        Command::Run { library, inputs, output_dir, device, weights_file, print } => {
            let device = Device::parse(&device).map_err(|e| e.to_string())?;
            let t = Instant::now();
            let weights = weights_file.map_or(Weights::Default, Weights::File);
            let mut model = Model::load_with(&library, device, 0, weights).map_err(|e| e.to_string())?;
            println!("loaded {} in {:.1} ms", library.display(), t.elapsed().as_secs_f64() * 1e3);
            let manifest: Manifest =
                serde_json::from_str(model.metadata_json()).map_err(|e| format!("embedded manifest: {e}"))?;
            if let Some(dir) = &output_dir {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            let names: Vec<String> = model.inputs().iter().map(|i| i.name.clone()).collect();
            for (call, file) in inputs.iter().enumerate() {
                let mut values = tensor_io::read_named_inputs(file, &names)?;
                let t = Instant::now();
                let outputs = model.run(&mut values).map_err(|e| format!("call {call} ({}): {e}", file.display()))?;
                println!("call {call}: {} output(s) in {:.1} ms", outputs.len(), t.elapsed().as_secs_f64() * 1e3);
                let kinds: Vec<i32> = model.outputs().iter().map(|o| o.kind).collect();
                if let Some(dir) = &output_dir {
                    tensor_io::write_outputs(&dir.join(format!("outputs_{call}.safetensors")), &outputs, &kinds)?;
                    let mutated: Vec<(String, &aotc_runtime::Tensor)> = manifest
                        .input_mutations
                        .iter()
                        .filter_map(|&(_, i)| match &values[i] {
                            Value::Tensor(t) => Some((i.to_string(), t)),
                            _ => None,
                        })
                        .collect();
                    if !mutated.is_empty() {
                        tensor_io::write(&dir.join(format!("mutated_{call}.safetensors")), &mutated)?;
                    }
                }
                if print || output_dir.is_none() {
                    for (i, t) in outputs.iter().enumerate() {
                        if let Some(v) =
                            kinds.get(i).and_then(|&k| t.scalar(k)).as_ref().and_then(tensor_io::scalar_json)
                        {
                            println!(
                                "  output {i}: {v} (python {})",
                                if v.is_boolean() {
                                    "bool"
                                } else if v.is_i64() {
                                    "int"
                                } else {
                                    "float"
                                }
                            );
                            continue;
                        }
                        let v = t.to_f64_vec();
                        let shown: Vec<String> = v.iter().take(16).map(|x| format!("{x:.6}")).collect();
                        println!(
                            "  output {i}: {}{:?} [{}{}]",
                            t.dtype,
                            t.shape,
                            shown.join(", "),
                            if v.len() > 16 { ", ..." } else { "" }
                        );
                    }
                }
            }
            Ok(())
        }
        Command::Ptx { model, output, weights } => {
            let module = aotc::ptx_module(&model, &CompileOptions { weights, ..Default::default() })
                .map_err(|e| e.to_string())?;
            std::fs::write(&output, &module.text).map_err(|e| format!("{}: {e}", output.display()))?;
            let entries =
                module.kernels.iter().filter(|k| matches!(k, aotc::codegen::cuda::PtxKernel::Entry { .. })).count();
            println!("{} -> {} ({entries} kernels, {})", model.display(), output.display(), module.target.name());
            Ok(())
        }
        Command::Ops => {
            print!("{}", aotc::op_support::report());
            Ok(())
        }
        Command::Inspect { path, weights } => {
            print!(
                "{}",
                inspect::inspect(&path, &CompileOptions { weights, ..Default::default() }).map_err(|e| e.to_string())?
            );
            Ok(())
        }
    }
}
