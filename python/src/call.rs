//! One call: `(args, kwargs)` bound to the program's parameters and flattened by the
//! in_spec, each leaf described in place, the library run with the GIL released, writing
//! its outputs into new arrays (device memory on a GPU), which the out_spec rebuilds into
//! the result.

use crate::error::{raise, to_py};
use crate::leaf::{self, Label, Leaf};
use crate::model::Model;
use crate::outputs;
use crate::tree;
use aotc_abi::{status, value_kind, DL_CUDA};
use aotc_runtime::{AotcTensor, DLDevice, DL_CPU};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::time::Instant;

/// Descriptors handed to the thread that runs the call without the GIL.
pub struct Descriptors(pub Vec<AotcTensor>);

// SAFETY: the descriptors point into `Leaf`s (shape, strides, scalars) and into memory
// that Python objects those leaves hold keep alive; the caller keeps the leaves alive and
// unchanged until the call returns. Moving the pointers to another thread changes nothing
// about their validity.
unsafe impl Send for Descriptors {}

impl Model {
    /// The program's inputs from `(args, kwargs)`, described in place.
    pub(crate) fn leaves(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<Leaf>> {
        let mut flat = Vec::with_capacity(self.inputs.len());
        self.signature
            .flatten_call(&self.in_spec, args, kwargs, &mut flat)
            .map_err(|m| raise(py, status::INPUT_COUNT, m))?;
        flat.iter()
            .zip(&self.inputs)
            .zip(&self.mutated)
            .enumerate()
            .map(|(index, ((obj, info), &mutated))| {
                let label = Label { what: "input", index, name: &info.name };
                let leaf = leaf::convert(&self.support.np, obj, info.kind, &label)?;
                if info.kind == value_kind::TENSOR && leaf.device != self.dl_device {
                    return Err(raise(py, status::DEVICE, self.wrong_device(&label, obj, leaf.device)));
                }
                if let Some(why) = if mutated { leaf.unwritable(obj)? } else { None } {
                    return Err(raise(
                        py,
                        status::INVALID_ARGUMENT,
                        format!("{label}: the program writes this input back (mutates it in place), but {why}"),
                    ));
                }
                Ok(leaf)
            })
            .collect()
    }

    /// Why a tensor on `device` cannot be input `label` of this model: aotc never copies
    /// between host and device (as aotc.h: the caller's memory is the model's).
    fn wrong_device(&self, label: &Label<'_>, obj: &Bound<'_, PyAny>, device: DLDevice) -> String {
        let place = |d: DLDevice| match d.device_type {
            DL_CPU => "the CPU".to_string(),
            DL_CUDA => format!("cuda:{}", d.device_id),
            t => format!("DLPack device type {t} (id {})", d.device_id),
        };
        let ty = obj.get_type();
        let ty = format!(
            "{}.{}",
            ty.module().map(|m| m.to_string()).unwrap_or_default(),
            ty.name().map(|n| n.to_string()).unwrap_or_default()
        );
        let fix = match self.dl_device.device_type {
            DL_CUDA => {
                format!("pass memory of that device (e.g. a torch tensor on '{0}': x.to('{0}'))", place(self.dl_device))
            }
            _ => "pass host memory (e.g. x.cpu())".to_string(),
        };
        format!(
            "{label}: a tensor on {} ({ty}) given to a model on {}: {fix}; aotc never copies between host and device",
            place(device),
            place(self.dl_device)
        )
    }

    /// `model(*args, **kwargs)`.
    pub(crate) fn call<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut leaves = self.leaves(py, args, kwargs)?;
        let torch = leaves.iter().any(|l| l.torch);
        let dtypes = if torch { &self.support.out_torch } else { &self.support.out_numpy };
        // (Device memory holds any dtype: only host arrays need numpy's.)
        if let Some((i, info)) = self
            .outputs
            .iter()
            .enumerate()
            .find(|(i, info)| self.gpu.is_none() && info.kind == value_kind::TENSOR && dtypes[*i].is_none())
        {
            return Err(raise(py, status::DTYPE, format!("output {i} ('{}') is {}, which numpy lacks: install ml_dtypes (pip install ml_dtypes) or pass torch tensors", info.name, info.dtype.map_or("?", |d| d.name()))));
        }
        let descriptors = Descriptors(leaves.iter_mut().map(Leaf::descriptor).collect());
        // Outputs whose shapes never change get their arrays before the library runs.
        let ready = match &self.static_output_shapes {
            Some(shapes) => Some((outputs::allocate(py, self, shapes, torch)?, shapes.clone())),
            None => None,
        };
        let outs = py.detach(move || {
            let descriptors = descriptors;
            let mut model = self.lock();
            let (arrays, mut shapes) = match ready {
                Some(ready) => ready,
                None => {
                    // SAFETY: every descriptor was built from a live Leaf (see Descriptors).
                    let shapes = model.can_run_into().then(|| unsafe { model.output_shapes_raw(&descriptors.0) });
                    match shapes {
                        Some(Ok(shapes)) if shapes.iter().flatten().all(|&n| n >= 0) => {
                            (Python::attach(|py| outputs::allocate(py, self, &shapes, torch))?, shapes)
                        }
                        Some(Err(e)) => return Python::attach(|py| Err(to_py(py, e))),
                        // An output's shape depends on the data (or the library predates
                        // aotc_run_into): run, then copy the outputs out while the lock
                        // is held.
                        _ => {
                            if let Some(gpu) = &self.gpu {
                                // SAFETY: as above.
                                let result = unsafe { model.run_descriptors(&descriptors.0) };
                                return Python::attach(|py| {
                                    outputs::convert_on_device(py, self, gpu, &result.map_err(|e| to_py(py, e))?, torch)
                                });
                            }
                            // SAFETY: as above.
                            let result = unsafe { model.run_raw(&descriptors.0) };
                            return Python::attach(|py| {
                                outputs::convert(py, self, &result.map_err(|e| to_py(py, e))?, torch)
                            });
                        }
                    }
                }
            };
            let targets: Vec<AotcTensor> = arrays
                .iter()
                .zip(&self.outputs)
                .zip(shapes.iter_mut())
                .map(|(((_, addr), info), shape)| outputs::descriptor(*addr, self.dl_device, info, shape))
                .collect();
            // SAFETY: the inputs as above; each target describes a fresh contiguous array
            // (on the model's device) of the output's dtype and shape, which `arrays` keeps
            // alive and nothing else references until this call returns.
            let result = unsafe { model.run_into_raw(&descriptors.0, &targets) };
            Python::attach(|py| {
                result.map_err(|e| to_py(py, e))?;
                outputs::finish(py, self, arrays, torch)
            })
        })?;
        for (leaf, &mutated) in leaves.iter().zip(&self.mutated) {
            if let (Some((orig, copy)), true) = (&leaf.copied_from, mutated) {
                orig.bind(py).set_item(py.Ellipsis(), copy.bind(py))?;
            }
        }
        drop(leaves);
        let mut it = outs.into_iter().map(|o| o.into_bound(py));
        tree::unflatten(py, &self.out_spec, &mut it, &self.support.node_types)
    }

