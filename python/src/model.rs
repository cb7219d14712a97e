//! `aotc.Model`: a loaded library and one instance of it, called like the exported
//! module. The instance sits behind a mutex taken with the GIL released: threads that
//! share one Model take turns, threads with their own Models run at once.

use crate::error::{raise, to_py};
use crate::leaf::Numpy;
use crate::signature::Signature;
use crate::tree::NodeTypes;
use crate::weights::PyWeights;
use aotc_abi::{status, value_kind, DType, DL_CUDA};
use aotc_runtime::cuda::Gpu;
use aotc_runtime::pytree::TreeSpec;
use aotc_runtime::{DLDevice, Device, ValueInfo, DL_CPU};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// What the binding takes from the Python side (module `aotc._arrays`), looked up once.
pub struct Support {
    pub np: Numpy,
    pub empty: Py<PyAny>,
    pub to_torch: Py<PyAny>,
    /// `torch_empty(shape, dtype name, device)`: a new torch tensor on a GPU and its address.
    pub torch_empty: Py<PyAny>,
    pub node_types: NodeTypes,
    /// Per output: the numpy dtype to return it as (None: numpy lacks it, e.g. bfloat16
    /// without ml_dtypes), and the one to allocate it as before a torch.from_numpy view.
    pub out_numpy: Vec<Option<Py<PyAny>>>,
    pub out_torch: Vec<Option<Py<PyAny>>>,
    /// Per buffer: the numpy dtype of read_buffer's array.
    pub buffer_numpy: Vec<Option<Py<PyAny>>>,
}

#[pyclass(module = "aotc._native", name = "Model", frozen)]
pub struct Model {
    pub(crate) inner: Mutex<aotc_runtime::Model>,
    pub(crate) path: PathBuf,
    pub(crate) device: String,
    /// Where the model's tensors live (DLPack's device).
    pub(crate) dl_device: DLDevice,
    /// On a GPU: the driver and device the binding allocates outputs with.
    pub(crate) gpu: Option<Arc<Gpu>>,
    pub(crate) signature: Signature,
    pub(crate) in_spec: TreeSpec,
    pub(crate) out_spec: TreeSpec,
    // Kept here: reading them must not wait for the instance's lock with the GIL held
    // (the thread running the instance needs the GIL to hand its outputs over).
    in_spec_text: String,
    out_spec_text: String,
    metadata_text: String,
    pub(crate) inputs: Vec<ValueInfo>,
    pub(crate) outputs: Vec<ValueInfo>,
    pub(crate) buffers: Vec<ValueInfo>,
    /// Per input: the program writes it back (mutates it in place).
    pub(crate) mutated: Vec<bool>,
    /// The outputs' shapes when none is dynamic and the library can write into arrays
    /// of the caller's (`aotc_run_into`).
    pub(crate) static_output_shapes: Option<Vec<Vec<i64>>>,
    pub(crate) support: Support,
}

fn dtype_name(info: &ValueInfo) -> &'static str {
    info.dtype.map_or("unknown", DType::name)
}

fn kind_name(kind: i32) -> &'static str {
    match kind {
        value_kind::FLOAT => "float",
        value_kind::INT => "int",
        value_kind::BOOL => "bool",
        value_kind::STR => "str",
        value_kind::NONE => "none",
        _ => "tensor",
    }
}

/// A namedtuple type per namedtuple the manifest names with its fields.
fn namedtuple_types(support: &Bound<'_, PyAny>, metadata: &str) -> PyResult<HashMap<String, Py<PyAny>>> {
    let json: serde_json::Value = serde_json::from_str(metadata).unwrap_or_default();
    let Some(types) = json.get("namedtuple_fields").and_then(|t| t.as_object()) else { return Ok(HashMap::new()) };
    types
        .iter()
        .map(|(name, fields)| {
            let fields: Vec<&str> = fields.as_array().into_iter().flatten().filter_map(|f| f.as_str()).collect();
            Ok((name.clone(), support.call_method1("namedtuple_type", (name, fields))?.unbind()))
        })
        .collect()
}

