"""With torch installed (not needed otherwise): torch tensors in, torch tensors out,
without copies on the way in; mutated torch inputs updated in place. With a GPU too:
the same with CUDA tensors and a library compiled for CUDA (test_cuda.py runs that
library on the fake driver, without torch)."""
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


class DLPackOnly:
    """A torch tensor seen only through DLPack: not torch to aotc, so outputs are
    aotc.DeviceArrays."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch has no GPU")
def test_torch_cuda_tensors_in_and_out(tmp_path):
    d = helpers.fixture("user_input_mutation")
    m = aotc.load(aotc.compile(os.path.join(d, "model.pt2"), str(tmp_path / "cuda.so"), device="cuda"), device="cuda:0")
    mutated, _ = helpers.read_safetensors(os.path.join(d, "mutated_0.safetensors"))
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    rtol, atol = helpers.tolerance(d)
    x, y = (torch.from_numpy(a).cuda() for a in helpers.flat_inputs(d, 0, 2))
    x0, y0 = x.clone(), y.clone()
    out = m(x, y)
    assert isinstance(out, torch.Tensor) and out.device == torch.device("cuda:0")
    helpers.compare("output", expected["0"], out.cpu().numpy(), rtol, atol)
    helpers.compare("x in place", mutated["0"], x.cpu().numpy(), rtol, atol)
    helpers.compare("y in place", mutated["1"], y.cpu().numpy(), rtol, atol)
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\): a tensor on the CPU \(torch.Tensor\) given to a model on cuda:0") as e:
        m(x0.cpu(), y0.cpu())
    assert e.value.status == "AOTC_ERR_DEVICE"
    # Not torch: an aotc.DeviceArray, which torch takes through DLPack.
    other = aotc.load(aotc.compile(os.path.join(d, "model.pt2"), str(tmp_path / "cuda2.so"), device="cuda"), device="cuda:0")
    arr = other(DLPackOnly(x0), DLPackOnly(y0))
    assert isinstance(arr, aotc.DeviceArray)
    helpers.compare("output via DLPack", expected["0"], torch.from_dlpack(arr).cpu().numpy(), rtol, atol)
    helpers.compare("output via numpy()", expected["0"], arr.numpy(), rtol, atol)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch has no GPU")
def test_torch_cuda_output_whose_shape_depends_on_the_data(tmp_path):
    d = os.path.join(helpers.VENDORED, "ops", "nonzero__float32__1")
    m = aotc.load(aotc.compile(os.path.join(d, "model.pt2"), str(tmp_path / "nonzero.so"), device="cuda"), device="cuda:0")
    (x,) = helpers.flat_inputs(d, 0, 1)
    out = m(torch.from_numpy(x).cuda())
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    assert isinstance(out, torch.Tensor) and out.is_cuda
    helpers.compare("nonzero", expected["0"], out.cpu().numpy(), 0, 0)


def test_torch_tensor_with_the_negative_bit_is_read_as_its_values(compiled):
    # z.conj().imag is a view with the negative bit set: its memory holds -v. The model
    # must see v, as torch's own operators do, and a mutated one is written back as v.
    d = helpers.fixture("user_input_mutation")
    m = aotc.load(compiled("user_input_mutation"))
    x, y = (torch.from_numpy(a) for a in helpers.flat_inputs(d, 0, 2))
    mutated, _ = helpers.read_safetensors(os.path.join(d, "mutated_0.safetensors"))
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    rtol, atol = helpers.tolerance(d)
    zx, zy = torch.complex(torch.zeros_like(x), -x), torch.complex(torch.zeros_like(y), -y)
    xn, yn = zx.conj().imag, zy.conj().imag
    assert xn.is_neg() and yn.is_neg()
    helpers.compare("x as given", x.numpy(), xn.resolve_neg().numpy(), 0, 0)
    out = m(xn, yn)
    helpers.compare("output", expected["0"], out.numpy(), rtol, atol)
    helpers.compare("x in place", mutated["0"], xn.resolve_neg().numpy(), rtol, atol)
    helpers.compare("y in place", mutated["1"], yn.resolve_neg().numpy(), rtol, atol)


def test_torch_mutated_inputs_torch_would_not_write_are_refused(compiled):
    d = helpers.fixture("user_input_mutation")
    m = aotc.load(compiled("user_input_mutation"))
    x, y = (torch.from_numpy(a) for a in helpers.flat_inputs(d, 0, 2))
    expanded = torch.ones(1, 4).expand(3, 4)
    with pytest.raises(RuntimeError, match="single memory location"):
        expanded.mul_(2)
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\).*share one memory location"):
        m(expanded, y.clone())
    leaf = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.mul_(2)
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\).*leaf tensor that requires grad"):
        m(leaf, y.clone())
    assert (leaf.detach() == x).all()
    # Under no_grad torch writes it, and so does the call.
    with torch.no_grad():
        m(leaf, y.clone())
    assert (leaf.detach() == 2 * x).all()
