//! One model instance: its state, scratch memory, and the bookkeeping of a call.

use crate::arena::ScratchArena;
use crate::descriptor::{check_view, dtype_of, Place, View};
use crate::error::{err, Error, Result};
use crate::guards::{check_extern_calls, check_index_errors, check_stage_guards};
use crate::inputs::{bind_inputs_into, Bound};
use crate::memory::{ensure_len, strided_copy, AlignedBuf, Direction};
use crate::outputs::CallerOutputs;
use crate::pool::{with_threads, PoolUser};
use crate::profile::Profile;
use crate::program::Program;
use crate::spare::{self, Spare};
use crate::weights::{Source, Weights};
use aotc_abi::manifest::{InputSpec, Manifest, Slot};
use aotc_abi::sym::SymExpr;
use aotc_abi::{status, AotcTensor, DType, DL_CPU};

extern "C" {
    fn __aotc_graph_run(slots: *const *mut u8, dims: *const i64, stage: i64, profile: *mut std::ffi::c_void);
}

pub struct Model {
    program: &'static Program,
    /// The read-only weights the program's weight slots point into.
    weights: Weights,
    buffers: Vec<AlignedBuf>,
    /// One allocation for the scratch slots whose values matter only between kernels.
    arena: ScratchArena,
    /// One allocation per other scratch slot (empty for the rest): outputs, new values
    /// of state and inputs, data symbols and index errors, which live past the kernels,
    /// and slots sized only at a later stage.
    scratch: Vec<AlignedBuf>,
    /// Contiguous copies of non-contiguous inputs, one per input.
    staging: Vec<AlignedBuf>,
    /// Allocations given up by `scratch`/`staging` because an input lived in them
    /// (see [`Model::set_aside_aliased`]); alive while inputs keep living in them.
    retired: Vec<AlignedBuf>,
    /// What the outputs' `shape` pointers point to; updated in place, so a shape the
    /// caller still holds stays readable.
    output_shapes: Vec<Vec<i64>>,
    /// The threads a call may use, and this instance's hold on the worker pool.
    threads: usize,
    _pool: Option<PoolUser>,
    /// The buffers kernels take for the length of a call (`crate::spare`).
    spare: Spare,
    /// Kernel timings, when profiling is on.
    pub profile: Profile,
    /// The bookkeeping of a call, kept for the next one.
    call: CallState,
}

/// What a call works with besides the data: kept by the instance from call to call, so
/// that a call in steady state allocates nothing.
#[derive(Default)]
struct CallState {
    bound: Bound,
    caller: CallerOutputs,
    sizes: Sizes,
    /// The slot table handed to the generated code.
    slots: Vec<*mut u8>,
    /// Every output's dimensions, one after the other (`aotc_run`'s shapes, evaluated
    /// before the call changes any state).
    output_dims: Vec<i64>,
}

