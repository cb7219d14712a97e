//! One instance of a library compiled for CUDA: the module loaded once, weights and state
//! on the device, the plan's kernels launched on the caller's stream.
//!
//! A call mirrors the CPU instance's (`model.rs`): everything that can refuse it first
//! (descriptors on this device, symbols, guards), then the slot table (weights, state, the
//! caller's device pointers, scratch grown as needed), the launches stage by stage, the
//! index-error record and data symbols read back after each stage, and the new values of
//! state and mutated inputs copied on the device. The call waits for its stream before it
//! returns, so outputs are ready and a failed check is reported by that call.

use super::blas::{Blas, BlasHandle};
use super::driver::{self, CuFunction, CuModule, CuStream, Driver};
use super::memory::{Current, DeviceBuf};
use super::Gpu;
use crate::arena::ArenaPlan;
use crate::descriptor::{Place, View};
use crate::error::{err, Error, Result};
use crate::guards::{check_index_errors, check_stage_guards};
use crate::inputs::bind_inputs;
use crate::memory::{strided_copy, Direction};
use crate::model::{check_buffer_tensor, eval_size, output_shape};
use crate::outputs::CallerOutputs;
use crate::program::Program;
use crate::weights::{Source, Weights};
use aotc_abi::cuda::{CudaPlan, ParamValue};
use aotc_abi::manifest::{InputSpec, Slot};
use aotc_abi::{status, AotcTensor, DLDevice, DL_CUDA};
use std::ffi::{c_void, CString};

pub struct CudaModel {
    program: &'static Program,
    gpu: Gpu,
    module: CuModule,
    /// One per kernel of the plan.
    functions: Vec<CuFunction>,
    /// Per slot: the weight's device copy (weight slots only).
    weights: Vec<Option<DeviceBuf>>,
    /// State buffers, on the device.
    buffers: Vec<DeviceBuf>,
    /// The scratch slots whose values matter only between kernels share one device
    /// allocation, laid out by lifetime as on the CPU.
    arena: ArenaPlan,
    arena_memory: DeviceBuf,
    /// Per other scratch slot, its memory (grown as a call needs).
    scratch: Vec<DeviceBuf>,
    stream: CuStream,
    output_shapes: Vec<Vec<i64>>,
    /// cuBLAS for the plan's matmuls, when the process has it.
    blas: Option<BlasHandle>,
}

fn plan(program: &Program) -> Result<&CudaPlan> {
    program.manifest.cuda.as_ref().ok_or_else(|| Error {
        code: status::INTERNAL,
        message: "a CUDA instance of a library without a CUDA plan".into(),
    })
}

/// Loads `ptx`, the driver's JIT error log in the message on failure.
fn load_module(driver: &Driver, ptx: &str) -> Result<CuModule> {
    let text = CString::new(ptx)
        .map_err(|_| Error { code: status::INTERNAL, message: "the PTX module holds a NUL byte".into() })?;
    let mut log = vec![0u8; 16 << 10];
    let mut options = [driver::JIT_ERROR_LOG_BUFFER, driver::JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut module = std::ptr::null_mut();
    // SAFETY: a NUL-terminated image; two options with their values (a buffer of the
    // size given, which the driver writes a NUL-terminated log into).
    let rc = unsafe {
        (driver.module_load_data_ex)(&mut module, text.as_ptr().cast(), 2, options.as_mut_ptr(), values.as_mut_ptr())
    };
    driver.check(rc, "cuModuleLoadDataEx (JIT of the library's PTX)").map_err(|e| {
        let log = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)]).into_owned();
        Error {
            code: e.code,
            message: format!("{}; JIT log: {}", e.message, if log.is_empty() { "(empty)" } else { &log }),
        }
    })?;
    Ok(module)
}

