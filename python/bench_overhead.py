"""Python call overhead: median time of m(x) from Python against the library's own time
(m.bench: inputs converted once, no outputs made) and the Rust loader (`aotc bench`:
Model::run, outputs copied into Rust tensors), on a trivial model, one thread, runs
interleaved so that all three see the same machine load.

usage: python bench_overhead.py [FIXTURE_DIR]   (default: tests/fixtures/mlp_buffer_mutation)
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import aotc
from aotc._paths import cli_binary

N = 20000


def python_median_us(m, x):
    ts = []
    for _ in range(N):
        t = time.perf_counter_ns()
        m(x)
        ts.append(time.perf_counter_ns() - t)
    return statistics.median(ts) / 1e3


def rust_median_us(so, inputs):
    out = subprocess.run([cli_binary(), "bench", so, "--input", inputs, "--iters", str(N), "--warmup", "1000", "--threads", "1", "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["median_ms"] * 1e3


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    fixture = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "fixtures", "mlp_buffer_mutation")
    with tempfile.TemporaryDirectory() as tmp:
        so = aotc.compile(os.path.join(fixture, "model.pt2"), os.path.join(tmp, "m.so"))
        m = aotc.load(so, threads=1)
        info = m.inputs[0]
        x = np.random.default_rng(0).standard_normal(info["shape"]).astype(info["dtype"])
        for _ in range(1000):
            m(x)
        print("median us per call:  python m(x) | library (m.bench) | rust loader (aotc bench)")
        for _ in range(5):
            py = python_median_us(m, x)
            lib = m.bench(x, iters=N, warmup=1000)["median_us"]
            rust = rust_median_us(so, os.path.join(fixture, "inputs_0.safetensors"))
            print(f"                     {py:12.2f} | {lib:17.2f} | {rust:24.2f}")


if __name__ == "__main__":
    main()
