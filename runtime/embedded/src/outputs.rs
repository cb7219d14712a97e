//! Outputs written into the caller's memory (`aotc_run_into`): the caller's descriptors
//! checked, and for each output whether the kernel that computes it writes straight into
//! the caller's tensor or its value is copied there after the call.
//!
//! An output is written in place when the caller's tensor is contiguous and the output's
//! slot is its own: no other output, no mutated state or input and no data symbol reads
//! that slot after the kernels (those read the instance's copy). The kernel writes its
//! output buffer contiguously and in full (an IR invariant), so pointing the slot at the
//! caller's memory is all it takes. Everything else is copied, strides honoured.

use crate::descriptor::{check_view, dtype_of, Place, View};
use crate::error::{err, Result};
use crate::memory::{strided_copy, Direction};
use crate::model::{output_dim, output_shape};
use aotc_abi::manifest::Manifest;
use aotc_abi::sym::SymExpr;
use aotc_abi::{status, AotcTensor, DType};
use std::ops::Range;

/// The caller's output tensors of one call, checked. Kept by an instance from call to
/// call, so that checking them allocates nothing in steady state.
#[derive(Default)]
pub struct CallerOutputs {
    views: Vec<View>,
    /// Per output: its slot points at the caller's memory.
    in_place: Vec<bool>,
}

/// "output 0 ('add_3')", formatted only when a message needs it.
struct OutputName<'a>(&'a Manifest, usize);

impl std::fmt::Display for OutputName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "output {} ('{}')", self.1, self.0.outputs[self.1].name)
    }
}

impl CallerOutputs {
    /// Checks each descriptor's device, dtype and rank and that no two outputs, no output
    /// and input, and no output and the instance's own memory (`owned` of a span: an
    /// earlier call's outputs live there) share a byte: the program reads its inputs and its own memory
    /// while it writes the outputs. Shapes are checked per stage ([`Self::check_shapes`]).
    pub fn check(
        m: &Manifest,
        outputs: &[AotcTensor],
        place: Place,
        inputs: &[View],
        owned: impl Fn(&Range<usize>) -> bool,
    ) -> Result<CallerOutputs> {
        let mut checked = CallerOutputs::default();
        checked.check_into(m, outputs, place, inputs, owned)?;
        Ok(checked)
    }

    /// [`CallerOutputs::check`] into `self`, reusing its memory.
    pub fn check_into(
        &mut self,
        m: &Manifest,
        outputs: &[AotcTensor],
        place: Place,
        inputs: &[View],
        owned: impl Fn(&Range<usize>) -> bool,
    ) -> Result<()> {
        if outputs.len() != m.outputs.len() {
            return err(
                status::INVALID_ARGUMENT,
                format!("expected {} outputs, got {}", m.outputs.len(), outputs.len()),
            );
        }
        let CallerOutputs { views, in_place } = self;
        views.clear();
        for (o, (spec, t)) in m.outputs.iter().zip(outputs).enumerate() {
            let what = OutputName(m, o);
            if DType::from_dlpack(t.dtype) != Some(spec.dtype) {
                return err(status::DTYPE, format!("{what}: expected dtype {}, got {}", spec.dtype, dtype_of(t)));
            }
            let want = || spec.sizes.iter().map(SymExpr::to_string).collect::<Vec<_>>().join(", ");
            let view = check_view(t, &what, place, spec.sizes.len(), spec.dtype.size(), want)?;
            let overlaps = |span: &Range<usize>| {
                !span.is_empty() && !view.span.is_empty() && span.start < view.span.end && view.span.start < span.end
            };
            if let Some(p) = views.iter().position(|v| overlaps(&v.span)) {
                return err(
                    status::INVALID_ARGUMENT,
                    format!("{what} overlaps {}: each output needs memory of its own", OutputName(m, p)),
                );
            }
            if let Some(i) = inputs.iter().position(|v| overlaps(&v.span)) {
                return err(
                    status::INVALID_ARGUMENT,
                    format!(
                        "{what} overlaps input {i} ('{}'): the call reads its inputs while it writes its outputs",
                        m.inputs[i].name()
                    ),
                );
            }
            if owned(&view.span) {
                return err(status::INVALID_ARGUMENT, format!("{what} points into this instance's own memory (an output of an earlier aotc_run?): give it memory of the caller's"));
            }
            views.push(view);
        }
        let read_after = |slot: usize| {
            m.buffer_mutations.iter().any(|&(s, _)| s == slot)
                || m.input_mutations.iter().any(|&(s, _)| s == slot)
                || m.data_symbols.iter().any(|d| d.slot == slot)
                || m.index_errors.as_ref().is_some_and(|e| e.slot == slot)
        };
        in_place.clear();
        in_place.extend(m.outputs.iter().enumerate().map(|(o, spec)| {
            views[o].strides.is_none()
                && views[o].bytes > 0
                && !read_after(spec.slot)
                && !m.outputs[..o].iter().any(|earlier| earlier.slot == spec.slot)
        }));
        Ok(())
    }

    /// Checks the shapes of the outputs whose sizes stage `stage` evaluates (for the
    /// symbols `syms`) against the caller's tensors.
    pub fn check_shapes(&self, m: &Manifest, stage: usize, syms: &[Option<i64>]) -> Result<()> {
        for (o, view) in self.views.iter().enumerate() {
            if m.outputs[o].sizes.iter().map(|e| m.stage_of(e)).max().unwrap_or(0) == stage {
                // Dimension by dimension: a shape that matches allocates nothing.
                let mut same = true;
                for (d, &n) in view.shape.iter().enumerate() {
                    same &= output_dim(m, o, d, syms)? == n;
                }
                if !same {
                    let shape = output_shape(m, o, syms)?;
                    return err(
                        status::SHAPE,
                        format!(
                            "{}: this call computes shape {shape:?}, the caller's tensor has shape {:?}",
                            OutputName(m, o),
                            view.shape
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// Where slot `slot` of `bytes` bytes lives when the caller's memory takes it: the
    /// data of the output written in place there, if its size is exactly `bytes`.
    pub fn slot_memory(&self, m: &Manifest, slot: usize, bytes: usize) -> Option<*mut u8> {
        let o = (0..self.views.len()).find(|&o| self.in_place[o] && m.outputs[o].slot == slot)?;
        (self.views[o].bytes == bytes).then_some(self.views[o].data)
    }

    /// Output `o`'s data and byte length, for a device-to-device copy: contiguous only
    /// (strided device outputs need a copy kernel this library does not have yet).
    pub fn contiguous_destination(&self, o: usize) -> Result<(*mut u8, usize)> {
        let v = &self.views[o];
        if v.strides.is_some() {
            return err(status::INVALID_ARGUMENT, format!("output {o}: a strided CUDA tensor; pass a contiguous one"));
        }
        Ok((v.data, v.bytes))
    }

    /// Copies into the caller's tensors the outputs not written in place, from `slots`
    /// (the call's slot table, every output slot holding its contiguous value).
    pub fn copy_out(&self, m: &Manifest, slots: &[*mut u8]) {
        for (o, view) in self.views.iter().enumerate() {
            if view.bytes == 0 || slots[m.outputs[o].slot] == view.data {
                continue;
            }
            // SAFETY: the output's slot holds its contiguous value of the shape the caller's
            // checked view has (check_shapes); the view is apart from every slot (check).
            unsafe {
                strided_copy(
                    slots[m.outputs[o].slot],
                    view.data,
                    &view.shape,
                    &view.walk_strides(),
                    m.outputs[o].dtype.size(),
                    Direction::ContiguousToStrided,
                )
            }
        }
    }
}
