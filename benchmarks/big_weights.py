#!/usr/bin/env python3
"""A synthetic model with more than 2.5 GB of float32 weights, compiled and run by aotc.

At its default size not part of CI (it writes ~2.7 GB twice; its page cache is the memory
it needs); tests/tests/compile_memory.rs runs it at --hidden 4096 (168 MB). No torch or
numpy: the program is tests/fixtures/dynamic_batch_mlp's graph (Linear, GELU, Linear,
log_softmax) with its sizes rewritten, saved as a bare model.json, and its weights are a
safetensors file passed with --weights. The weights repeat a block of random floats, so
that the reference output is cheap to compute in plain Python: rows of l1.weight repeat
every BLOCK / IN rows, rows of l2.weight every BLOCK / H rows.

    usage: benchmarks/big_weights.py [--aotc target/release/aotc] [--dir /tmp/aotc-big]
                                     [--hidden 65536] [--embed] [--external]

Reports, for the library compiled with no placement flag (weights outside: chosen
automatically above 1 GiB):
compile time and peak RSS (of the compiler and the linker it runs, the larger) and its
ratio to the weights, load time (dlopen + create: map and
check the file), the first and second call, and the peak RSS of the process that ran it.
--embed also compiles the same program with the weights linked into the library
(--embed-weights), which takes at most 2 GiB of them: --hidden 32768 --embed (1.34 GB);
--external with the weights beside it (--external-weights), whatever their size.
--hidden divides 2^20 or is a multiple of it (the reference relies on the repetition).
"""
import argparse
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN, OUT = 8192, 2048
BLOCK = 1 << 20  # floats per repeated block (4 MiB)


def template():
    with zipfile.ZipFile(os.path.join(ROOT, "tests/fixtures/dynamic_batch_mlp/model.pt2")) as z:
        name = next(n for n in z.namelist() if n.endswith("models/model.json"))
        return json.loads(z.read(name))


def resize(program, hidden):
    """The fixture's MLP (8 -> 24 -> 4) as IN -> hidden -> OUT."""
    sizes = {8: IN, 24: hidden, 4: OUT}
    for meta in program["graph_module"]["graph"]["tensor_values"].values():
        dims = [s["as_int"] if "as_int" in s else None for s in meta["sizes"]]
        meta["sizes"] = [{"as_int": sizes[d]} if d is not None else s for d, s in zip(dims, meta["sizes"])]
        # Contiguous (or the permute's transposed) strides for the new sizes.
        static = [s.get("as_int") for s in meta["sizes"]]
        old = [s.get("as_int") for s in meta["strides"]]
        if len(static) == 2 and old == [1, dims[0]] and dims[0] is not None:
            meta["strides"] = [{"as_int": 1}, {"as_int": static[0]}]
        elif len(static) == 2:
            meta["strides"] = [{"as_int": static[1]}, {"as_int": 1}]
        else:
            meta["strides"] = [{"as_int": 1}]
    return program


def block(seed, scale):
    rng = random.Random(seed)
    return [rng.uniform(-scale, scale) for _ in range(BLOCK)]