/// Where a call's outputs go.
pub enum Outputs<'a> {
    /// `aotc_run`: the outputs stay in the instance's memory, described into these.
    Describe(&'a mut [AotcTensor]),
    /// `aotc_run_into`: the outputs are written into the caller's tensors.
    Into(&'a [AotcTensor]),
}

/// The sizes of a call, evaluated stage by stage as the symbols they use are bound.
#[derive(Default)]
struct Sizes {
    dims: Vec<i64>,
    /// Bytes of each slot's scratch allocation (0 for other slots); `None` until the
    /// stage that can evaluate it.
    scratch: Vec<Option<usize>>,
}

fn eval(e: &SymExpr, syms: &[Option<i64>], what: impl FnOnce() -> String) -> Result<i64> {
    e.eval(syms).map_err(|x| Error { code: status::SHAPE, message: format!("{}: {x}", what()) })
}

/// A size in bytes or elements: evaluated, and non-negative and small enough for one
/// allocation (the compiler's guards should see to it; a wrong size must not wrap).
pub(crate) fn eval_size(e: &SymExpr, syms: &[Option<i64>], what: impl Fn() -> String) -> Result<usize> {
    let n = eval(e, syms, &what)?;
    usize::try_from(n).ok().filter(|_| isize::try_from(n).is_ok()).ok_or_else(|| Error {
        code: status::SHAPE,
        message: format!("{} is {n}: the input sizes are not valid for this program", what()),
    })
}

/// The first `len` bytes of scratch slot `slot`: the new value of mutated state, a data
/// symbol, a loop's condition.
fn scratch_prefix(scratch: &[AlignedBuf], slot: usize, len: usize) -> Result<&[u8]> {
    scratch.get(slot).and_then(|b| b.as_slice().get(..len)).ok_or_else(|| Error {
        code: status::INTERNAL,
        message: format!("scratch slot {slot} holds fewer than the {len} bytes the program left there"),
    })
}

/// The int64 the program left in scratch slot `slot`: a data symbol's value, a loop's
/// condition.
fn scratch_i64(scratch: &[AlignedBuf], slot: usize) -> Result<i64> {
    let bytes = scratch_prefix(scratch, slot, 8)?;
    Ok(i64::from_le_bytes(bytes.try_into().expect("8 bytes")))
}

/// Output `o`'s dimension `d` for the symbols `syms`.
pub(crate) fn output_dim(m: &Manifest, o: usize, d: usize, syms: &[Option<i64>]) -> Result<i64> {
    let spec = &m.outputs[o];
    let e = &spec.sizes[d];
    eval_size(e, syms, || format!("output {o} ('{}') dimension {d} ({e})", spec.name)).map(|n| n as i64)
}

/// Output `o`'s shape for the symbols `syms`.
pub(crate) fn output_shape(m: &Manifest, o: usize, syms: &[Option<i64>]) -> Result<Vec<i64>> {
    (0..m.outputs[o].sizes.len()).map(|d| output_dim(m, o, d, syms)).collect()
}

/// Fresh state: every buffer holding its initial value from `weights`.
fn initial_buffers(program: &Program, weights: &Weights) -> Result<Vec<AlignedBuf>> {
    program
        .manifest
        .buffers
        .iter()
        .zip(&program.buffer_bytes)
        .map(|(b, &bytes)| {
            let init = match b.init_entry {
                Some(e) => weights.slice(e),
                None => &[][..],
            };
            if init.len() != bytes {
                return err(
                    status::INTERNAL,
                    format!("buffer '{}': its initial value holds {} bytes, not {bytes}", b.name, init.len()),
                );
            }
            AlignedBuf::from_bytes(init).ok_or_else(|| Error {
                code: status::OUT_OF_MEMORY,
                message: format!("cannot allocate buffer '{}'", b.name),
            })
        })
        .collect()
}

fn buffer_index(program: &Program, name: &str) -> Result<usize> {
    let m = &program.manifest;
    m.buffers.iter().position(|b| b.name == name).ok_or_else(|| Error {
        code: status::NOT_FOUND,
        message: format!(
            "no buffer named '{name}'; the model has: [{}]",
            m.buffers.iter().map(|b| b.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    })
}

/// Checks `t` (a CPU tensor) against buffer `name`'s dtype and shape; returns its index
/// and view.
pub(crate) fn check_buffer_tensor(program: &Program, name: &str, t: &AotcTensor) -> Result<(usize, View)> {
    let i = buffer_index(program, name)?;
    let b = &program.manifest.buffers[i];
    let what = format!("buffer '{name}'");
    if DType::from_dlpack(t.dtype) != Some(b.dtype) {
        return err(status::DTYPE, format!("{what}: expected dtype {}, got {}", b.dtype, dtype_of(t)));
    }
    let want = || b.sizes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ");
    let view = check_view(t, &what, Place::Cpu, b.sizes.len(), b.dtype.size(), want)?;
    if view.shape[..] != b.sizes[..] {
        return err(status::SHAPE, format!("{what}: expected shape {:?}, got {:?}", b.sizes, view.shape));
    }
    Ok((i, view))
}

impl Model {
    pub fn new(program: &'static Program, threads: i64, weights: Source) -> Result<Model> {
        let threads =
            aotc_abi::thread_count(threads).map_err(|m| Error { code: status::INVALID_ARGUMENT, message: m })?;
        let m = &program.manifest;
        let weights = Weights::open(program, weights)?;
        let buffers = initial_buffers(program, &weights)?;
        Ok(Model {
            program,
            weights,
            buffers,
            arena: ScratchArena::new(&m.arena, &m.slots),
            scratch: m.slots.iter().map(|_| AlignedBuf::empty()).collect(),
            staging: m.inputs.iter().map(|_| AlignedBuf::empty()).collect(),
            retired: vec![],
            output_shapes: m.outputs.iter().map(|o| vec![0; o.sizes.len()]).collect(),
            threads,
            _pool: PoolUser::acquire(threads),
            spare: Spare::new(threads),
            profile: Profile::new(m.kernels.len()),
            call: CallState::default(),
        })
    }

    pub fn program(&self) -> &'static Program {
        self.program
    }

    /// Replaces the instance's weights by those of `source` (checked first: on error the
    /// instance is unchanged) and resets its state buffers to the initial values they
    /// hold, as torch's `load_state_dict` would. `&mut self`: no call of this instance is
    /// running, and no output of an earlier call points into weights (outputs always have
    /// buffers of their own), so the old weights go at once (a shared mapping, with the
    /// last instance that uses it).
    pub fn load_weights(&mut self, source: Source) -> Result<()> {
        let weights = Weights::open(self.program, source)?;
        self.buffers = initial_buffers(self.program, &weights)?;
        self.weights = weights;
        Ok(())
    }

    pub fn read_buffer(&self, name: &str, dst: &AotcTensor) -> Result<()> {
        let (i, view) = check_buffer_tensor(self.program, name, dst)?;
        let b = &self.program.manifest.buffers[i];
        // SAFETY: the state buffer holds the contiguous value; dst was checked to match it,
        // and the instance never hands out its state memory, so the two do not overlap.
        unsafe {
            strided_copy(
                self.buffers[i].as_ptr(),
                view.data,
                &b.sizes,
                &view.walk_strides(),
                b.dtype.size(),
                Direction::ContiguousToStrided,
            )
        }
        Ok(())
    }

    pub fn write_buffer(&mut self, name: &str, src: &AotcTensor) -> Result<()> {
        let (i, view) = check_buffer_tensor(self.program, name, src)?;
        let b = &self.program.manifest.buffers[i];
        // SAFETY: as in read_buffer, the other way round.
        unsafe {
            strided_copy(
                self.buffers[i].as_ptr(),
                view.data,
                &b.sizes,
                &view.walk_strides(),
                b.dtype.size(),
                Direction::StridedToContiguous,
            )
        }
        Ok(())
    }

    /// One call. Everything that can refuse it comes first (descriptors, symbols, guards,
    /// sizes), so a refused call touches no memory and the previous outputs stay valid.
    /// A program whose sizes depend on data runs in stages: each later stage first binds
    /// the symbols the previous one computed, then checks and sizes what depends on them;
    /// a call refused there has overwritten earlier outputs (or the caller's outputs it
    /// writes into) but no state and no input.
    pub fn run(&mut self, inputs: &[AotcTensor], outputs: Outputs<'_>) -> Result<()> {
        // The call's bookkeeping leaves the instance for the call (the methods below borrow
        // the instance) and comes back whatever the outcome.
        let mut call = std::mem::take(&mut self.call);
        let result = self.run_with(&mut call, inputs, outputs);
        self.call = call;
        result
    }

    fn run_with(&mut self, call: &mut CallState, inputs: &[AotcTensor], outputs: Outputs<'_>) -> Result<()> {
        let m = &self.program.manifest;
        self.profile.begin_call();
        if let Outputs::Describe(d) = &outputs {
            if d.len() != m.outputs.len() {
                return err(
                    status::INVALID_ARGUMENT,
                    format!("expected room for {} outputs, got {}", m.outputs.len(), d.len()),
                );
            }
        }
        let CallState { bound, caller, sizes, slots, output_dims } = call;
        bind_inputs_into(m, inputs, Place::Cpu, bound)?;
        let caller = match &outputs {
            Outputs::Into(t) => {
                caller.check_into(m, t, Place::Cpu, &bound.views, |span| self.owns(span))?;
                Some(&*caller)
            }
            Outputs::Describe(_) => None,
        };
        let syms = &mut bound.syms;
        sizes.dims.clear();
        sizes.dims.resize(m.dims.len(), 0);
        sizes.scratch.clear();
        sizes.scratch.resize(m.slots.len(), Some(0));
        self.evaluate_stage(0, syms, sizes, caller)?;
        self.set_aside_aliased(&bound.views);
        self.bind_slots(&bound.views, &sizes.scratch, caller, slots)?;
        if let Some(e) = &m.index_errors {
            self.scratch[e.slot].as_mut_slice().fill(0);
        }
        // Stages run in order but for a loop's jumps; each is prepared (its guards, sizes
        // and scratch) when first reached, and a jump forward prepares those it passes.
        let (mut stage, mut prepared) = (0, 1);
        let stages = m.stages();
        while stage < stages {
            while prepared <= stage {
                self.evaluate_stage(prepared, syms, sizes, caller)?;
                self.allocate_scratch(slots, &sizes.scratch, caller)?;
                prepared += 1;
            }
            let recorder = self.profile.stage_recorder();
            // SAFETY: every slot this stage touches points to memory of the size the
            // compiler planned for the bound symbols (inputs were checked against their
            // shapes, the caller's outputs written in place against the slot's size; the
            // plan checked that a stage uses only sizes known by then), dims holds every
            // such size, no input lives in memory the program writes, and the recorder
            // (null unless profiling) is this instance's, alive through the stage.
            let run = || unsafe { __aotc_graph_run(slots.as_ptr(), sizes.dims.as_ptr(), stage as i64, recorder) };
            spare::lend(&self.spare, || with_threads(self.threads, run));
            // An extern kernel that refused its arguments fails the call (checked first: this clears it).
            check_extern_calls()?;
            // A data-dependent index out of range fails the call before any state changes.
            if let Some(e) = &m.index_errors {
                check_index_errors(self.scratch[e.slot].as_slice(), &e.sites)?;
            }
            self.bind_data_symbols(stage, syms)?;
            stage = m.next_stage(stage, |flag| scratch_i64(&self.scratch, flag))?;
        }
        match outputs {
            Outputs::Describe(descriptors) => {
                output_dims.clear();
                for (o, spec) in m.outputs.iter().enumerate() {
                    for d in 0..spec.sizes.len() {
                        output_dims.push(output_dim(m, o, d, syms)?);
                    }
                }
                self.apply_mutations(&bound.views)?;
                let mut dims = &output_dims[..];
                for (o, spec) in m.outputs.iter().enumerate() {
                    let (shape, rest) = dims.split_at(spec.sizes.len());
                    dims = rest;
                    self.output_shapes[o].copy_from_slice(shape);
                    descriptors[o] = AotcTensor {
                        data: slots[spec.slot].cast(),
                        device: aotc_abi::DLDevice { device_type: DL_CPU, device_id: 0 },
                        ndim: spec.sizes.len() as i32,
                        dtype: spec.dtype.to_dlpack(),
                        shape: self.output_shapes[o].as_mut_ptr(),
                        strides: std::ptr::null_mut(),
                        byte_offset: 0,
                    };
                }
            }
            Outputs::Into(_) => {
                self.apply_mutations(&bound.views)?;
                if let Some(c) = caller {
                    c.copy_out(m, slots);
                }
            }
        }
        self.profile.end_call();
        Ok(())
    }

    /// True when some byte of `span` (addresses) is memory this instance owns.
    fn owns(&self, span: &std::ops::Range<usize>) -> bool {
        self.buffers.iter().chain(&self.scratch).chain(&self.staging).chain(&self.retired).any(|b| b.overlaps(span))
            || self.arena.overlaps(span)
    }

    /// The guards, dims and scratch sizes that become known at `stage`.
    fn evaluate_stage(
        &self,
        stage: usize,
        syms: &[Option<i64>],
        sizes: &mut Sizes,
        caller: Option<&CallerOutputs>,
    ) -> Result<()> {
        let m = &self.program.manifest;
        check_stage_guards(m, stage, syms)?;
        for (d, e) in m.dims.iter().enumerate().filter(|(_, e)| m.stage_of(e) == stage) {
            sizes.dims[d] = eval(e, syms, || format!("size {e}"))?;
        }
        for (k, slot) in m.slots.iter().enumerate() {
            if let Slot::Scratch { bytes } = slot {
                sizes.scratch[k] = match m.stage_of(bytes) {
                    s if s == stage => {
                        Some(eval_size(bytes, syms, || format!("the size of scratch slot {k} ({bytes})"))?)
                    }
                    s if s > stage => None,
                    _ => sizes.scratch[k],
                };
            }
        }
        if let Some(c) = caller {
            c.check_shapes(m, stage, syms)?;
        }
        Ok(())
    }

    /// Binds the symbols stage `stage` computed, within the ranges export recorded (those
    /// read from a python int input were bound with the inputs).
    fn bind_data_symbols(&self, stage: usize, syms: &mut [Option<i64>]) -> Result<()> {
        let m = &self.program.manifest;
        for d in m.data_symbols.iter().filter(|d| d.stage == stage && !m.is_input_symbol(d)) {
            let v = scratch_i64(&self.scratch, d.slot)?;
            let r = m.symbols.get(d.sym as usize).ok_or_else(|| Error {
                code: status::INTERNAL,
                message: format!("{}: no symbol s{}", d.what, d.sym),
            })?;
            if !r.contains(v) {
                return err(
                    status::RANGE,
                    format!("{}: the value {v} is outside the range {r} export recorded for {}", d.what, r.name),
                );
            }
            syms[d.sym as usize] = Some(v);
        }
        Ok(())
    }

    /// Keeps what this call writes out of its inputs. An input may live in memory this
    /// instance owns (an earlier call's output passed back); that allocation then leaves
    /// its slot for `retired` and the slot gets a fresh one, so the program only reads
    /// the input, and the write-back of a mutated input lands in the caller's memory
    /// rather than in this call's outputs. Retired memory no input of this call lives in
    /// is freed: the caller's last chance to use it was the previous call.
    fn set_aside_aliased(&mut self, views: &[View]) {
        let aliased = |b: &AlignedBuf| views.iter().any(|v| b.overlaps(&v.span));
        self.retired.retain(aliased);
        for buf in self.scratch.iter_mut().chain(self.staging.iter_mut()).chain([self.arena.memory()]) {
            if aliased(buf) {
                self.retired.push(std::mem::replace(buf, AlignedBuf::empty()));
            }
        }
    }

    /// The slot table of the call: inputs (staged when not contiguous), weights, state,
    /// the arena and scratch of the sizes evaluated so far (null until a later stage
    /// knows the size).
    fn bind_slots(
        &mut self,
        views: &[View],
        scratch_bytes: &[Option<usize>],
        caller: Option<&CallerOutputs>,
        slots: &mut Vec<*mut u8>,
    ) -> Result<()> {
        let m = &self.program.manifest;
        slots.clear();
        for (k, slot) in m.slots.iter().enumerate() {
            slots.push(match slot {
                Slot::Weight { entry: Some(e), .. } => self.weights.ptr(*e).cast_mut(),
                Slot::Weight { entry: None, .. } => self.weights.base().cast_mut(),
                Slot::Buffer(b) => self.buffers[*b].as_ptr(),
                Slot::Input(i) => self.input_pointer(*i, &views[*i])?,
                Slot::Scratch { .. } => match scratch_bytes[k] {
                    Some(bytes) if !self.arena.holds(k) => match caller.and_then(|c| c.slot_memory(m, k, bytes)) {
                        Some(memory) => memory,
                        None => ensure_len(&mut self.scratch[k], bytes)?,
                    },
                    // Arena slots are placed below; the rest wait for their stage.
                    _ => std::ptr::null_mut(),
                },
                Slot::Alias { .. } => std::ptr::null_mut(),
            });
        }
        self.arena.bind(&m.arena, scratch_bytes, slots)?;
        // (Wrapping: bind_aliases checked that the alias lies inside its slot.)
        crate::arena::bind_aliases(&m.slots, slots, |p, n| p.wrapping_add(n as usize))
    }

    /// Allocates the scratch slots whose sizes a later stage has just evaluated (never an
    /// arena slot: the compiler leaves slots sized at a later stage out of the arena).
    fn allocate_scratch(
        &mut self,
        slots: &mut [*mut u8],
        scratch_bytes: &[Option<usize>],
        caller: Option<&CallerOutputs>,
    ) -> Result<()> {
        let m = &self.program.manifest;
        for (k, slot) in m.slots.iter().enumerate() {
            if let (Slot::Scratch { .. }, Some(bytes), true) = (slot, scratch_bytes[k], slots[k].is_null()) {
                slots[k] = match caller.and_then(|c| c.slot_memory(m, k, bytes)) {
                    Some(memory) => memory,
                    None => ensure_len(&mut self.scratch[k], bytes)?,
                };
            }
        }
        Ok(())
    }

    /// Where the program reads input `i`: the caller's memory when contiguous, a staged
    /// contiguous copy otherwise.
    fn input_pointer(&mut self, i: usize, view: &View) -> Result<*mut u8> {
        let (InputSpec::Tensor(ts), Some(strides)) = (&self.program.manifest.inputs[i], &view.strides) else {
            return Ok(view.data);
        };
        let staged = ensure_len(&mut self.staging[i], view.bytes)?;
        // SAFETY: staged holds view.bytes (numel elements); the checked view describes the
        // caller's memory, which set_aside_aliased keeps apart from staging.
        unsafe {
            strided_copy(staged, view.data, &view.shape, strides, ts.dtype.size(), Direction::StridedToContiguous)
        }
        Ok(staged)
    }

    /// New values of mutated state and inputs, from the slots the program wrote them to.
    /// Inputs are written back in input order: where two alias, the later one wins.
    fn apply_mutations(&mut self, views: &[View]) -> Result<()> {
        let m = &self.program.manifest;
        for &(slot, b) in &m.buffer_mutations {
            let new = scratch_prefix(&self.scratch, slot, self.buffers[b].len())?;
            self.buffers[b].as_mut_slice().copy_from_slice(new);
        }
        for &(slot, i) in &m.input_mutations {
            let InputSpec::Tensor(ts) = &m.inputs[i] else { continue };
            let view = &views[i];
            let new = scratch_prefix(&self.scratch, slot, view.bytes)?;
            // SAFETY: `new` holds the contiguous new value; the checked view describes the
            // caller's memory, which set_aside_aliased keeps apart from every scratch slot.
            unsafe {
                strided_copy(
                    new.as_ptr().cast_mut(),
                    view.data,
                    &view.shape,
                    &view.walk_strides(),
                    ts.dtype.size(),
                    Direction::ContiguousToStrided,
                )
            }
        }
        Ok(())
    }
}
