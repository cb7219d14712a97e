"""Wrong inputs raise aotc.Error (a RuntimeError) carrying the library's message and
status; nothing crashes. Arguments bind to the program's parameters as a Python call
does, and a wrong call names them."""
import json
import os
import zipfile

import numpy as np
import pytest

import aotc
import helpers


@pytest.fixture(scope="module")
def model(compiled):
    return aotc.load(compiled("dynamic_batch_mlp"))


X = np.ones((3, 8), np.float32)


def _readonly(a):
    # numpy will not export these through DLPack: they take the __array_interface__ path.
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("args,status,message", [
    ((X.astype(np.float64),), "AOTC_ERR_DTYPE", "input 0 ('x'): expected dtype float32, got float64"),
    ((_readonly(X.astype(np.float64)),), "AOTC_ERR_DTYPE", "input 0 ('x'): expected dtype float32, got float64"),
    ((X.astype(np.int32),), "AOTC_ERR_DTYPE", "input 0 ('x'): expected dtype float32, got int32"),
    ((np.ones((3, 7), np.float32),), "AOTC_ERR_SHAPE", "input 0 ('x'): dimension 1 is 7, expected 8"),
    ((np.ones((3, 8, 1), np.float32),), "AOTC_ERR_RANK", "input 0 ('x'): expected rank 2"),
    ((np.ones((1025, 8), np.float32),), "AOTC_ERR_RANGE", "input 0 ('x'): dimension 0 is 1025, outside the range [1, 1024]"),
    ((np.ones((0, 8), np.float32),), "AOTC_ERR_RANGE", "outside the range [1, 1024]"),
    ((), "AOTC_ERR_INPUT_COUNT", "missing required argument 'x' (the model takes (x))"),
    ((X, X), "AOTC_ERR_INPUT_COUNT", "takes 1 positional argument (x) but 2 were given"),
    ((1.5,), "AOTC_ERR_INVALID_ARGUMENT", "input 0 ('x'): expected a tensor, got a python float"),
    ((X.astype(np.complex64),), "AOTC_ERR_DTYPE", "input 0 ('x'): expected dtype float32, got DLDataType(code=5, bits=64"),
    ((_readonly(X.astype(np.complex64)),), "AOTC_ERR_INVALID_ARGUMENT", "input 0 ('x'): dtype complex64 is not one aotc supports"),
    ((X.astype(">f4"),), "AOTC_ERR_INVALID_ARGUMENT", "big-endian"),
    ((None,), "AOTC_ERR_INVALID_ARGUMENT", "input 0 ('x')"),
])
def test_wrong_input_raises_with_the_message(model, args, status, message):
    with pytest.raises(aotc.Error) as e:
        model(*args)
    assert isinstance(e.value, RuntimeError)
    assert message in str(e.value)
    assert e.value.status == status


def test_the_model_still_works_after_errors(model):
    for bad in [np.ones((3, 7), np.float32), np.ones(3, np.float32)]:
        with pytest.raises(aotc.Error):
            model(bad)
    assert model(X).shape == (3, 4)


