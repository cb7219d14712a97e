"""Tensors that only speak DLPack (as torch, JAX and CuPy tensors do) are passed
without a copy, strides honoured, mutated ones written back through them. numpy's own
__dlpack__ plays the producer here (no torch needed); test_torch.py runs with torch."""
import os

import numpy as np
import pytest

import aotc
import helpers


class DLPackOnly:
    """Exposes an array through __dlpack__ alone."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None, **kwargs):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_dlpack_inputs_strided_and_mutated(compiled):
    d = helpers.fixture("user_input_mutation")
    m = aotc.load(compiled("user_input_mutation"))
    x, y = helpers.flat_inputs(d, 0, 2)
    mutated, _ = helpers.read_safetensors(os.path.join(d, "mutated_0.safetensors"))
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    rtol, atol = helpers.tolerance(d)
    xf = np.asfortranarray(x.copy())
    wide = np.zeros((y.shape[0], 2 * y.shape[1]), np.float32)
    wide[:, ::2] = y
    out = m(DLPackOnly(xf), DLPackOnly(wide[:, ::2]))
    assert isinstance(out, np.ndarray)  # not torch: numpy out
    helpers.compare("output", expected["0"], out, rtol, atol)
    helpers.compare("x written back", mutated["0"], xf, rtol, atol)
    helpers.compare("y written back", mutated["1"], wide[:, ::2], rtol, atol)
    assert (wide[:, 1::2] == 0).all()


def test_dlpack_errors_name_the_input(compiled):
    m = aotc.load(compiled("dynamic_batch_mlp"))
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\): expected dtype float32, got float64"):
        m(DLPackOnly(np.ones((2, 8))))


def test_jax_arrays_go_in_through_dlpack(compiled):
    # JAX arrays are immutable: an input the program mutates must be refused, others read
    # in place. Skipped where JAX is not installed (CI installs numpy only).
    jnp = pytest.importorskip("jax.numpy")
    d = helpers.fixture("dynamic_batch_mlp")
    m = aotc.load(compiled("dynamic_batch_mlp"))
    (x,) = helpers.flat_inputs(d, 0, 1)
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    out = m(jnp.asarray(x))
    assert isinstance(out, np.ndarray)
    helpers.compare("output", expected["0"], out, *helpers.tolerance(d))


def test_each_call_returns_arrays_of_its_own(compiled):
    # Outputs are written into arrays allocated per call: a later call never changes an
    # earlier call's result, and the arrays are ordinary writable numpy arrays.
    m = aotc.load(compiled("dynamic_batch_mlp"))
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    first = m(x)
    kept = first.copy()
    second = m(x * 3)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, kept)
    assert first.flags.writeable and first.flags.c_contiguous
