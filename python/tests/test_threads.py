"""Threads: the GIL is released while a model runs; two instances on two threads run at
once with correct results and separate state; one instance shared by two threads takes
one call at a time (a lock), never mixing them up."""
import os
import threading
import time

import numpy as np
import pytest

import aotc
import helpers


def _run_threads(target, n=2):
    errors = []

    def wrap(t):
        try:
            target(t)
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_two_instances_on_two_threads_keep_results_and_state_apart(compiled):
    d = helpers.fixture("mlp_buffer_mutation")
    rtol, atol = helpers.tolerance(d)
    calls = [(helpers.flat_inputs(d, c, 1)[0], helpers.read_safetensors(os.path.join(d, f"expected_{c}.safetensors"))[0]["0"]) for c in range(2)]
    models = [aotc.load(compiled("mlp_buffer_mutation"), threads=1) for _ in range(2)]

    def work(t):
        m = models[t]
        for rep in range(200):
            m.write_buffer("calls", np.zeros(1, np.float32))
            for c, (x, want) in enumerate(calls):
                helpers.compare(f"thread {t} rep {rep} call {c}", want, m(x), rtol, atol)

    _run_threads(work)


def test_one_instance_shared_by_two_threads_takes_turns(compiled):
    d = helpers.fixture("dynamic_batch_mlp")
    rtol, atol = helpers.tolerance(d)
    m = aotc.load(compiled("dynamic_batch_mlp"))
    # Different batch sizes per thread: interleaved calls would hand one thread the
    # other's outputs (or shapes).
    cases = [(helpers.flat_inputs(d, c, 1)[0], helpers.read_safetensors(os.path.join(d, f"expected_{c}.safetensors"))[0]["0"]) for c in (0, 1)]
    assert cases[0][0].shape != cases[1][0].shape

    def work(t):
        x, want = cases[t]
        for i in range(500):
            helpers.compare(f"thread {t} call {i}", want, m(x), rtol, atol)

    _run_threads(work)


def test_gil_is_released_while_the_model_runs(compiled):
    m = aotc.load(compiled("dynamic_batch_mlp"), threads=1)
    x = np.ones((1024, 8), np.float32)
    per_call = m.bench(x, iters=20, warmup=2)["median_us"]
    iters = max(20, int(0.3e6 / max(per_call, 1.0)))  # about 0.3 s of calls
    done = threading.Event()
    t = threading.Thread(target=lambda: (m.bench(x, iters=iters, warmup=0), done.set()))
    spins = 0
    t.start()
    start = time.perf_counter()
    while not done.is_set():
        spins += 1
    elapsed = time.perf_counter() - start
    t.join()
    # With the GIL held for the whole bench this loop could not run until it ended.
    assert elapsed > 0.1, f"the bench took only {elapsed:.3f} s: no test"
    assert spins > 10_000, f"the main thread ran {spins} times in {elapsed:.3f} s"
