"""Non-contiguous inputs (views: transposed, sliced, reversed, broadcast, record fields)
give exactly the results of their contiguous copies."""
import numpy as np
import pytest

import aotc
import helpers


@pytest.fixture(scope="module")
def model(compiled):
    return aotc.load(compiled("dynamic_batch_mlp"))


def _x(rows=6):
    return np.random.default_rng(0).standard_normal((rows, 8)).astype(np.float32)


def _wide(x):
    w = np.zeros((x.shape[0], 16), np.float32)
    w[:, ::2] = x
    return w[:, ::2]


def _fields(x):
    rec = np.zeros(x.shape, dtype=np.dtype([("a", "<f4"), ("b", "u1")]))  # 5-byte records
    rec["a"] = x
    return rec["a"]


VIEWS = {
    "fortran_order": lambda x: np.asfortranarray(x),
    "transposed": lambda x: np.ascontiguousarray(x.T).T,
    "every_other_column": _wide,
    "every_third_row": lambda x: np.concatenate([x, x, x])[::3],
    "reversed_rows": lambda x: x[::-1],
    "reversed_both": lambda x: x[::-1, ::-1],
    "broadcast_row": lambda x: np.broadcast_to(x[0], x.shape),
    "record_field": _fields,
}


@pytest.mark.parametrize("view", list(VIEWS), ids=list(VIEWS))
def test_view_gives_the_contiguous_result(model, view):
    v = VIEWS[view](_x())
    assert not v.flags.c_contiguous, "the case must really be strided"
    contiguous = np.ascontiguousarray(v)
    np.testing.assert_array_equal(model(v), model(contiguous))
    np.testing.assert_array_equal(v, contiguous)  # inputs the program does not mutate stay as they were


def test_strided_matches_pytorch(model):
    d = helpers.fixture("dynamic_batch_mlp")
    import os
    x = helpers.flat_inputs(d, 1, 1)[0]
    want = helpers.read_safetensors(os.path.join(d, "expected_1.safetensors"))[0]["0"]
    helpers.compare("transposed view", want, model(np.asfortranarray(x)), *helpers.tolerance(d))


def test_record_field_mutated_input_is_copied_back(compiled):
    import os
    d = helpers.fixture("user_input_mutation")
    m = aotc.load(compiled("user_input_mutation"))
    x, y = helpers.flat_inputs(d, 0, 2)
    mutated, _ = helpers.read_safetensors(os.path.join(d, "mutated_0.safetensors"))
    rtol, atol = helpers.tolerance(d)
    xv = _fields(x)
    m(xv, y.copy())
    helpers.compare("x through its record field", mutated["0"], np.ascontiguousarray(xv), rtol, atol)
