"""Every model fixture (tests/fixtures and its models/ folder), compiled with
aotc.compile and called through aotc.load like the exported module, matches the outputs
(and mutated inputs) PyTorch recorded, with the Rust tests' tolerances."""
import os

import numpy as np
import pytest

import aotc
import helpers

FIXTURES = helpers.fixture_dirs()
EXPECTED = {"dynamic_batch_mlp", "mlp_buffer_mutation", "pytree_io", "user_input_mutation", "small_cnn",
            "transformer_block", "vit_tiny", "t5_tiny_dynseq", "unet_block_dynhw"}


def test_the_fixtures_are_found():
    # The parametrised test below must not silently shrink.
    assert EXPECTED <= {name for name, _ in FIXTURES}


@pytest.mark.parametrize("name,d", FIXTURES, ids=[n for n, _ in FIXTURES])
def test_fixture_matches_pytorch(name, d, compiled):
    m = aotc.load(compiled(name))
    rtol, atol = helpers.tolerance(d)
    compared = 0
    for call in range(helpers.info(d)["calls"]):
        leaves = helpers.flat_inputs(d, call, len(m.inputs))
        outs = helpers.call_with_flat(m, leaves)
        expected, _ = helpers.read_safetensors(os.path.join(d, f"expected_{call}.safetensors"))
        assert len(outs) == len(expected), f"call {call}: {len(outs)} outputs, PyTorch gave {len(expected)}"
        for k, want in expected.items():
            helpers.compare(f"call {call} output {k}", want, outs[int(k)], rtol, atol)
            compared += 1
        mutated = os.path.join(d, f"mutated_{call}.safetensors")
        if os.path.exists(mutated):
            for k, want in helpers.read_safetensors(mutated)[0].items():
                got = leaves[int(k)]
                assert isinstance(got, np.ndarray), f"mutated input {k} is not a tensor input"
                helpers.compare(f"call {call} mutated input {k}", want, got, rtol, atol)
                compared += 1
    assert compared > 0