fn info_dict<'py>(py: Python<'py>, info: &ValueInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &info.name)?;
    d.set_item("kind", kind_name(info.kind))?;
    d.set_item("dtype", dtype_name(info))?;
    let shape: Vec<Option<i64>> = info.sizes.iter().map(|&s| (s >= 0).then_some(s)).collect();
    d.set_item("shape", PyTuple::new(py, shape)?)?;
    let dynamic = PyDict::new(py);
    for (i, &s) in info.sizes.iter().enumerate() {
        if s < 0 {
            let max = info.dim_max.get(i).copied().filter(|&m| m >= 0);
            dynamic.set_item(i, (info.dim_min.get(i).copied().unwrap_or(0), max))?;
        }
    }
    d.set_item("dynamic", dynamic)?;
    Ok(d)
}

impl Model {
    /// The instance. Call only with the GIL released (`py.detach`): the thread holding
    /// the lock may need the GIL before it lets go.
    pub(crate) fn lock(&self) -> MutexGuard<'_, aotc_runtime::Model> {
        // A panic while holding the lock cannot leave the instance half-changed (the
        // library's calls are all-or-nothing), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl Model {
    /// Loads the library at `path` and creates an instance on `device` ("cpu", "cuda",
    /// "cuda:N") running each call on up to `threads` threads (None: $AOTC_NUM_THREADS,
    /// else the available cores).
    /// `support` is the module aotc._arrays.
    #[new]
    /// `weights`: None (the library's own), or a weights file's path or bytes.
    #[pyo3(signature = (path, device = "cpu", threads = None, *, support, weights = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        device: &str,
        threads: Option<usize>,
        support: &Bound<'_, PyAny>,
        weights: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Model> {
        let dev = Device::parse(device).map_err(|e| to_py(py, e))?;
        let weights = weights.filter(|w| !w.is_none()).map(PyWeights::extract).transpose()?;
        let model = py
            .detach(|| {
                let source = weights.as_ref().map_or(aotc_runtime::Weights::Default, PyWeights::source);
                aotc_runtime::Model::load_with(&path, dev, threads.unwrap_or(0), source)
            })
            .map_err(|e| to_py(py, e))?;
        let parse = |spec: &str, what: &str| {
            TreeSpec::parse(spec).map_err(|e| raise(py, status::INTERNAL, format!("{}: {what}: {e}", path.display())))
        };
        let in_spec = parse(model.in_spec(), "in_spec")?;
        let out_spec = parse(model.out_spec(), "out_spec")?;
        if in_spec.num_leaves() != model.inputs().len() || out_spec.num_leaves() != model.outputs().len() {
            return Err(raise(
                py,
                status::INTERNAL,
                format!(
                    "{}: the call spec has {} inputs and {} outputs, the library {} and {}",
                    path.display(),
                    in_spec.num_leaves(),
                    out_spec.num_leaves(),
                    model.inputs().len(),
                    model.outputs().len()
                ),
            ));
        }
        let input_names: Vec<&str> = model.inputs().iter().map(|i| i.name.as_str()).collect();
        let signature = Signature::new(&in_spec, &input_names)
            .map_err(|e| raise(py, status::INTERNAL, format!("{}: {e}", path.display())))?;
        let (dl_device, gpu) = match dev {
            Device::Cpu => (DLDevice { device_type: DL_CPU, device_id: 0 }, None),
            Device::Cuda(n) => (
                DLDevice { device_type: DL_CUDA, device_id: n },
                Some(Arc::new(Gpu::open(n).map_err(|e| to_py(py, e))?)),
            ),
        };
        let dtype = |info: &ValueInfo, torch: bool| -> PyResult<Option<Py<PyAny>>> {
            let d = support.call_method1("dtype", (dtype_name(info), torch))?;
            Ok((!d.is_none()).then(|| d.unbind()))
        };
        let get = |name: &str| support.getattr(name).map(Bound::unbind);
        let support = Support {
            np: Numpy { asarray: get("asarray")?, ascontiguousarray: get("ascontiguousarray")? },
            empty: get("empty")?,
            to_torch: get("to_torch")?,
            torch_empty: get("torch_empty")?,
            node_types: NodeTypes {
                ordered_dict: get("OrderedDict")?,
                namedtuples: namedtuple_types(support, model.metadata_json())?,
            },
            out_numpy: model.outputs().iter().map(|i| dtype(i, false)).collect::<PyResult<_>>()?,
            out_torch: model.outputs().iter().map(|i| dtype(i, true)).collect::<PyResult<_>>()?,
            buffer_numpy: model.buffers().iter().map(|i| dtype(i, false)).collect::<PyResult<_>>()?,
        };
        let all_static = model.outputs().iter().all(|o| o.sizes.iter().all(|&n| n >= 0));
        Ok(Model {
            static_output_shapes: (all_static && model.can_run_into())
                .then(|| model.outputs().iter().map(|o| o.sizes.clone()).collect()),
            mutated: model.mutated_inputs().to_vec(),
            inputs: model.inputs().to_vec(),
            outputs: model.outputs().to_vec(),
            buffers: model.buffers().to_vec(),
            in_spec,
            out_spec,
            in_spec_text: model.in_spec().to_string(),
            out_spec_text: model.out_spec().to_string(),
            metadata_text: model.metadata_json().to_string(),
            path,
            device: device.to_string(),
            dl_device,
            gpu,
            signature,
            support,
            inner: Mutex::new(model),
        })
    }

