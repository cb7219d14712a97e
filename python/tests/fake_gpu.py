"""Device memory of the fake CUDA driver (tests/fake_cuda, built by scripts/test_python.sh,
its path in $AOTC_TEST_FAKE_CUDA) for the Python tests, through ctypes: a DLPack producer
over device memory (what a torch CUDA tensor is to aotc) and a DLPack consumer that
copies a device tensor back to numpy. The fake driver's device memory lives inside the
driver (its PTX interpreter's), so every access goes through the driver's copies."""
import ctypes
import os
from contextlib import contextmanager

import numpy as np

from helpers import REPO

KDLCUDA = 2
_DLTENSOR = ctypes.create_string_buffer(b"dltensor")
_USED = ctypes.create_string_buffer(b"used_dltensor")


def driver_path():
    """The fake driver's library, or None where it was not built."""
    candidates = [os.environ.get("AOTC_TEST_FAKE_CUDA", "")]
    candidates += [os.path.join(REPO, "target", p, "libaotc_fake_cuda.so") for p in ("release", "debug")]
    return next((os.path.realpath(c) for c in candidates if c and os.path.isfile(c)), None)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
_DTYPES = {(0, 64): np.int64, (0, 32): np.int32, (2, 32): np.float32, (2, 64): np.float64, (6, 8): np.bool_, (1, 8): np.uint8}

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_void_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]


class FakeGpu:
    """cuda:0 of the fake driver: its primary context, made current around each copy."""

    def __init__(self, path):
        self.lib = lib = ctypes.CDLL(path)
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        lib.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
        lib.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self._check(lib.cuInit(0), "cuInit")
        device = ctypes.c_int()
        self._check(lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self._check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), device), "cuDevicePrimaryCtxRetain")

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUDA error {rc}")

    @contextmanager
    def _current(self):
        self._check(self.lib.cuCtxPushCurrent_v2(self.context), "cuCtxPushCurrent")
        try:
            yield
        finally:
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def upload(self, array):
        """A new device allocation holding `array`'s bytes; its address."""
        array = np.ascontiguousarray(array)
        ptr = ctypes.c_uint64()
        with self._current():
            self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), max(array.nbytes, 1)), "cuMemAlloc")
            if array.nbytes:
                self._check(self.lib.cuMemcpyHtoD_v2(ptr.value, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")
        return ptr.value

    def download(self, ptr, shape, dtype):
        """A numpy copy of the device tensor at `ptr`."""
        out = np.empty(shape, dtype)
        if out.nbytes:
            with self._current():
                self._check(self.lib.cuMemcpyDtoH_v2(out.ctypes.data, ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def free(self, ptr):
        with self._current():
            self._check(self.lib.cuMemFree_v2(ptr), "cuMemFree")


class DeviceTensor:
    """A tensor in the fake device's memory, speaking DLPack as a torch CUDA tensor does."""

    def __init__(self, gpu, array):
        array = np.asarray(array)
        self.gpu, self.shape, self.dtype = gpu, array.shape, array.dtype
        self.ptr = gpu.upload(array)
        self._shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
        self._exported = []  # the managed tensors of the capsules handed out (no deleter)

    def __dlpack_device__(self):
        return (KDLCUDA, 0)

    def __dlpack__(self, stream=None, **kwargs):
        code, bits = _CODES[self.dtype.kind], self.dtype.itemsize * 8
        t = DLTensor(self.ptr, DLDevice(KDLCUDA, 0), len(self.shape), DLDataType(code, bits, 1), self._shape, None, 0)
        managed = DLManagedTensor(t, None, None)
        self._exported.append(managed)
        return _api.PyCapsule_New(ctypes.addressof(managed), ctypes.addressof(_DLTENSOR), None)

    def numpy(self):
        return self.gpu.download(self.ptr, self.shape, self.dtype)

    def __del__(self):
        self.gpu.free(self.ptr)


def from_dlpack(gpu, obj, consume=False):
    """A numpy copy of the device tensor `obj` exports through DLPack. consume=True takes
    the tensor over as torch.from_dlpack does (renames the capsule, calls the deleter
    when done); else the capsule is dropped unconsumed (its destructor cleans up)."""
    assert obj.__dlpack_device__() == (KDLCUDA, 0)
    capsule = obj.__dlpack__(stream=None)
    ptr = _api.PyCapsule_GetPointer(capsule, ctypes.addressof(_DLTENSOR))
    managed = DLManagedTensor.from_address(ptr)
    t = managed.dl_tensor
    assert (t.device.device_type, t.device.device_id) == (KDLCUDA, 0)
    assert not t.strides, "contiguous (null strides)"
    shape = tuple(t.shape[i] for i in range(t.ndim))
    dtype = _DTYPES[(t.dtype.code, t.dtype.bits)]
    out = gpu.download(t.data + t.byte_offset, shape, dtype)
    if consume:
        assert _api.PyCapsule_SetName(capsule, ctypes.addressof(_USED)) == 0
        _DELETER(managed.deleter)(ptr)
    return out