impl CudaModel {
    pub fn new(program: &'static Program, ordinal: i32, source: Source) -> Result<CudaModel> {
        let plan = plan(program)?;
        let m = &program.manifest;
        let gpu = Gpu::open(ordinal)?;
        let driver = gpu.driver;
        let _current = Current::push(driver, gpu.context)?;
        let module = load_module(driver, &plan.ptx)?;
        let mut model = CudaModel {
            program,
            gpu,
            module,
            functions: vec![],
            weights: vec![],
            buffers: vec![],
            arena: ArenaPlan::new(&m.arena, &m.slots),
            arena_memory: DeviceBuf::empty(driver),
            scratch: vec![],
            stream: std::ptr::null_mut(),
            output_shapes: m.outputs.iter().map(|o| vec![0; o.sizes.len()]).collect(),
            blas: None,
        };
        if plan.kernels.iter().any(|k| k.gemm.is_some()) {
            model.blas = Blas::find().map(BlasHandle::new).transpose()?;
        }
        for k in &plan.kernels {
            let name = CString::new(k.entry.as_str())
                .map_err(|_| Error { code: status::INTERNAL, message: format!("kernel name {:?}", k.entry) })?;
            let mut f = std::ptr::null_mut();
            // SAFETY: a loaded module and a NUL-terminated entry name.
            driver.check(
                unsafe { (driver.module_get_function)(&mut f, module, name.as_ptr()) },
                &format!("cuModuleGetFunction({})", k.entry),
            )?;
            model.functions.push(f);
        }
        model.scratch = m.slots.iter().map(|_| DeviceBuf::empty(driver)).collect();
        model.upload_weights(Weights::open(program, source)?)?;
        Ok(model)
    }

