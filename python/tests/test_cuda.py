"""Models compiled for CUDA, run from Python on the fake driver (tests/fake_cuda: the
CUDA driver API over the PTX interpreter, no GPU needed). Inputs are DLPack producers over
device memory (as torch CUDA tensors are); without torch, outputs are aotc.DeviceArrays
in device memory, exported through DLPack; a host array is refused, never copied.
test_torch.py runs torch CUDA tensors where torch has a GPU."""
import os
import sys

import numpy as np
import pytest

import aotc
import fake_gpu
import helpers
from fake_gpu import DeviceTensor


@pytest.fixture(scope="module")
def gpu():
    path = fake_gpu.driver_path()
    if path is None:
        pytest.skip("the fake CUDA driver is not built (cargo build --release -p aotc-fake-cuda)")
    # Libraries and the binding open the driver this names; each CUDA library compiled
    # here keeps the fake one for the process's life, other libraries are unaffected.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOTC_CUDA_DRIVER", path)
        yield fake_gpu.FakeGpu(path)


@pytest.fixture(scope="module")
def cuda_lib(tmp_path_factory):
    """cuda_lib(model.pt2 dir) -> its library compiled for CUDA, once per module."""
    cache = {}
    out = tmp_path_factory.mktemp("cuda")

    def get(d):
        if d not in cache:
            cache[d] = aotc.compile(os.path.join(d, "model.pt2"), str(out / f"{os.path.basename(d)}.so"), device="cuda")
        return cache[d]

    return get


def _expected(d, call):
    return helpers.read_safetensors(os.path.join(d, f"expected_{call}.safetensors"))[0]


def _call(gpu, m, d, call, count):
    """Calls m on call `call`'s inputs of fixture `d`, uploaded to the device; the flat outputs."""
    leaves = [DeviceTensor(gpu, x) if isinstance(x, np.ndarray) else x for x in helpers.flat_inputs(d, call, count)]
    return helpers.call_with_flat(m, leaves)


def test_outputs_match_pytorch_and_buffers_carry_over_calls(gpu, cuda_lib):
    d = helpers.fixture("mlp_buffer_mutation")
    m = aotc.load(cuda_lib(d), device="cuda:0")
    assert m.device == "cuda:0"
    rtol, atol = helpers.tolerance(d)
    np.testing.assert_array_equal(m.read_buffer("calls"), [0.0])
    for call in range(helpers.info(d)["calls"]):
        (out,) = _call(gpu, m, d, call, len(m.inputs))
        assert isinstance(out, aotc.DeviceArray)
        assert out.device == "cuda:0" and out.__dlpack_device__() == (2, 0)
        want = _expected(d, call)["0"]
        assert (out.shape, out.dtype, out.nbytes) == (want.shape, "float32", want.nbytes)
        helpers.compare(f"call {call} (numpy())", want, out.numpy(), rtol, atol)
        helpers.compare(f"call {call} (through DLPack)", want, fake_gpu.from_dlpack(gpu, out), rtol, atol)
    # The state lives on the device; read and written as host arrays.
    np.testing.assert_array_equal(m.read_buffer("calls"), [2.0])
    m.write_buffer("calls", np.zeros(1, np.float32))
    (again,) = _call(gpu, m, d, 0, 1)
    helpers.compare("after write_buffer", _expected(d, 0)["0"], again.numpy(), rtol, atol)


def test_dynamic_batch_and_memory_of_their_own(gpu, cuda_lib):
    d = helpers.fixture("dynamic_batch_mlp")
    m = aotc.load(cuda_lib(d), device="cuda")
    rtol, atol = helpers.tolerance(d)
    outs = [_call(gpu, m, d, call, 1)[0] for call in range(helpers.info(d)["calls"])]
    # Each call's outputs are new allocations: later calls leave earlier results alone.
    assert len({o.data_ptr for o in outs}) == len(outs)
    for call, out in enumerate(outs):
        helpers.compare(f"call {call}", _expected(d, call)["0"], out.numpy(), rtol, atol)


def test_output_shapes_that_depend_on_the_data_are_copied_out(gpu, cuda_lib):
    d = os.path.join(helpers.VENDORED, "ops", "nonzero__float32__1")
    m = aotc.load(cuda_lib(d), device="cuda:0")
    assert m.outputs[0]["shape"][0] is None  # the number of nonzeros
    (out,) = _call(gpu, m, d, 0, 1)
    want = _expected(d, 0)["0"]
    assert isinstance(out, aotc.DeviceArray) and out.dtype == "int64"
    helpers.compare("nonzero", want, out.numpy(), 0, 0)


