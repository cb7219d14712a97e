"""Array helpers the native module calls: numpy allocation, dtype names, torch views,
torch tensors on a GPU.

Kept in Python so that numpy (and ml_dtypes, torch when present) stay ordinary imports.
"""
import collections

import numpy as np

try:  # numpy has no bfloat16; ml_dtypes (optional) adds one.
    import ml_dtypes as _ml_dtypes

    _BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _BFLOAT16 = None

_NUMPY = {
    "uint8": np.dtype(np.uint8),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "bool": np.dtype(np.bool_),
}

empty = np.empty
asarray = np.asarray
ascontiguousarray = np.ascontiguousarray
OrderedDict = collections.OrderedDict


def namedtuple_type(serialized_name, fields):
    """A namedtuple type for a call spec's namedtuple node: named after the last part of
    the type's serialized name (torch.utils._pytree._register_namedtuple), with its fields."""
    name = serialized_name.rsplit(".", 1)[-1]
    return collections.namedtuple(name if name.isidentifier() else "namedtuple", fields, rename=True)


def dtype(name, torch):
    """The numpy dtype an aotc dtype is allocated as: for a numpy result (torch=False;
    None when numpy lacks it) or for a torch.from_numpy view (torch=True)."""
    if name == "bfloat16":
        return np.dtype(np.int16) if torch else _BFLOAT16
    return _NUMPY.get(name)


_torch = None


def _import_torch():
    global _torch
    if _torch is None:
        import torch

        _torch = torch
    return _torch


def to_torch(array, name):
    """A torch tensor sharing `array`'s memory (allocated with dtype(name, True))."""
    torch = _import_torch()
    t = torch.from_numpy(array)
    return t.view(torch.bfloat16) if name == "bfloat16" else t


def torch_empty(shape, name, device):
    """A new contiguous torch tensor of aotc dtype `name` on `device` ("cuda:N": from
    torch's caching allocator) and its data address, for a model on a GPU to write an
    output into."""
    torch = _import_torch()
    t = torch.empty(shape, dtype=getattr(torch, name), device=device)
    return t, t.data_ptr()
