//! What an `AotcModel` handle is: an instance on the CPU or on a CUDA device, chosen by
//! the device string and by what the library was compiled for.

use crate::cuda::{self, CudaModel};
use crate::descriptor::Place;
use crate::error::{err, Result};
use crate::guards::check_stage_guards;
use crate::inputs::bind_inputs;
use crate::model::{output_dim, Model, Outputs};
use crate::profile::Profile;
use crate::program::{program, Program};
use crate::unload::Live;
use crate::weights::Source;
use aotc_abi::{status, AotcTensor};

// The CPU model inline: one Instance per aotc_model_create, so its size costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Instance {
    Cpu(Model, Live),
    Cuda(Box<CudaModel>, Live),
}

/// The generated code runs only on a CPU with its target's features: a library compiled
/// for a newer CPU is refused here rather than dying of an illegal instruction.
fn check_cpu(target: &aotc_abi::cpu::CpuTarget) -> Result<()> {
    match target.missing_on_host() {
        None => Ok(()),
        Some(feature) => err(
            status::CPU,
            format!(
                "this library was compiled for the CPU target {} (aotc compile --cpu), which needs {feature}; this \
                 CPU lacks it: compile the model again with --cpu x86-64 (runs on any x86-64) or --cpu native here",
                target.name
            ),
        ),
    }
}

impl Instance {
    pub fn new(device: &str, threads: i64, weights: Source) -> Result<Instance> {
        // Counted from before it takes the program, which the library's unload frees.
        let live = Live::new();
        let program = program()?;
        match (device, cuda::ordinal(device), &program.manifest.cuda) {
            ("cpu" | "cpu:0", _, None) => {
                check_cpu(&program.manifest.cpu)?;
                Model::new(program, threads, weights).map(|m| Instance::Cpu(m, live))
            }
            (_, Some(n), Some(_)) => {
                CudaModel::new(program, n, weights).map(|m| Instance::Cuda(Box::new(m), live))
            }
            (_, Some(_), None) => err(status::DEVICE, format!("this library was compiled for the CPU; got \"{device}\": compile the model with `aotc compile --device cuda` to run it on a GPU")),
            ("cpu" | "cpu:0", _, Some(_)) => err(status::DEVICE, format!("this library was compiled for CUDA; got \"{device}\": load it on \"cuda\" or \"cuda:N\"")),
            _ => err(status::DEVICE, format!("unknown device \"{device}\" (expected \"cpu\", \"cuda\" or \"cuda:N\")")),
        }
    }

    pub fn program(&self) -> &'static Program {
        match self {
            Instance::Cpu(m, _) => m.program(),
            Instance::Cuda(m, _) => m.program(),
        }
    }

    fn place(&self) -> Place {
        match self {
            Instance::Cpu(..) => Place::Cpu,
            Instance::Cuda(m, _) => Place::Cuda(m.ordinal()),
        }
    }

    pub fn run(&mut self, inputs: &[AotcTensor], outputs: Outputs<'_>) -> Result<()> {
        match self {
            Instance::Cpu(m, _) => m.run(inputs, outputs),
            Instance::Cuda(m, _) => m.run(inputs, outputs),
        }
    }

    /// The shape of every output of a call on `inputs`, without running it: a dimension
    /// that depends on the data (known only once the program ran) is -1.
    pub fn output_shapes(&self, inputs: &[AotcTensor]) -> Result<Vec<Vec<i64>>> {
        let m = &self.program().manifest;
        let bound = bind_inputs(m, inputs, self.place())?;
        check_stage_guards(m, 0, &bound.syms)?;
        m.outputs
            .iter()
            .enumerate()
            .map(|(o, spec)| {
                spec.sizes
                    .iter()
                    .enumerate()
                    .map(|(d, e)| match m.stage_of(e) {
                        0 => output_dim(m, o, d, &bound.syms),
                        // A size of a python int input's symbol is known with the inputs.
                        _ if bound_now(e, &bound.syms) => output_dim(m, o, d, &bound.syms),
                        _ => Ok(-1),
                    })
                    .collect()
            })
            .collect()
    }

    pub fn load_weights(&mut self, source: Source) -> Result<()> {
        match self {
            Instance::Cpu(m, _) => m.load_weights(source),
            Instance::Cuda(m, _) => m.load_weights(source),
        }
    }

    pub fn read_buffer(&self, name: &str, dst: &AotcTensor) -> Result<()> {
        match self {
            Instance::Cpu(m, _) => m.read_buffer(name, dst),
            Instance::Cuda(m, _) => m.read_buffer(name, dst),
        }
    }

    pub fn write_buffer(&mut self, name: &str, src: &AotcTensor) -> Result<()> {
        match self {
            Instance::Cpu(m, _) => m.write_buffer(name, src),
            Instance::Cuda(m, _) => m.write_buffer(name, src),
        }
    }

    /// The CUDA stream the following calls run on (null: the legacy default stream).
    pub fn set_stream(&mut self, stream: *mut std::ffi::c_void) -> Result<()> {
        match self {
            Instance::Cpu(..) => err(status::DEVICE, "aotc_set_stream: this instance runs on the CPU"),
            Instance::Cuda(m, _) => {
                m.set_stream(stream);
                Ok(())
            }
        }
    }

    /// The kernel timings (CPU instances only, for now).
    pub fn profile(&self) -> Result<&Profile> {
        match self {
            Instance::Cpu(m, _) => Ok(&m.profile),
            Instance::Cuda(..) => err(status::DEVICE, "profiling is not available on CUDA instances yet"),
        }
    }

    pub fn profile_mut(&mut self) -> Result<&mut Profile> {
        match self {
            Instance::Cpu(m, _) => Ok(&mut m.profile),
            Instance::Cuda(..) => err(status::DEVICE, "profiling is not available on CUDA instances yet"),
        }
    }
}

/// Whether every symbol of `e` is bound.
fn bound_now(e: &aotc_abi::sym::SymExpr, syms: &[Option<i64>]) -> bool {
    let mut all = true;
    e.for_each_symbol(&mut |s| all &= syms.get(s as usize).is_some_and(|v| v.is_some()));
    all
}
