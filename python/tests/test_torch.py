"""With torch installed (not needed otherwise): torch tensors in, torch tensors out,
without copies on the way in; mutated torch inputs updated in place."""
import os

import numpy as np
import pytest

import aotc
import helpers

torch = pytest.importorskip("torch")


def test_torch_in_torch_out(compiled):
    d = helpers.fixture("user_input_mutation")
    m = aotc.load(compiled("user_input_mutation"))
    x, y = (torch.from_numpy(a) for a in helpers.flat_inputs(d, 0, 2))
    xt = x.t().contiguous().t()  # strided
    mutated, _ = helpers.read_safetensors(os.path.join(d, "mutated_0.safetensors"))
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    rtol, atol = helpers.tolerance(d)
    out = m(xt, y)
    assert isinstance(out, torch.Tensor)
    helpers.compare("output", expected["0"], out.numpy(), rtol, atol)
    helpers.compare("x in place", mutated["0"], xt.contiguous().numpy(), rtol, atol)
    helpers.compare("y in place", mutated["1"], y.numpy(), rtol, atol)


def test_torch_tensor_that_requires_grad(compiled):
    d = helpers.fixture("dynamic_batch_mlp")
    m = aotc.load(compiled("dynamic_batch_mlp"))
    x = torch.ones(3, 8, requires_grad=True)
    np.testing.assert_array_equal(m(x).numpy(), m(np.ones((3, 8), np.float32)))
