"""aotc: run torch.export programs compiled ahead of time into native libraries.

    import aotc
    aotc.compile(exported_program_or_pt2_path, "model.so")
    m = aotc.load("model.so")
    out = m(x)                      # like torch._export.aot_load(...)(x)

Inputs are numpy arrays or anything with __dlpack__ / __array__ (torch tensors are
passed without a copy, strided or not); outputs are numpy arrays, or torch tensors
when the inputs were torch tensors. The GIL is released while the model runs.
"""
from . import _arrays
from ._compile import compile
from ._native import ABI_VERSION, Error, Model

__all__ = ["ABI_VERSION", "Error", "Model", "compile", "load"]

# Failures that do not come from the library (compile errors) carry no status.
Error.code = None
Error.status = None


def load(path, device="cpu", threads=None, weights=None):
    """Loads the compiled library at `path` into a new instance, callable like the
    exported module: m(*args, **kwargs).

    device: "cpu". threads: the most threads one call uses (None: $AOTC_NUM_THREADS,
    else the available cores). Each instance has its own state (buffers); one instance
    serves one call at a time (concurrent calls wait for each other), distinct instances
    run in parallel.
    weights: None for the library's own (linked in, or the weights file its compilation
    wrote beside it: aotc compile --external-weights), else a weights file of the same
    structure, by path or as bytes (copied). m.load_weights(...) swaps them later.
    """
    return Model(path, device, threads, support=_arrays, weights=weights)