    /// The inputs (the leaves of in_spec, in order): name, kind ("tensor", "float", "int",
    /// "bool", "str", "none"), dtype, shape (None for a dynamic size) and dynamic ({dim: (min, max or None)}).
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.inputs.iter().map(|i| info_dict(py, i)).collect::<PyResult<Vec<_>>>()?)
    }

    /// The outputs (the leaves of out_spec), described as `inputs` are.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.outputs.iter().map(|i| info_dict(py, i)).collect::<PyResult<Vec<_>>>()?)
    }

    /// The buffers (the model's state, kept across calls), described as `inputs` are.
    #[getter]
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.buffers.iter().map(|i| info_dict(py, i)).collect::<PyResult<Vec<_>>>()?)
    }

    /// Indices of the inputs the program mutates (written back into the caller's arrays).
    #[getter]
    fn mutated_inputs(&self) -> Vec<usize> {
        self.mutated.iter().enumerate().filter(|(_, &m)| m).map(|(i, _)| i).collect()
    }

    /// The call's input TreeSpec, JSON as torch.export serialises it.
    #[getter]
    fn in_spec(&self) -> String {
        self.in_spec_text.clone()
    }

    /// The call's output TreeSpec, JSON as torch.export serialises it.
    #[getter]
    fn out_spec(&self) -> String {
        self.out_spec_text.clone()
    }

    /// The manifest the compiler embedded (JSON text).
    #[getter]
    fn metadata_json(&self) -> String {
        self.metadata_text.clone()
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[getter]
    fn device(&self) -> &str {
        &self.device
    }

    /// Runs the program: `(args, kwargs)` bound to its parameters (by position or by name)
    /// and flattened by the in_spec, the outputs rebuilt by the out_spec. Mutated inputs
    /// are written back into the caller's arrays. On a GPU, tensors are device memory
    /// (torch CUDA tensors, DLPack producers) and outputs too (see aotc.DeviceArray).
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.call(py, args, kwargs)
    }

    /// Times `iters` calls (after `warmup` untimed ones) of the library on these inputs,
    /// converted once; returns min/median/mean/max microseconds and every time. The calls
    /// are real: buffers and mutated inputs change as in `iters + warmup` calls.
    #[pyo3(signature = (*args, iters = 100, warmup = 10, **kwargs))]
    fn bench<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        iters: usize,
        warmup: usize,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.bench_impl(py, args, kwargs, iters, warmup)
    }

    /// A new numpy array holding the current value of buffer `name`.
    fn read_buffer<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.read_buffer_impl(py, name)
    }

    /// Overwrites buffer `name` (same dtype and shape; any strides) for the next calls.
    fn write_buffer(&self, py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.write_buffer_impl(py, name, value)
    }

    /// Swaps in other weights: a weights file of this library's structure (the same
    /// tensors, dtypes and shapes: `aotc compile --external-weights --weights NEW` of the
    /// same program writes one), by path, or its bytes (copied). Checked first: on error
    /// (aotc.Error, status AOTC_ERR_WEIGHTS, naming the first mismatch) the model is
    /// unchanged. Buffers restart from the file's initial values, as after torch's
    /// load_state_dict. Waits for a call running on another thread to finish.
    fn load_weights(&self, py: Python<'_>, weights: &Bound<'_, PyAny>) -> PyResult<()> {
        self.load_weights_impl(py, weights)
    }

    fn __repr__(&self) -> String {
        format!(
            "aotc.Model('{}', device='{}', {} inputs, {} outputs, {} buffers)",
            self.path.display(),
            self.device,
            self.inputs.len(),
            self.outputs.len(),
            self.buffers.len()
        )
    }
}
