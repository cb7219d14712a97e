"""The Ray Serve example against PyTorch's recorded outputs: a local Ray cluster, the
dynamic-batch MLP fixture (tests/fixtures/dynamic_batch_mlp) compiled and served by 1 and
by 2 replicas, 1,000 concurrent requests of one row each, every answer compared with the
row PyTorch recorded; then a rolling upgrade to a second library file while requests keep
coming, with no failed request. Prints the throughput of each configuration."""
import os
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python", "tests"))

ray = pytest.importorskip("ray")
from ray import serve  # noqa: E402

import aotc  # noqa: E402
import helpers  # noqa: E402
from serve_model import app  # noqa: E402

FIXTURE = os.path.join(REPO, "tests", "fixtures", "dynamic_batch_mlp")
REQUESTS = 1000


def rows_and_expected():
    """Every row of every recorded call, with PyTorch's output row."""
    rows, want = [], []
    for call in range(helpers.info(FIXTURE)["calls"]):
        inputs, _ = helpers.read_safetensors(os.path.join(FIXTURE, f"inputs_{call}.safetensors"))
        expected, _ = helpers.read_safetensors(os.path.join(FIXTURE, f"expected_{call}.safetensors"))
        rows += list(inputs["0"])
        want += list(expected["0"])
    return rows, want


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    d = tmp_path_factory.mktemp("ray_serve")
    v1 = aotc.compile(os.path.join(FIXTURE, "model.pt2"), str(d / "mlp_v1.so"))
    v2 = aotc.compile(os.path.join(FIXTURE, "model.pt2"), str(d / "mlp_v2.so"))
    # The replicas import serve_model from this folder.
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}})
    yield str(v1), str(v2)
    serve.shutdown()
    ray.shutdown()


def send(handle, rows, count):
    """`count` requests at once, cycling over `rows`: their (library, output row) answers."""
    responses = [handle.remote(rows[i % len(rows)]) for i in range(count)]
    return [r.result(timeout_s=120) for r in responses]


def check(answers, want, count):
    rtol, atol = helpers.tolerance(FIXTURE)
    for i, (_, got) in enumerate(answers):
        helpers.compare(f"request {i}", want[i % len(want)], got, rtol, atol)
    assert len(answers) == count


@pytest.mark.parametrize("replicas", [1, 2])
def test_concurrent_requests_match_pytorch(libraries, replicas):
    v1, _ = libraries
    rows, want = rows_and_expected()
    handle = serve.run(app(v1, replicas=replicas), name=f"mlp{replicas}", route_prefix=None)
    send(handle, rows, 64)  # replicas up, instances warm
    start = time.perf_counter()
    answers = send(handle, rows, REQUESTS)
    elapsed = time.perf_counter() - start
    check(answers, want, REQUESTS)
    print(f"\nray serve, {replicas} replica(s): {REQUESTS} requests in {elapsed:.2f} s, "
          f"{REQUESTS / elapsed:.0f} requests/s")
    serve.delete(f"mlp{replicas}")


def test_a_rolling_upgrade_fails_no_request(libraries):
    v1, v2 = libraries
    rows, want = rows_and_expected()
    handle = serve.run(app(v1, replicas=2), name="rolling", route_prefix=None)
    pending = [handle.remote(rows[i % len(rows)]) for i in range(300)]
    serve.run(app(v1, replicas=2, version_library=v2), name="rolling", route_prefix=None)
    pending += [handle.remote(rows[i % len(rows)]) for i in range(300, 600)]
    answers = [r.result(timeout_s=120) for r in pending]
    check(answers, want, 600)
    served = {lib for lib, _ in answers}
    assert v2 in served, f"the new version served no request: {served}"
    after = send(handle, rows, 50)
    assert {lib for lib, _ in after} == {v2}, "after the upgrade only the new version serves"
    serve.delete("rolling")