    /// Times `iters` calls after `warmup` untimed ones, on one conversion of the inputs
    /// (the library's time, GIL released throughout).
    pub(crate) fn bench_impl<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
        iters: usize,
        warmup: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        if iters == 0 {
            return Err(raise(py, status::INVALID_ARGUMENT, "bench: iters must be at least 1"));
        }
        let mut leaves = self.leaves(py, args, kwargs)?;
        let descriptors = Descriptors(leaves.iter_mut().map(Leaf::descriptor).collect());
        let times = py
            .detach(move || {
                let descriptors = descriptors;
                let mut model = self.lock();
                let mut times = Vec::with_capacity(iters);
                for i in 0..warmup + iters {
                    let t = Instant::now();
                    // SAFETY: as in `call`.
                    unsafe { model.run_descriptors(&descriptors.0) }?;
                    if i >= warmup {
                        times.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                Ok(times)
            })
            .map_err(|e| to_py(py, e))?;
        drop(leaves);
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let d = PyDict::new(py);
        d.set_item("iters", iters)?;
        d.set_item("warmup", warmup)?;
        d.set_item("min_us", sorted[0])?;
        d.set_item("median_us", sorted[sorted.len() / 2])?;
        d.set_item("mean_us", times.iter().sum::<f64>() / times.len() as f64)?;
        d.set_item("max_us", sorted[sorted.len() - 1])?;
        d.set_item("times_us", times)?;
        Ok(d)
    }
}
