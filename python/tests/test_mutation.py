"""User inputs the program mutates (tests/fixtures/user_input_mutation) are written back
into the caller's numpy arrays, in place: contiguous or not."""
import os

import numpy as np
import pytest

import aotc
import helpers


@pytest.fixture(scope="module")
def case(compiled):
    d = helpers.fixture("user_input_mutation")
    x, y = helpers.flat_inputs(d, 0, 2)
    mutated, _ = helpers.read_safetensors(os.path.join(d, "mutated_0.safetensors"))
    expected, _ = helpers.read_safetensors(os.path.join(d, "expected_0.safetensors"))
    return aotc.load(compiled("user_input_mutation")), x, y, mutated, expected, helpers.tolerance(d)


def test_mutated_inputs_are_the_callers_arrays(case):
    m, x, y, mutated, expected, (rtol, atol) = case
    assert m.mutated_inputs == [0, 1]
    x, y = x.copy(), y.copy()
    x_id, y_ptr = id(x), y.__array_interface__["data"][0]
    out = m(x, y)
    helpers.compare("output", expected["0"], out, rtol, atol)
    assert id(x) == x_id and y.__array_interface__["data"][0] == y_ptr
    helpers.compare("x after the call", mutated["0"], x, rtol, atol)
    helpers.compare("y after the call", mutated["1"], y, rtol, atol)


def test_strided_mutated_input_is_written_back_through_its_strides(case):
    m, x, y, mutated, expected, (rtol, atol) = case
    # x as a transposed view of a Fortran-ordered array, y as every other column of a
    # wider array: the writes must land in those elements only.
    xf = np.asfortranarray(x.copy())
    wide = np.full((y.shape[0], 2 * y.shape[1]), -7.0, dtype=y.dtype)
    wide[:, ::2] = y
    ys = wide[:, ::2]
    assert not xf.flags.c_contiguous and not ys.flags.c_contiguous
    out = m(xf, ys)
    helpers.compare("output", expected["0"], out, rtol, atol)
    helpers.compare("x after the call", mutated["0"], xf, rtol, atol)
    helpers.compare("y after the call", mutated["1"], ys, rtol, atol)
    assert (wide[:, 1::2] == -7.0).all(), "elements between the strided ones were written"


def test_read_only_array_cannot_be_mutated(case):
    m, x, y, *_ = case
    x = x.copy()
    before = x.copy()
    x.flags.writeable = False
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\).*read-only"):
        m(x, y.copy())
    assert (x == before).all()


def test_input_whose_elements_share_memory_cannot_be_mutated(case):
    # A stride of 0 (numpy's broadcast_to is read-only; as_strided is not): torch refuses
    # an in-place write to such a tensor ("more than one element of the written-to tensor
    # refers to a single memory location"), and so does the call, before running.
    m, x, y, *_ = case
    base = np.array([1.5], dtype=x.dtype)
    shared = np.lib.stride_tricks.as_strided(base, shape=x.shape, strides=(0, 0))
    assert shared.flags.writeable
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\).*share one memory location"):
        m(shared, y.copy())
    assert base[0] == 1.5
    # Size-1 dimensions may have any stride: nothing is shared.
    row = np.lib.stride_tricks.as_strided(x.copy(), shape=x.shape, strides=(x.shape[1] * x.itemsize, x.itemsize))
    m(row, y.copy())
