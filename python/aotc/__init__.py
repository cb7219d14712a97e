"""aotc: run torch.export programs compiled ahead of time into native libraries.

    import aotc
    aotc.compile(exported_program_or_pt2_path, "model.so")
    m = aotc.load("model.so")
    out = m(x)                      # like torch._export.aot_load(...)(x)

Inputs are numpy arrays or anything with __dlpack__ / __array__ (torch tensors are
passed without a copy, strided or not); outputs are numpy arrays, or torch tensors
when the inputs were torch tensors. The GIL is released while the model runs.

Arguments bind to the exported program's parameters as in Python: positionally, or by
name (keyword arguments of the exporting call by name only); a missing, surplus or
unknown argument is an aotc.Error naming it and the model's signature.

CUDA (a library compiled with device="cuda", loaded with device="cuda:N"): tensors are
device memory of that GPU, given through __dlpack__ (torch CUDA tensors, CuPy, JAX...);
a host array is an error (AOTC_ERR_DEVICE), never copied to the device, as in the C ABI.
Outputs are allocated per call in the model's device memory and written there by the
library (aotc_run_into), so each call's results are its own and stay valid however
many calls follow: torch tensors on that device (torch.empty: PyTorch's caching
allocator) when the inputs were torch tensors, else aotc.DeviceArray objects (memory
from the CUDA driver, freed with the last reference) that speak DLPack (kDLCUDA), so
torch.from_dlpack, cupy.from_dlpack... take them without a copy and so does the next
call; DeviceArray.numpy() copies one to the host. An output whose shape depends on the
data is copied once, on the device, out of the instance's memory. Calls are complete
when they return (the library waits for its stream). Buffers stay host arrays:
read_buffer / write_buffer copy the state between the host and the device.
"""
from . import _arrays
from ._compile import compile
from ._native import ABI_VERSION, DeviceArray, Error, Model

__all__ = ["ABI_VERSION", "DeviceArray", "Error", "Model", "compile", "load"]

# Failures that do not come from the library (compile errors) carry no status.
Error.code = None
Error.status = None


def load(path, device="cpu", threads=None, weights=None):
    """Loads the compiled library at `path` into a new instance, callable like the
    exported module: m(*args, **kwargs).

    device: "cpu", or "cuda" / "cuda:N" for a library compiled for CUDA (see the module's
    docstring; the CUDA driver is $AOTC_CUDA_DRIVER, else libcuda.so.1). threads: the most threads one call uses (None: $AOTC_NUM_THREADS,
    else the available cores). Each instance has its own state (buffers); one instance
    serves one call at a time (concurrent calls wait for each other), distinct instances
    run in parallel.
    weights: None for the library's own (linked in, or the weights file its compilation
    wrote beside it: aotc compile --external-weights), else a weights file of the same
    structure, by path or as bytes (copied). m.load_weights(...) swaps them later.
    """
    return Model(path, device, threads, support=_arrays, weights=weights)