class ArrayLike:
    """Only __array__: converted by numpy (a copy the caller does not see)."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


def test_array_likes_and_lists_are_converted_by_numpy(model):
    np.testing.assert_array_equal(model(ArrayLike(X)), model(X))
    # A list becomes numpy's default float64: refused like any float64 array.
    with pytest.raises(aotc.Error, match="expected dtype float32, got float64"):
        model(X.tolist())


def test_load_errors():
    with pytest.raises(aotc.Error, match="no-such.so"):
        aotc.load("/nonexistent/no-such.so")
    with pytest.raises(aotc.Error, match="unknown device 'tpu'"):
        aotc.load("whatever.so", device="tpu")


@pytest.mark.parametrize("args,kwargs,message", [
    ((), {"y": X}, "unexpected keyword argument 'y' (the model takes (x))"),
    ((X,), {"y": X, "z": X}, "unexpected keyword arguments 'y', 'z' (the model takes (x))"),
    ((X,), {"x": X}, "got multiple values for argument 'x' (the model takes (x))"),
    ((X, X, X), {}, "takes 1 positional argument (x) but 3 were given"),
])
def test_wrong_arguments_name_the_parameters(model, args, kwargs, message):
    with pytest.raises(aotc.Error) as e:
        model(*args, **kwargs)
    assert str(e.value) == message
    assert e.value.status == "AOTC_ERR_INPUT_COUNT"


def test_a_positional_parameter_may_be_passed_by_name(model):
    np.testing.assert_array_equal(model(x=X), model(X))


def test_missing_arguments_are_all_named(compiled):
    m = aotc.load(compiled("user_input_mutation"))
    with pytest.raises(aotc.Error, match=r"^missing required arguments 'x', 'y' \(the model takes \(x, y\)\)$"):
        m()
    with pytest.raises(aotc.Error, match=r"^missing required argument 'y' \(the model takes \(x, y\)\)$"):
        m(np.ones((3, 4), np.float32))
    with pytest.raises(aotc.Error, match=r"^takes 2 positional arguments \(x, y\) but 3 were given$"):
        m(X, X, X)


def _with_keyword_arguments(src, dst, positional):
    """A copy of the archive `src` whose call spec passes the arguments after the first
    `positional` by keyword, as torch.export(m, args[:positional], kwargs) writes it."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename.endswith("models/model.json"):
                program = json.loads(data)
                (entry,) = [e for e in program["graph_module"]["module_call_graph"] if e["fqn"] == ""]
                sig = entry["signature"]
                version, root = json.loads(sig["in_spec"])
                args, kwargs = root["children_spec"]
                kwargs["context"] = json.dumps(sig["forward_arg_names"][positional:])
                kwargs["children_spec"] = args["children_spec"][positional:]
                args["children_spec"] = args["children_spec"][:positional]
                sig["in_spec"] = json.dumps([version, root])
                data = json.dumps(program).encode()
            zout.writestr(item, data)


@pytest.fixture(scope="module")
def keyword_model(tmp_path_factory):
    """embedding_mask (forward(tokens, mask)) as if exported with mask passed by keyword."""
    d = helpers.fixture("embedding_mask")
    tmp = tmp_path_factory.mktemp("kwargs")
    _with_keyword_arguments(os.path.join(d, "model.pt2"), str(tmp / "model.pt2"), 1)
    m = aotc.load(aotc.compile(str(tmp / "model.pt2"), str(tmp / "model.so")))
    tokens, mask = helpers.flat_inputs(d, 0, 2)
    return m, tokens, mask, helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))[0], helpers.tolerance(d)


def test_keyword_arguments_of_the_export_are_passed_by_name(keyword_model):
    m, tokens, mask, expected, (rtol, atol) = keyword_model
    assert json.loads(json.loads(m.in_spec)[1]["children_spec"][1]["context"]) == ["mask"]
    helpers.compare("output", expected["0"], m(tokens, mask=mask), rtol, atol)
    helpers.compare("output", expected["0"], m(mask=mask, tokens=tokens), rtol, atol)


@pytest.mark.parametrize("call,message", [
    (lambda m, t, k: m(t), "missing required argument 'mask' (the model takes (tokens, *, mask))"),
    (lambda m, t, k: m(mask=k), "missing required argument 'tokens' (the model takes (tokens, *, mask))"),
    (lambda m, t, k: m(t, k), "takes 1 positional argument (tokens) but 2 were given (the model takes (tokens, *, mask): the others by name)"),
    (lambda m, t, k: m(t, mask=k, other=k), "unexpected keyword argument 'other' (the model takes (tokens, *, mask))"),
])
def test_keyword_parameters_in_errors(keyword_model, call, message):
    m, tokens, mask, *_ = keyword_model
    with pytest.raises(aotc.Error) as e:
        call(m, tokens, mask)
    assert str(e.value) == message
    assert e.value.status == "AOTC_ERR_INPUT_COUNT"