def test_outputs_go_back_in_as_inputs(gpu, cuda_lib):
    # A DeviceArray is a DLPack producer like any other: a call's output feeds the next.
    d = helpers.fixture("user_input_mutation")
    m = aotc.load(cuda_lib(d), device="cuda:0")
    x, y = helpers.flat_inputs(d, 0, 2)
    mutated = helpers.read_safetensors(os.path.join(d, "mutated_0.safetensors"))[0]
    rtol, atol = helpers.tolerance(d)
    dx, dy = DeviceTensor(gpu, x), DeviceTensor(gpu, y)
    out = m(dx, dy)
    helpers.compare("output", _expected(d, 0)["0"], out.numpy(), rtol, atol)
    # Mutated inputs are written in place, in device memory.
    helpers.compare("x written back", mutated["0"], dx.numpy(), rtol, atol)
    helpers.compare("y written back", mutated["1"], dy.numpy(), rtol, atol)
    assert out.shape == x.shape
    chained = m(out, DeviceTensor(gpu, y))
    assert isinstance(chained, aotc.DeviceArray) and chained.data_ptr != out.data_ptr


def test_a_host_array_is_refused_not_copied(gpu, cuda_lib):
    d = helpers.fixture("dynamic_batch_mlp")
    m = aotc.load(cuda_lib(d), device="cuda:0")
    with pytest.raises(aotc.Error) as e:
        m(np.ones((3, 8), np.float32))
    assert e.value.status == "AOTC_ERR_DEVICE"
    assert "input 0 ('x'): a tensor on the CPU (numpy.ndarray) given to a model on cuda:0" in str(e.value)
    assert "never copies" in str(e.value)
    # And the other way round: device memory given to a model on the CPU.
    cpu = aotc.load(aotc.compile(os.path.join(d, "model.pt2"), os.path.join(os.path.dirname(cuda_lib(d)), "cpu.so")))
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\): a tensor on cuda:0 .* given to a model on the CPU") as e:
        cpu(DeviceTensor(gpu, np.ones((3, 8), np.float32)))
    assert e.value.status == "AOTC_ERR_DEVICE"


def test_errors_of_the_library_come_through(gpu, cuda_lib):
    d = helpers.fixture("dynamic_batch_mlp")
    m = aotc.load(cuda_lib(d), device="cuda:0")
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\): dimension 1 is 7, expected 8") as e:
        m(DeviceTensor(gpu, np.ones((3, 7), np.float32)))
    assert e.value.status == "AOTC_ERR_SHAPE"
    with pytest.raises(aotc.Error, match="cuda:3"):
        aotc.load(cuda_lib(d), device="cuda:3")


def test_device_array_dlpack_export(gpu, cuda_lib):
    d = helpers.fixture("dynamic_batch_mlp")
    m = aotc.load(cuda_lib(d), device="cuda:0")
    out = m(DeviceTensor(gpu, np.ones((2, 8), np.float32)))
    want = out.numpy()
    assert repr(out) == "aotc.DeviceArray(shape=[2, 4], dtype=float32, device='cuda:0')"
    refs = sys.getrefcount(out)
    capsule = out.__dlpack__()
    assert sys.getrefcount(out) == refs + 1  # the capsule keeps the array alive
    del capsule  # unconsumed: its destructor lets go
    assert sys.getrefcount(out) == refs
    # Taken over by a consumer, which calls the deleter when done.
    np.testing.assert_array_equal(fake_gpu.from_dlpack(gpu, out, consume=True), want)
    assert sys.getrefcount(out) == refs
    with pytest.raises(BufferError):
        out.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError):
        out.__dlpack__(copy=True)
    # What a DLPack 1.0 consumer asks for: the legacy capsule answers it.
    assert type(out.__dlpack__(max_version=(1, 0), dl_device=(2, 0), copy=False, stream=None)).__name__ == "PyCapsule"


def test_bench_runs_on_the_device(gpu, cuda_lib):
    d = helpers.fixture("dynamic_batch_mlp")
    m = aotc.load(cuda_lib(d), device="cuda:0")
    r = m.bench(DeviceTensor(gpu, np.ones((2, 8), np.float32)), iters=2, warmup=1)
    assert r["iters"] == 2 and len(r["times_us"]) == 2
