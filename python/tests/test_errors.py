"""Wrong inputs raise aotc.Error (a RuntimeError) carrying the library's message and
status; nothing crashes."""
import numpy as np
import pytest

import aotc


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
    ((), "AOTC_ERR_INPUT_COUNT", "args: expected 1 elements, got 0"),
    ((X, X), "AOTC_ERR_INPUT_COUNT", "args: expected 1 elements, got 2"),
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
