import os

import pytest

import aotc
import helpers


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """compiled(name) -> path of the fixture's model.pt2 compiled once per session."""
    cache = {}
    out = tmp_path_factory.mktemp("compiled")

    def get(name):
        if name not in cache:
            d = helpers.fixture(name)
            cache[name] = aotc.compile(os.path.join(d, "model.pt2"), str(out / f"{name}.so"))
        return cache[name]

    return get