    pub fn program(&self) -> &'static Program {
        self.program
    }

    pub fn ordinal(&self) -> i32 {
        self.gpu.ordinal
    }

    /// Copies state buffer `name` into the CPU tensor `dst` (any strides).
    pub fn read_buffer(&self, name: &str, dst: &AotcTensor) -> Result<()> {
        let (i, view) = check_buffer_tensor(self.program, name, dst)?;
        let b = &self.program.manifest.buffers[i];
        let _current = Current::push(self.gpu.driver, self.gpu.context)?;
        let value = self.download(self.buffers[i].ptr, self.program.buffer_bytes[i])?;
        // SAFETY: `value` holds the buffer's contiguous bytes; dst was checked to match it
        // and is the caller's host memory, apart from `value`.
        unsafe {
            strided_copy(
                value.as_ptr().cast_mut(),
                view.data,
                &b.sizes,
                &view.walk_strides(),
                b.dtype.size(),
                Direction::ContiguousToStrided,
            )
        }
        Ok(())
    }

    /// Overwrites state buffer `name` from the CPU tensor `src` (any strides).
    pub fn write_buffer(&mut self, name: &str, src: &AotcTensor) -> Result<()> {
        let (i, view) = check_buffer_tensor(self.program, name, src)?;
        let b = &self.program.manifest.buffers[i];
        let mut value = vec![0u8; self.program.buffer_bytes[i]];
        // SAFETY: as in read_buffer, the other way round.
        unsafe {
            strided_copy(
                value.as_mut_ptr(),
                view.data,
                &b.sizes,
                &view.walk_strides(),
                b.dtype.size(),
                Direction::StridedToContiguous,
            )
        }
        let driver = self.gpu.driver;
        let _current = Current::push(driver, self.gpu.context)?;
        if !value.is_empty() {
            // SAFETY: the device buffer holds the buffer's bytes; `value` as many.
            driver.check(
                unsafe { (driver.memcpy_htod)(self.buffers[i].ptr, value.as_ptr().cast(), value.len()) },
                "cuMemcpyHtoD (buffer)",
            )?;
        }
        Ok(())
    }

    /// Runs the following calls on `stream` (null: the legacy default stream).
    pub fn set_stream(&mut self, stream: CuStream) {
        self.stream = stream;
    }

    /// Weights and the state's initial values, copied to the device.
    fn upload_weights(&mut self, weights: Weights) -> Result<()> {
        let driver = self.gpu.driver;
        let m = &self.program.manifest;
        self.weights = m
            .slots
            .iter()
            .map(|s| match s {
                Slot::Weight { entry: Some(e), .. } => DeviceBuf::upload(driver, weights.slice(*e)).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_>>()?;
        self.buffers = m
            .buffers
            .iter()
            .zip(&self.program.buffer_bytes)
            .map(|(b, &bytes)| {
                let init = b.init_entry.map_or(&[][..], |e| weights.slice(e));
                if init.len() != bytes {
                    return err(
                        status::INTERNAL,
                        format!("buffer '{}': its initial value holds {} bytes, not {bytes}", b.name, init.len()),
                    );
                }
                DeviceBuf::upload(driver, init)
            })
            .collect::<Result<_>>()?;
        Ok(())
    }

    pub fn load_weights(&mut self, source: Source) -> Result<()> {
        let weights = Weights::open(self.program, source)?;
        let _current = Current::push(self.gpu.driver, self.gpu.context)?;
        self.upload_weights(weights)
    }

    /// Every tensor input must be device memory of this GPU: a host pointer described as
    /// CUDA would otherwise be read by the kernels.
    fn check_device_memory(&self, views: &[View]) -> Result<()> {
        let driver = self.gpu.driver;
        for (i, (spec, v)) in self.program.manifest.inputs.iter().zip(views).enumerate() {
            // A python int input (a SymInt) is a host value, as every python scalar.
            let InputSpec::Tensor(_) = spec else { continue };
            if v.bytes == 0 || self.program.manifest.input_symbol(i).is_some() {
                continue;
            }
            if v.strides.is_some() {
                return err(
                    status::INVALID_ARGUMENT,
                    format!(
                        "input {i} ('{}'): a strided CUDA tensor; pass a contiguous one (tensor.contiguous())",
                        spec.name()
                    ),
                );
            }
            let (mut kind, mut ordinal): (u32, i32) = (0, -1);
            // SAFETY: out pointers to one value each; the address is the caller's.
            let rc = unsafe {
                (driver.pointer_get_attribute)(
                    (&mut kind as *mut u32).cast(),
                    driver::POINTER_ATTRIBUTE_MEMORY_TYPE,
                    v.data as u64,
                )
            };
            let rc2 = unsafe {
                (driver.pointer_get_attribute)(
                    (&mut ordinal as *mut i32).cast(),
                    driver::POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    v.data as u64,
                )
            };
            if rc != 0 || rc2 != 0 || kind != driver::MEMORYTYPE_DEVICE || ordinal != self.gpu.ordinal {
                return err(
                    status::DEVICE,
                    format!(
                        "input {i} ('{}'): {:p} is not memory of cuda:{} (memory type {kind}, device {ordinal})",
                        spec.name(),
                        v.data,
                        self.gpu.ordinal
                    ),
                );
            }
        }
        Ok(())
    }

    pub fn run(&mut self, inputs: &[AotcTensor], outputs: crate::model::Outputs<'_>) -> Result<()> {
        let program = self.program;
        let m = &program.manifest;
        let plan = plan(program)?;
        let place = Place::Cuda(self.gpu.ordinal);
        let driver = self.gpu.driver;
        if let crate::model::Outputs::Describe(d) = &outputs {
            if d.len() != m.outputs.len() {
                return err(
                    status::INVALID_ARGUMENT,
                    format!("expected room for {} outputs, got {}", m.outputs.len(), d.len()),
                );
            }
        }
        let bound = bind_inputs(m, inputs, place)?;
        let _current = Current::push(driver, self.gpu.context)?;
        self.check_device_memory(&bound.views)?;
        let owned = |span: &std::ops::Range<usize>| {
            self.scratch
                .iter()
                .chain(&self.buffers)
                .chain([&self.arena_memory])
                .any(|b| b.len > 0 && (span.start as u64) < b.ptr + b.len as u64 && b.ptr < span.end as u64)
        };
        let caller = match &outputs {
            crate::model::Outputs::Into(t) => Some(CallerOutputs::check(m, t, place, &bound.views, owned)?),
            crate::model::Outputs::Describe(_) => None,
        };
        let mut syms = bound.syms;
        let mut slots = vec![0u64; m.slots.len()];
        // Stages run in order but for a loop's jumps; each is prepared (guards, shapes,
        // slots) when first reached, and a jump forward prepares those it passes.
        let (mut stage, mut prepared) = (0, 0);
        let stages = m.stages();
        while stage < stages {
            while prepared <= stage {
                check_stage_guards(m, prepared, &syms)?;
                if let Some(c) = &caller {
                    c.check_shapes(m, prepared, &syms)?;
                }
                self.bind_slots(prepared, &syms, &bound.views, caller.as_ref(), &mut slots)?;
                if let (0, Some(e)) = (prepared, &m.index_errors) {
                    // SAFETY: the record's slot holds its bytes on the device.
                    driver.check(
                        unsafe { (driver.memset_d8_async)(slots[e.slot], 0, self.scratch[e.slot].len, self.stream) },
                        "cuMemsetD8Async",
                    )?;
                }
                prepared += 1;
            }
            for (k, (kernel, f)) in plan
                .kernels
                .iter()
                .zip(&self.functions)
                .enumerate()
                .filter(|(k, _)| m.kernels.get(*k).is_some_and(|i| i.stage == stage))
            {
                if let (Some(blas), Some(gemm)) = (&self.blas, &kernel.gemm) {
                    if blas.gemm(gemm, &syms, &slots, self.stream)? {
                        continue;
                    }
                }
                let Some(launch) =
                    kernel.launch(&syms, &slots).map_err(|msg| Error { code: status::INTERNAL, message: msg })?
                else {
                    continue;
                };
                let mut values: Vec<u64> = launch
                    .params
                    .iter()
                    .map(|p| match p {
                        ParamValue::Pointer(a) => *a,
                        ParamValue::Int(v) => *v as u64,
                    })
                    .collect();
                let mut args: Vec<*mut c_void> = values.iter_mut().map(|v| (v as *mut u64).cast()).collect();
                let [gx, gy, gz] = launch.grid;
                // SAFETY: a function of the loaded module; one 8-byte value per declared
                // parameter (.u64 / .s64), alive through the call, which copies them.
                let rc = unsafe {
                    (driver.launch_kernel)(
                        *f,
                        gx,
                        gy,
                        gz,
                        launch.block,
                        1,
                        1,
                        launch.shared_bytes,
                        self.stream,
                        args.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                };
                driver.check(rc, &format!("cuLaunchKernel of kernel {k} ({})", kernel.entry))?;
            }
            // SAFETY: the instance's stream.
            driver
                .check(unsafe { (driver.stream_synchronize)(self.stream) }, "cuStreamSynchronize (a kernel failed)")?;
            if let Some(e) = &m.index_errors {
                // The record: site + 1, index, bound (int64 each).
                check_index_errors(&self.download(slots[e.slot], 24)?, &e.sites)?;
            }
            // Those read from a python int input were bound with the inputs.
            for d in m.data_symbols.iter().filter(|d| d.stage == stage && !m.is_input_symbol(d)) {
                let v = self.download_i64(slots[d.slot])?;
                let r = &m.symbols[d.sym as usize];
                if !r.contains(v) {
                    return err(
                        status::RANGE,
                        format!("{}: the value {v} is outside the range {r} export recorded for {}", d.what, r.name),
                    );
                }
                syms[d.sym as usize] = Some(v);
            }
            stage = m.next_stage(stage, |flag| self.download_i64(slots[flag]))?;
        }
        self.apply_mutations(&slots, &bound.views)?;
        match outputs {
            crate::model::Outputs::Describe(descriptors) => {
                for (o, spec) in m.outputs.iter().enumerate() {
                    self.output_shapes[o].copy_from_slice(&output_shape(m, o, &syms)?);
                    descriptors[o] = AotcTensor {
                        data: slots[spec.slot] as *mut c_void,
                        device: DLDevice { device_type: DL_CUDA, device_id: self.gpu.ordinal },
                        ndim: spec.sizes.len() as i32,
                        dtype: spec.dtype.to_dlpack(),
                        shape: self.output_shapes[o].as_mut_ptr(),
                        strides: std::ptr::null_mut(),
                        byte_offset: 0,
                    };
                }
            }
            crate::model::Outputs::Into(_) => {
                if let Some(c) = &caller {
                    for (o, spec) in m.outputs.iter().enumerate() {
                        let (dst, bytes) = c.contiguous_destination(o)?;
                        if dst as u64 != slots[spec.slot] && bytes > 0 {
                            // SAFETY: both hold `bytes` bytes on this device (shapes checked).
                            driver.check(
                                unsafe { (driver.memcpy_dtod_async)(dst as u64, slots[spec.slot], bytes, self.stream) },
                                "cuMemcpyDtoDAsync (output)",
                            )?;
                        }
                    }
                    // SAFETY: the instance's stream.
                    driver.check(unsafe { (driver.stream_synchronize)(self.stream) }, "cuStreamSynchronize")?;
                }
            }
        }
        Ok(())
    }

    /// The slots whose sizes `stage` knows: weights, state, inputs (the caller's device
    /// memory), the caller's outputs written in place, scratch of its own, and the arena.
    fn bind_slots(
        &mut self,
        stage: usize,
        syms: &[Option<i64>],
        views: &[View],
        caller: Option<&CallerOutputs>,
        slots: &mut [u64],
    ) -> Result<()> {
        let m = &self.program.manifest;
        let mut scratch_bytes = vec![None; m.slots.len()];
        for (k, slot) in m.slots.iter().enumerate() {
            slots[k] = match slot {
                Slot::Weight { .. } if stage == 0 => self.weights[k].as_ref().map_or(0, |b| b.ptr),
                Slot::Buffer(b) if stage == 0 => self.buffers[*b].ptr,
                Slot::Input(i) if stage == 0 => views[*i].data as u64,
                Slot::Scratch { bytes } if m.stage_of(bytes) == stage => {
                    let n = eval_size(bytes, syms, || format!("the size of scratch slot {k} ({bytes})"))?;
                    scratch_bytes[k] = Some(n);
                    match caller.and_then(|c| c.slot_memory(m, k, n)) {
                        _ if self.arena.holds(k) => continue,
                        Some(memory) => memory as u64,
                        None => self.scratch[k].ensure(n.max(1))?,
                    }
                }
                _ => continue,
            };
        }
        if stage == 0 {
            // Arena slots are sized before the first stage (the compiler keeps later ones out).
            let layout = self.arena.layout(&m.arena, &scratch_bytes)?;
            let base = self.arena_memory.ensure(layout.bytes.max(1))?;
            for (s, &offset) in m.arena.slots.iter().zip(&layout.offsets) {
                slots[s.slot] = base + offset as u64;
            }
            crate::arena::bind_aliases(&m.slots, slots, |p, n| p + n)?;
        }
        Ok(())
    }

    /// `len` bytes at device address `src`.
    fn download(&self, src: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        let driver = self.gpu.driver;
        // SAFETY: `src` holds at least len bytes on this device; `out` is len bytes.
        driver.check(unsafe { (driver.memcpy_dtoh)(out.as_mut_ptr().cast(), src, len) }, "cuMemcpyDtoH")?;
        Ok(out)
    }

    /// The int64 at device address `src`: a data symbol's value, a loop's condition.
    fn download_i64(&self, src: u64) -> Result<i64> {
        let bytes: [u8; 8] = self.download(src, 8)?.try_into().expect("8 bytes downloaded");
        Ok(i64::from_le_bytes(bytes))
    }

    /// New values of state and of mutated inputs, copied on the device.
    fn apply_mutations(&self, slots: &[u64], views: &[View]) -> Result<()> {
        let m = &self.program.manifest;
        let driver = self.gpu.driver;
        let copies = m
            .buffer_mutations
            .iter()
            .map(|&(s, b)| (self.buffers[b].ptr, s, self.program.buffer_bytes[b]))
            .chain(m.input_mutations.iter().map(|&(s, i)| (views[i].data as u64, s, views[i].bytes)));
        for (dst, slot, bytes) in copies {
            if bytes > 0 {
                // SAFETY: the slot holds the new value's `bytes` bytes; dst the old value's.
                driver.check(
                    unsafe { (driver.memcpy_dtod_async)(dst, slots[slot], bytes, self.stream) },
                    "cuMemcpyDtoDAsync (mutation)",
                )?;
            }
        }
        // SAFETY: the instance's stream.
        driver.check(unsafe { (driver.stream_synchronize)(self.stream) }, "cuStreamSynchronize")
    }
}

impl Drop for CudaModel {
    fn drop(&mut self) {
        let Ok(_current) = Current::push(self.gpu.driver, self.gpu.context) else { return };
        self.blas = None;
        self.weights.clear();
        self.buffers.clear();
        self.scratch.clear();
        self.arena_memory = DeviceBuf::empty(self.gpu.driver);
        // SAFETY: loaded in new, unloaded once, its functions no longer used.
        let _ = unsafe { (self.gpu.driver.module_unload)(self.module) };
    }
}
