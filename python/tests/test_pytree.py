"""Pytree inputs and outputs (tests/fixtures/pytree_io): forward({"a": A, "b": B}, 3.0)
returns {"sum": ..., "parts": (..., ...)}; the call spec shapes both sides."""
import collections
import json
import os

import numpy as np
import pytest

import aotc
import helpers


@pytest.fixture(scope="module")
def model(compiled):
    return aotc.load(compiled("pytree_io"))


@pytest.fixture(scope="module")
def recorded():
    d = helpers.fixture("pytree_io")
    tensors, scalars = helpers.read_safetensors(os.path.join(d, "inputs_0.safetensors"))
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    return tensors["0"], tensors["1"], scalars["2"], expected, helpers.tolerance(d)


def test_output_tree_is_rebuilt_with_python_types(model, recorded):
    a, b, scale, expected, (rtol, atol) = recorded
    out = model({"a": a, "b": b}, scale)
    assert type(out) is dict and list(out) == ["sum", "parts"]
    assert type(out["parts"]) is tuple and len(out["parts"]) == 2
    helpers.compare("sum", expected["0"], out["sum"], rtol, atol)
    helpers.compare("parts[0]", expected["1"], out["parts"][0], rtol, atol)
    helpers.compare("parts[1]", expected["2"], out["parts"][1], rtol, atol)


def test_dict_inputs_are_matched_by_key_not_order(model, recorded):
    a, b, scale, expected, (rtol, atol) = recorded
    out = model(collections.OrderedDict([("b", b), ("a", a)]), scale)
    helpers.compare("sum", expected["0"], out["sum"], rtol, atol)


def test_a_list_may_stand_for_a_tuple_of_args(model, recorded):
    a, b, scale, expected, (rtol, atol) = recorded
    out = model(*[{"a": a, "b": b}, scale])
    helpers.compare("parts[1]", expected["2"], out["parts"][1], rtol, atol)


@pytest.mark.parametrize("args,kwargs,message", [
    (lambda a, b: ({"a": a}, 3.0), {}, "argument 'inputs': missing key 'b'"),
    (lambda a, b: ({"a": a, "b": b, "c": a}, 3.0), {}, "argument 'inputs': unexpected key(s) 'c'"),
    (lambda a, b: ([a, b], 3.0), {}, "argument 'inputs': expected a dict"),
    (lambda a, b: ({"a": a, "b": b},), {}, "missing required argument 'scale' (the model takes (inputs, scale))"),
    (lambda a, b: ({"a": a, "b": b}, 3.0), {"extra": 1}, "unexpected keyword argument 'extra' (the model takes (inputs, scale))"),
    (lambda a, b: ({"a": a, "b": b}, 3.0), {"scale": 3.0}, "got multiple values for argument 'scale'"),
])
def test_structure_mismatch_names_the_place(model, recorded, args, kwargs, message):
    a, b = recorded[0], recorded[1]
    with pytest.raises(aotc.Error) as e:
        model(*args(a, b), **kwargs)
    assert message in str(e.value)
    assert e.value.status == "AOTC_ERR_INPUT_COUNT"


def test_arguments_may_be_passed_by_name(model, recorded):
    # The names are the parameters' (torch.export names a container's leaves after it:
    # inputs_a, inputs_b for inputs["a"], inputs["b"]).
    a, b, scale, expected, (rtol, atol) = recorded
    out = model(scale=scale, inputs={"a": a, "b": b})
    helpers.compare("sum", expected["0"], out["sum"], rtol, atol)
    out = model({"a": a, "b": b}, scale=scale)
    helpers.compare("sum", expected["0"], out["sum"], rtol, atol)


def test_specialised_scalar_is_checked_by_the_library(model, recorded):
    a, b = recorded[0], recorded[1]
    with pytest.raises(aotc.Error) as e:
        model({"a": a, "b": b}, 2.0)
    assert e.value.status == "AOTC_ERR_CONSTANT"
    assert "input 2 ('scale')" in str(e.value)


def test_scalar_input_must_be_a_number(model, recorded):
    a, b = recorded[0], recorded[1]
    with pytest.raises(aotc.Error, match=r"input 2 \('scale'\): expected a python float, got str"):
        model({"a": a, "b": b}, "3.0")


def test_spec_and_metadata(model):
    assert [i["name"] for i in model.inputs] == ["inputs_a", "inputs_b", "scale"]
    assert [i["kind"] for i in model.inputs] == ["tensor", "tensor", "float"]
    assert model.inputs[0]["shape"] == (2, 4) and model.inputs[0]["dtype"] == "float32"
    assert len(model.outputs) == 3
    out_root = json.loads(model.out_spec)[1]
    assert out_root["type"] == "builtins.dict" and json.loads(out_root["context"]) == ["sum", "parts"]
    assert json.loads(model.metadata_json)["in_spec"] == model.in_spec


def test_a_namedtuple_output_comes_back_as_a_namedtuple(compiled):
    # tests/fixtures/namedtuple_output: forward(x, y) returns Pair(total=x + y, scaled=2x),
    # its type registered for export as "aotc_tests.Pair".
    d = helpers.fixture("namedtuple_output")
    tensors, _ = helpers.read_safetensors(os.path.join(d, "inputs_0.safetensors"))
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    out = aotc.load(compiled("namedtuple_output"))(tensors["0"], tensors["1"])
    assert isinstance(out, tuple) and type(out).__name__ == "Pair"
    assert out._fields == ("total", "scaled")
    rtol, atol = helpers.tolerance(d)
    helpers.compare("total", expected["0"], out.total, rtol, atol)
    helpers.compare("scaled", expected["1"], out.scaled, rtol, atol)