def write_weights(path, hidden, blocks):
    """l1.weight [hidden, IN], l1.bias, l2.weight [OUT, hidden], l2.bias: each the
    repetition of its block."""
    tensors = [("l1.weight", [hidden, IN], blocks[0]), ("l1.bias", [hidden], blocks[1]),
               ("l2.weight", [OUT, hidden], blocks[2]), ("l2.bias", [OUT], blocks[3])]
    header, at = {}, 0
    for name, shape, _ in tensors:
        n = math.prod(shape) * 4
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, values in tensors:
            n = math.prod(shape)
            chunk = struct.pack(f"<{min(n, BLOCK)}f", *values[:min(n, BLOCK)])
            for _ in range(n // BLOCK):
                f.write(chunk)
            f.write(chunk[: (n % BLOCK) * 4])
    return at


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def reference(x, hidden, blocks):
    """log_softmax(gelu(x @ W1.T + b1) @ W2.T + b2) for the repeated weights, in float64."""
    w1, b1, w2, b2 = blocks
    period1 = BLOCK // IN  # rows of l1.weight before it repeats
    out = []
    for row in x:
        h1 = []
        for r in range(period1):
            base = r * IN
            h1.append(sum(row[i] * w1[base + i] for i in range(IN)))
        h = [h1[j % period1] + b1[j % BLOCK] for j in range(hidden)]
        g = [0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in h]
        period2 = BLOCK // hidden if hidden <= BLOCK else 1
        logits2 = []
        for r in range(min(OUT, period2) if hidden <= BLOCK else OUT):
            base = (r * hidden) % BLOCK
            logits2.append(sum(g[j] * w2[(base + j) % BLOCK] for j in range(hidden)))
        logits = [logits2[o % len(logits2)] + b2[o % BLOCK] for o in range(OUT)]
        m = max(logits)
        lse = m + math.log(sum(math.exp(v - m) for v in logits))
        out.append([v - lse for v in logits])
    return out


def write_inputs(path, x):
    data = struct.pack(f"<{len(x) * IN}f", *[v for row in x for v in row])
    header = json.dumps({"0": {"dtype": "F32", "shape": [len(x), IN], "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-(8 + len(header)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


def read_output(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    t = header["0"]
    b, e = t["data_offsets"]
    vals = struct.unpack(f"<{(e - b) // 4}f", data[b:e])
    rows, cols = t["shape"]
    return [list(vals[r * cols:(r + 1) * cols]) for r in range(rows)]


def polled(argv):
    """Runs argv, sampling /proc/PID/status every 5 ms: (stdout, peak RssAnon MiB, peak
    RssFile MiB). File-backed pages (a mapped weights file) are the page cache's, shared
    by every process that maps the file; anonymous ones are the process's own."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = {"RssAnon": 0, "RssFile": 0}
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    key = line.split(":")[0]
                    if key in peak:
                        peak[key] = max(peak[key], int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
        time.sleep(0.005)
    out, err = p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}):\n{err}{out}")
    return out, peak["RssAnon"] / 1024, peak["RssFile"] / 1024


# Runs argv and reports the largest peak RSS of its processes (the compiler, the linker it
# starts), from a process of its own so that no earlier command counts.
PEAK = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
        "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
        "sys.exit(p.returncode)")


def measured(argv):
    """argv's (seconds, peak RSS MiB, stdout)."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", PEAK] + argv, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stderr[-4000:]}{p.stdout[-2000:]}")
    rss = int(re.search(r"peak_rss_kib (\d+)", p.stderr).group(1)) / 1024
    return seconds, rss, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aotc", default=os.path.join(ROOT, "target/release/aotc"))
    ap.add_argument("--dir", default="/tmp/aotc-big")
    ap.add_argument("--hidden", type=int, default=65536)
    ap.add_argument("--embed", action="store_true", help="also try the weights linked into the library")
    ap.add_argument("--external", action="store_true", help="also try the weights beside it (automatic past 1 GiB)")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    d = lambda name: os.path.join(args.dir, name)
    hidden = args.hidden
    assert BLOCK % IN == 0 and (BLOCK % hidden == 0 or hidden % BLOCK == 0)

    with open(d("model.json"), "w") as f:
        json.dump(resize(template(), hidden), f)
    blocks = [block(1, 1 / math.sqrt(IN)), block(2, 0.1), block(3, 1 / math.sqrt(hidden)), block(4, 0.1)]
    t = time.perf_counter()
    total = write_weights(d("fqn.safetensors"), hidden, blocks)
    print(f"weights: {total / 1e9:.2f} GB ({total / 2**30:.2f} GiB) written in {time.perf_counter() - t:.1f} s")
    x = [[random.Random(10 + r).uniform(-1, 1) for _ in range(IN)] for r in range(2)]
    write_inputs(d("inputs.safetensors"), x)
    want = reference(x, hidden, blocks)

    results = {"weights_bytes": total}
    modes = [("auto", []), ("embedded", ["--embed-weights"]), ("external", ["--external-weights"])]
    for mode, flags in [m for m, wanted in zip(modes, [True, args.embed, args.external]) if wanted]:
        so = d(f"{mode}.so")
        for f in [so, d(f"{mode}.weights.safetensors")]:
            if os.path.exists(f):
                os.remove(f)
        try:
            secs, rss, out = measured([args.aotc, "compile", d("model.json"), "--weights", d("fqn.safetensors"), "-o", so, "-v"] + flags)
        except RuntimeError as e:
            print(f"{mode}: compile failed:\n{str(e)[-1500:]}")
            results[mode] = {"compile": "failed", "error": str(e)[-600:]}
            continue
        stages = {m.group(1): float(m.group(2)) for m in re.finditer(r"^  (\w+)\s+([\d.]+) ms$", out, re.M)}
        ratio = rss * 2**20 / total
        print(f"{mode}: compiled in {secs:.1f} s, peak RSS {rss:.0f} MiB ({ratio:.2f}x the weights): {out.splitlines()[0]}")
        print(f"{mode}: stages (ms): {stages}")
        so_size = os.path.getsize(so)
        wfile = d(f"{mode}.weights.safetensors")
        r = {"compile_s": round(secs, 2), "compile_stages_ms": stages, "compile_peak_rss_mib": round(rss),
             "compile_peak_rss_vs_weights": round(ratio, 3), "so_bytes": so_size,
             "weights_file_bytes": os.path.getsize(wfile) if os.path.exists(wfile) else None}
        try:
            secs, rss, out = measured([args.aotc, "run", so, "--input", d("inputs.safetensors"), "--input", d("inputs.safetensors"), "--output-dir", d(f"out_{mode}")])
        except RuntimeError as e:
            print(f"{mode}: run failed:\n{str(e)[-1500:]}")
            r["run"] = "failed"
            results[mode] = r
            continue
        _, anon, filed = polled([args.aotc, "run", so, "--input", d("inputs.safetensors"), "--output-dir", d(f"out_{mode}_polled")])
        r.update({"run_peak_rss_anon_mib": round(anon), "run_peak_rss_file_mib": round(filed)})
        print(f"{mode}: run peak RssAnon {anon:.0f} MiB, RssFile {filed:.0f} MiB (sampled every 5 ms)")
        load_ms = float(re.search(r"loaded .* in ([\d.]+) ms", out).group(1))
        calls = [float(v) for v in re.findall(r"output\(s\) in ([\d.]+) ms", out)]
        got = read_output(os.path.join(d(f"out_{mode}"), "outputs_0.safetensors"))
        err = max(abs(a - b) for ra, rb in zip(got, want) for a, b in zip(ra, rb))
        r.update({"load_ms": load_ms, "first_call_ms": calls[0], "second_call_ms": calls[1], "run_peak_rss_mib": round(rss),
                  "run_wall_s": round(secs, 2), "max_abs_error_vs_reference": err})
        print(f"{mode}: load {load_ms:.1f} ms, calls {calls[0]:.0f} / {calls[1]:.0f} ms, peak RSS {rss:.0f} MiB, max |error| {err:.2e}")
        if err > 1e-3:
            print(f"{mode}: outputs differ from the reference", file=sys.stderr)
            r["ok"] = False
        results[mode] = r
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
