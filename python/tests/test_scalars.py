"""Python scalars in and out (tests/fixtures/raw): `scalar_args` is forward(x, n: int,
s: float) with n a dynamic int (a SymInt input; calls use 3 then 5) and s specialised to
0.5; `symint_output` returns (tanh(x) * 2, x.shape[0] * 2) with a dynamic batch (a SymInt
output). PyTorch's python scalars sit in the safetensors metadata "scalars"."""
import os

import numpy as np
import pytest

import aotc
import helpers

RAW = os.path.join(helpers.VENDORED, "raw")


def _load(name, tmp_path_factory):
    d = os.path.join(RAW, name)
    so = aotc.compile(os.path.join(d, "model.pt2"), str(tmp_path_factory.mktemp(name) / "model.so"))
    return aotc.load(so), d


@pytest.fixture(scope="module")
def scalar_args(tmp_path_factory):
    return _load("scalar_args", tmp_path_factory)


@pytest.fixture(scope="module")
def constant_args(tmp_path_factory):
    return _load("constant_args", tmp_path_factory)


@pytest.fixture(scope="module")
def symint_output(tmp_path_factory):
    return _load("symint_output", tmp_path_factory)


def _call(d, call, name):
    tensors, scalars = helpers.read_safetensors(os.path.join(d, f"{name}_{call}.safetensors"))
    return tensors, scalars


def test_a_dynamic_int_input_matches_pytorch_on_every_call(scalar_args):
    m, d = scalar_args
    rtol, atol = helpers.tolerance(d)
    assert [(i["name"], i["kind"]) for i in m.inputs] == [("x", "tensor"), ("n", "int"), ("s", "float")]
    for call in range(helpers.info(d)["calls"]):
        inputs, scalars = _call(d, call, "inputs")
        expected, _ = _call(d, call, "expected")
        assert isinstance(scalars["1"], int) and isinstance(scalars["2"], float)
        out = m(inputs["0"], scalars["1"], scalars["2"])
        helpers.compare(f"call {call} output 0", expected["0"], out[0], rtol, atol)
        helpers.compare(f"call {call} output 1", expected["1"], out[1], rtol, atol)
        # By name too, as the exported forward's parameters.
        out = m(inputs["0"], n=scalars["1"], s=scalars["2"])
        helpers.compare(f"call {call} output 1 (by name)", expected["1"], out[1], rtol, atol)


def test_a_dynamic_int_outside_its_range_is_refused(scalar_args):
    m, _ = scalar_args
    x = np.ones((4, 6), np.float32)
    with pytest.raises(aotc.Error) as e:
        m(x, -1, 0.5)
    assert e.value.status == "AOTC_ERR_RANGE"
    assert "input 1 ('n')" in str(e.value) and "[0, inf]" in str(e.value)


def test_scalars_must_be_of_their_python_type(scalar_args):
    m, _ = scalar_args
    x = np.ones((4, 6), np.float32)
    with pytest.raises(aotc.Error, match=r"input 1 \('n'\): expected a python int, got float"):
        m(x, 3.0, 0.5)
    # torch refuses an int where export specialised a float.
    with pytest.raises(aotc.Error, match=r"input 2 \('s'\): expected a python float, got int"):
        m(x, 3, 1)
    with pytest.raises(aotc.Error) as e:
        m(x, 3, 0.7)
    assert e.value.status == "AOTC_ERR_CONSTANT" and "0.5" in str(e.value)


def test_a_symint_output_comes_back_with_its_value(symint_output):
    m, d = symint_output
    rtol, atol = helpers.tolerance(d)
    kind = m.outputs[1]["kind"]
    for call in range(helpers.info(d)["calls"]):
        inputs, _ = _call(d, call, "inputs")
        expected, scalars = _call(d, call, "expected")
        out = m(inputs["0"])
        assert isinstance(out, tuple) and len(out) == 2
        helpers.compare(f"call {call} output 0", expected["0"], out[0], rtol, atol)
        want = scalars["1"]
        assert want == 2 * inputs["0"].shape[0]
        if kind == "int":
            # The library describes it as a python int: it comes back as one.
            assert type(out[1]) is int and out[1] == want
        else:
            assert kind == "tensor" and isinstance(out[1], np.ndarray)
            assert out[1].dtype == np.int64 and out[1].shape == () and int(out[1]) == want


def test_a_specialised_str_and_none_are_passed_as_python_values(constant_args):
    m, d = constant_args
    rtol, atol = helpers.tolerance(d)
    assert [(i["name"], i["kind"]) for i in m.inputs] == [
        ("x", "tensor"), ("reduction", "str"), ("scale", "float"), ("extra", "none")]
    inputs, scalars = _call(d, 0, "inputs")
    expected, _ = _call(d, 0, "expected")
    assert scalars == {"1": "mean", "2": 2.0, "3": None}
    out = m(inputs["0"], "mean", 2.0, None)
    helpers.compare("output 0", expected["0"], out[0] if isinstance(out, tuple) else out, rtol, atol)
    with pytest.raises(aotc.Error) as e:
        m(inputs["0"], "sum", 2.0, None)
    assert e.value.status == "AOTC_ERR_CONSTANT" and '"mean"' in str(e.value) and '"sum"' in str(e.value)
    with pytest.raises(aotc.Error, match=r"input 3 \('extra'\): export specialised this input to None"):
        m(inputs["0"], "mean", 2.0, 1.0)
