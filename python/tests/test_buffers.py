"""Buffers (model state) carry across calls (tests/fixtures/mlp_buffer_mutation: the
buffer 'calls' counts calls and scales the output), and can be read and written."""
import os

import numpy as np
import pytest

import aotc
import helpers


@pytest.fixture
def case(compiled):
    d = helpers.fixture("mlp_buffer_mutation")
    calls = [(helpers.flat_inputs(d, c, 1)[0], helpers.read_safetensors(os.path.join(d, f"expected_{c}.safetensors"))[0]["0"]) for c in range(2)]
    return aotc.load(compiled("mlp_buffer_mutation")), calls, helpers.tolerance(d)


def test_state_carries_over_calls(case):
    m, calls, (rtol, atol) = case
    assert m.buffers == [{"name": "calls", "kind": "tensor", "dtype": "float32", "shape": (1,), "dynamic": {}}]
    np.testing.assert_array_equal(m.read_buffer("calls"), np.array([0.0], np.float32))
    for i, (x, want) in enumerate(calls):
        helpers.compare(f"call {i}", want, m(x), rtol, atol)
    np.testing.assert_array_equal(m.read_buffer("calls"), np.array([2.0], np.float32))


def test_instances_do_not_share_state(case, compiled):
    m, calls, (rtol, atol) = case
    m(calls[0][0])
    other = aotc.load(compiled("mlp_buffer_mutation"))
    helpers.compare("fresh instance, first call", calls[0][1], other(calls[0][0]), rtol, atol)
    np.testing.assert_array_equal(m.read_buffer("calls"), [1.0])


def test_write_buffer_sets_the_state_of_the_next_call(case):
    m, calls, (rtol, atol) = case
    m(calls[0][0])
    m(calls[0][0])
    m.write_buffer("calls", np.zeros(1, np.float32))
    helpers.compare("after reset", calls[0][1], m(calls[0][0]), rtol, atol)
    # Strided source: the middle element of a reversed array.
    m.write_buffer("calls", np.array([1.0, 7.0, 3.0], np.float32)[::-2][1:])
    helpers.compare("calls=1 again", calls[1][1], m(calls[1][0]), rtol, atol)


def test_failed_call_leaves_state_unchanged(case):
    m, calls, _ = case
    m(calls[0][0])
    with pytest.raises(aotc.Error, match=r"input 0 \('x'\): dimension 0 is 5, expected 4") as e:
        m(np.ones((5, 16), np.float32))
    assert e.value.status == "AOTC_ERR_SHAPE" and e.value.code == 5
    np.testing.assert_array_equal(m.read_buffer("calls"), [1.0])


def test_buffer_errors_carry_the_librarys_message(case):
    m, _, _ = case
    with pytest.raises(aotc.Error, match=r"buffer 'calls': expected shape \[1\], got \[2\]") as e:
        m.write_buffer("calls", np.zeros(2, np.float32))
    assert e.value.status == "AOTC_ERR_SHAPE"
    with pytest.raises(aotc.Error, match="expected dtype float32, got float64") as e:
        m.write_buffer("calls", np.zeros(1, np.float64))
    assert e.value.status == "AOTC_ERR_DTYPE"
    with pytest.raises(aotc.Error, match="no buffer named 'nope'") as e:
        m.read_buffer("nope")
    assert e.value.status == "AOTC_ERR_NOT_FOUND"
    np.testing.assert_array_equal(m.read_buffer("calls"), [0.0])
