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
