#!/usr/bin/env python3
"""The GPU check (issue 24): every fixture on cuda:0 against PyTorch's recorded outputs,
compute-sanitizer on a few models, and `aotc bench --device cuda:0` beside torch eager,
torch.compile and AOTInductor. One report, gpu_check.md (and .json), in --out.

Run through scripts/gpu_check.sh, which finds the aotc binary. Standard library only,
except the timing of torch (imported when present), so that --dry-run works anywhere:
there it runs a sample of the fixtures on the fake driver (the PTX interpreter), skips
what the machine lacks, and fails if any fixture it ran fails.

Each phase has a share of --budget seconds and stops starting work when it is spent;
the report is rewritten after every phase, so a run cut short still leaves one.
"""
import argparse
import concurrent.futures
import json
import math
import os
import platform
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
SANITIZED = ["small_cnn", "transformer_block", "mlp_buffer_mutation"]
BENCH_FIXTURES = ["bench_mlp_slim", "bench_convnet", "transformer_block"]
DRY_RUN_MODELS = ["small_cnn", "transformer_block", "mlp_buffer_mutation", "pytree_io", "inplace/buffer_slice", "bench_mlp_slim"]

# ---------------------------------------------------------------- safetensors, compare

FORMATS = {"F32": "f", "F64": "d", "F16": "e", "I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "BOOL": "?"}
FLOATS = ("F32", "F64", "F16", "BF16")


def read_safetensors(path):
    """{key: (dtype, shape, values)}, values as a flat Python list."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    tensors = {}
    for key, v in header.items():
        if key == "__metadata__":
            continue
        a, b = v["data_offsets"]
        raw, dt = body[a:b], v["dtype"]
        if dt == "BF16":  # the high half of an f32
            halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
            vals = list(struct.unpack("<%df" % len(halves), struct.pack("<%dI" % len(halves), *[h << 16 for h in halves])))
        else:
            c = FORMATS[dt]
            vals = list(struct.unpack("<%d%s" % (len(raw) // struct.calcsize(c), c), raw))
        tensors[key] = (dt, list(v["shape"]), vals)
    return tensors


def first_mismatch(dt, want, got, rtol, atol):
    """The first element out of tolerance, as (index, want, got), or None. Same rule as the
    Rust tests (tests/src/lib.rs compare): |got - want| <= atol + rtol * |want|, NaN == NaN,
    exact for integers and booleans and infinities."""
    for i, (w, g) in enumerate(zip(want, got)):
        if w == g:
            continue
        if dt in FLOATS:
            if math.isnan(w) and math.isnan(g):
                continue
            if not (math.isinf(w) or math.isinf(g)) and abs(w - g) <= atol + rtol * abs(w):
                continue
        return i, w, g
    return None


def compare_call(fixture, out_dir, call, rtol, atol):
    """Errors (strings) of one call's outputs and mutated inputs against the fixture's."""
    errors = []
    pairs = [(f"expected_{call}.safetensors", f"outputs_{call}.safetensors", "output")]
    if os.path.exists(os.path.join(fixture, f"mutated_{call}.safetensors")):
        pairs.append((f"mutated_{call}.safetensors", f"mutated_{call}.safetensors", "mutated input"))
    for want_file, got_file, what in pairs:
        got_path = os.path.join(out_dir, got_file)
        if not os.path.exists(got_path):
            errors.append(f"call {call}: no {got_file} written")
            continue
        want, got = read_safetensors(os.path.join(fixture, want_file)), read_safetensors(got_path)
        for key, (dt, shape, vals) in want.items():
            if key not in got:
                errors.append(f"call {call} {what} {key}: missing")
                continue
            gdt, gshape, gvals = got[key]
            if (gdt, gshape) != (dt, shape):
                errors.append(f"call {call} {what} {key}: got {gdt}{gshape}, want {dt}{shape}")
                continue
            bad = first_mismatch(dt, vals, gvals, rtol, atol)
            if bad:
                errors.append(f"call {call} {what} {key}: element {bad[0]}: want {bad[1]}, got {bad[2]} (rtol {rtol}, atol {atol})")
    return errors


# ---------------------------------------------------------------- fixtures on the device


def fixture_dirs():
    """(name, path) of every fixture with recorded outputs, models first, then ops."""
    found = []
    for dirpath, dirnames, files in os.walk(FIXTURES):
        dirnames.sort()
        if "model.pt2" in files and "expected_0.safetensors" in files:
            found.append((os.path.relpath(dirpath, FIXTURES), dirpath))
    return sorted(found, key=lambda f: (f[0].startswith("ops/"), f[0]))


def tolerance(info):
    t = info.get("tolerance")
    return (float(t["rtol"]), float(t["atol"])) if t else (1e-3, 1e-4)


def run(cmd, timeout, env=None):
    """(ok, seconds, combined output tail)."""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, env=env)
        out = p.stdout.decode(errors="replace")[-1500:]
        if p.returncode < 0:  # a crash says nothing itself: name the signal
            out += f"\nkilled by signal {-p.returncode}"
        return p.returncode == 0, time.time() - t0, out
    except subprocess.TimeoutExpired:
        return False, time.time() - t0, f"timed out after {timeout} s"


def check_fixture(args, name, path):
    info = json.load(open(os.path.join(path, "info.json")))
    work = os.path.join(args.work, name.replace("/", "__"))
    os.makedirs(work, exist_ok=True)
    lib = os.path.join(work, "model.so")
    result = {"name": name, "status": "fail", "error": "", "compile_s": None, "run_s": None}
    ok, secs, log = run([args.aotc, "compile", "--device", "cuda", os.path.join(path, "model.pt2"), "-o", lib], 120)
    result["compile_s"] = round(secs, 3)
    if not ok:
        result.update(status="compile error", error=log.strip().splitlines()[-1] if log.strip() else "no output")
        return result
    calls = int(info.get("calls", 1))
    inputs = [a for c in range(calls) for a in ("--input", os.path.join(path, f"inputs_{c}.safetensors"))]
    ok, secs, log = run([args.aotc, "run", lib, *inputs, "--device", "cuda:0", "--output-dir", work], 120)
    result["run_s"] = round(secs, 3)
    if not ok:
        result.update(status="run error", error=" | ".join(log.strip().splitlines()[-3:]))
        return result
    rtol, atol = tolerance(info)
    errors = [e for c in range(calls) for e in compare_call(path, work, c, rtol, atol)]
    if errors:
        result.update(status="mismatch", error="; ".join(errors[:3]))
    else:
        result["status"] = "pass"
    return result


def phase_fixtures(args, report, deadline):
    fixtures = fixture_dirs()
    if args.skip:  # the fixtures an earlier report already has (a rerun finishing a cut-short check)
        done = {r["name"] for r in json.load(open(args.skip))["fixtures"]["results"]}
        fixtures = [f for f in fixtures if f[0] not in done]
    if args.dry_run:
        ops = [f for f in fixtures if f[0].startswith("ops/")]
        fixtures = [f for f in fixtures if f[0] in DRY_RUN_MODELS] + ops[:: max(1, len(ops) // 12)]
    results, skipped = [], 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        pending = set()
        queue = list(fixtures)
        while queue or pending:
            while queue and len(pending) < 2 * args.jobs and time.time() < deadline:
                name, path = queue.pop(0)
                pending.add(pool.submit(check_fixture, args, name, path))
            if time.time() >= deadline:
                skipped, queue = skipped + len(queue), []
            if not pending:
                break
            done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for d in done:
                r = d.result()
                results.append(r)
                if r["status"] != "pass":
                    print(f"FAIL {r['name']}: {r['status']}: {r['error'][:300]}", flush=True)
    results.sort(key=lambda r: r["name"])
    report["fixtures"] = {"results": results, "not_run_for_time": skipped}
    print(f"fixtures: {sum(r['status'] == 'pass' for r in results)} of {len(results)} pass, {skipped} not run (time)", flush=True)


# ---------------------------------------------------------------- compute-sanitizer


def phase_sanitizer(args, report, deadline):
    tool = shutil.which("compute-sanitizer") or next(
        (p for p in ["/usr/local/cuda/bin/compute-sanitizer"] if os.path.exists(p)), None)
    rows = []
    report["sanitizer"] = {"tool": tool, "rows": rows}
    if not tool:
        print("compute-sanitizer: not installed here, skipped", flush=True)
        return
    for name in SANITIZED:
        lib = os.path.join(args.work, name, "model.so")
        if not os.path.exists(lib):
            rows.append({"model": name, "tool": "-", "result": "not compiled"})
            continue
        for check in ["memcheck", "racecheck"]:
            if time.time() > deadline:
                rows.append({"model": name, "tool": check, "result": "not run (time)"})
                continue
            cmd = [tool, "--tool", check, "--error-exitcode", "9", args.aotc, "run", lib,
                   "--input", os.path.join(FIXTURES, name, "inputs_0.safetensors"), "--device", "cuda:0",
                   "--output-dir", os.path.join(args.work, name, check)]
            ok, secs, log = run(cmd, max(10, min(90, deadline - time.time())))
            summary = [l for l in log.splitlines() if "ERROR SUMMARY" in l or "RACECHECK SUMMARY" in l]
            rows.append({"model": name, "tool": check, "result": ("clean" if ok else "FAILED"),
                         "summary": (summary[-1].strip() if summary else log.strip()[-300:]), "seconds": round(secs, 1)})
            print(f"sanitizer {check} {name}: {rows[-1]['result']}: {rows[-1]['summary']}", flush=True)


# ---------------------------------------------------------------- timings


def aotc_bench(args, lib, inputs, iters):
    ok, _, log = run([args.aotc, "bench", lib, "--input", inputs, "--device", "cuda:0", "--json",
                      "--iters", str(iters), "--warmup", str(min(10, iters))], 120)
    if not ok:
        return None, log.strip().splitlines()[-1] if log.strip() else "failed"
    return json.loads(log[log.index("{"):])["median_ms"], ""


def torch_median_ms(torch, fn, args_, iters):
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    with torch.no_grad():
        for _ in range(min(10, iters)):
            fn(*args_)
        sync()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(*args_)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def try_(what, f, row, key):
    try:
        row[key] = round(f(), 4)
    except Exception as e:  # a row shows why a column is missing, the check goes on
        row[key] = None
        row.setdefault("notes", []).append(f"{what}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")


def exported_models(torch, small):
    """Models torch exports here (the GPU machine's torch), for the rows the fixtures lack;
    `small` (the dry run) shrinks them for the PTX interpreter."""
    models, hw = [], 32 if small else 224
    try:
        import torchvision
        models.append(("resnet18 b1", lambda: torchvision.models.resnet18().eval(), lambda: (torch.randn(1, 3, hw, hw),)))
        if not small:
            models.append(("resnet18 b32", lambda: torchvision.models.resnet18().eval(), lambda: (torch.randn(32, 3, hw, hw),)))
    except ImportError as e:
        models.append(("resnet18", None, str(e)))
    try:
        import transformers

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                # bert-base sizes (random weights), a 2-layer 64-wide one for the dry run
                sizes = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128) if small else {}
                cfg = transformers.BertConfig(attn_implementation="sdpa", **sizes)
                self.bert = transformers.BertModel(cfg, add_pooling_layer=False).eval()

            def forward(self, ids):
                return self.bert(input_ids=ids).last_hidden_state

        models.append(("bert-base encoder s128", Encoder, lambda: (torch.randint(0, 30000, (1, 128)),)))
    except ImportError as e:
        models.append(("bert-base encoder", None, str(e)))
    return models


def phase_bench(args, report, deadline):
    rows = []
    report["bench"] = {"rows": rows}
    iters = 3 if args.dry_run else 100
    try:
        import torch
        # The dry run times torch on the CPU: what it checks is the script's path, not speed.
        dev = "cpu" if args.dry_run else "cuda"
        have_torch = args.dry_run or torch.cuda.is_available()
    except ImportError:
        torch, have_torch = None, False
    for name in BENCH_FIXTURES:
        row = {"model": name, "source": "fixture"}
        rows.append(row)
        lib = os.path.join(args.work, name, "model.so")
        inputs = os.path.join(FIXTURES, name, "inputs_0.safetensors")
        row["aotc_ms"], err = aotc_bench(args, lib, inputs, iters) if os.path.exists(lib) else (None, "not compiled")
        if err:
            row.setdefault("notes", []).append(f"aotc: {err}")
        if have_torch and time.time() < deadline:
            def eager():
                from safetensors.torch import load_file
                m = torch.export.load(os.path.join(FIXTURES, name, "model.pt2")).module().to(dev)
                t = load_file(inputs)
                xs = [t[k].to(dev) for k in sorted(t, key=int)]
                return torch_median_ms(torch, m, xs, iters)
            try_("eager", eager, row, "eager_ms")
        print(f"bench {row}", flush=True)
    if not have_torch:
        report["bench"]["torch"] = "torch with CUDA not available: eager/compile/AOTInductor columns skipped"
        return
    import safetensors.torch
    compiled = []  # (row, model, inputs, folder) for torch.compile and AOTInductor, after every row has aotc and eager
    for label, make, make_inputs in exported_models(torch, args.dry_run):
        row = {"model": label, "source": f"exported here by torch {torch.__version__}"}
        rows.append(row)
        if make is None:
            row["notes"] = [f"not available: {make_inputs}"]
            continue
        if time.time() > deadline - 20:
            row["notes"] = ["not run (time)"]
            continue
        try:
            model, xs = make(), make_inputs()
            ep = torch.export.export(model, xs).run_decompositions()
            work = os.path.join(args.work, "exported", label.replace(" ", "_"))
            os.makedirs(work, exist_ok=True)
            pt2, lib, inp = os.path.join(work, "model.pt2"), os.path.join(work, "model.so"), os.path.join(work, "in.safetensors")
            torch.export.save(ep, pt2)
            safetensors.torch.save_file({str(i): x.contiguous() for i, x in enumerate(xs)}, inp)
            ok, secs, log = run([args.aotc, "compile", "--device", "cuda", pt2, "-o", lib], 120)
            row["aotc_compile_s"] = round(secs, 2)
            if ok:
                row["aotc_ms"], err = aotc_bench(args, lib, inp, iters)
                if err:
                    row.setdefault("notes", []).append(f"aotc: {err}")
                # Correctness beside the timing: the library's outputs against eager's on the GPU.
                okr, _, logr = run([args.aotc, "run", lib, "--input", inp, "--device", "cuda:0", "--output-dir", work], 120)
                if okr:
                    with torch.no_grad():
                        want = model.to(dev)(*[x.to(dev) for x in xs]).float().cpu()
                    got = safetensors.torch.load_file(os.path.join(work, "outputs_0.safetensors"))["0"].float()
                    row["max_abs_diff_vs_eager"] = float((want - got).abs().max())
                else:
                    row.setdefault("notes", []).append(f"aotc run: {logr.strip().splitlines()[-1] if logr.strip() else ''}")
            else:
                row.setdefault("notes", []).append(f"aotc compile: {log.strip().splitlines()[-1] if log.strip() else ''}")
            m, xc = model.to(dev), [x.to(dev) for x in xs]
            try_("eager", lambda: torch_median_ms(torch, m, xc, iters), row, "eager_ms")
            compiled.append((row, m, xc, work))
        except Exception as e:
            row.setdefault("notes", []).append(f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
        print(f"bench {row}", flush=True)
    if not args.dry_run:  # Inductor's C++ builds take minutes on a CPU
        inductor_rows(args, torch, compiled, iters, deadline)


def inductor_rows(args, torch, compiled, iters, deadline):
    """torch.compile and AOTInductor beside the rows, while the time lasts (each builds for a minute or so)."""
    for row, m, xc, work in compiled:
        if "compile" in args.inductor and time.time() < deadline - 60:
            t0 = time.time()
            try_("torch.compile", lambda: torch_median_ms(torch, torch.compile(m), xc, iters), row, "compile_ms")
            row["torch_compile_s"] = round(time.time() - t0, 1)
        print(f"bench {row}", flush=True)
    for row, m, xc, work in compiled:
        if "aoti" in args.inductor and time.time() < deadline - 90 and not row["model"].endswith("b32"):
            # In a child process: an AOTInductor build or load that crashes takes only its row with it.
            try:
                torch.export.save(torch.export.export(m, tuple(xc)), os.path.join(work, "cuda_ep.pt2"))
                ok, secs, log = run([sys.executable, __file__, "--aoti-child", work, "--iters", str(iters)],
                                    max(10, deadline - time.time()))
                row["aoti_build_s"] = round(secs, 1)
                if ok:
                    row["aoti_ms"] = round(json.loads(log.strip().splitlines()[-1])["aoti_ms"], 4)
                else:
                    row.setdefault("notes", []).append(f"AOTInductor: {' | '.join(log.strip().splitlines()[-2:])[:300]}")
            except Exception as e:
                row.setdefault("notes", []).append(f"AOTInductor export: {type(e).__name__}: {str(e)[:200]}")
        print(f"bench {row}", flush=True)


def aoti_child(work, iters):
    """Builds, loads and times the AOTInductor package of work/cuda_ep.pt2 on work/in.safetensors."""
    import torch
    from safetensors.torch import load_file
    ep = torch.export.load(os.path.join(work, "cuda_ep.pt2"))
    pkg = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(work, "aoti.pt2"))
    runner = torch._inductor.aoti_load_package(pkg)
    t = load_file(os.path.join(work, "in.safetensors"))
    xs = [t[k].cuda() for k in sorted(t, key=int)]
    print(json.dumps({"aoti_ms": torch_median_ms(torch, runner, xs, iters)}))


# ---------------------------------------------------------------- report


def environment(args):
    env = {"mode": "dry run (fake driver, PTX interpreter)" if args.dry_run else "GPU",
           "host": platform.node(), "python": platform.python_version(), "aotc": args.aotc}
    smi = shutil.which("nvidia-smi")
    if smi and not args.dry_run:
        env["gpu"] = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode().strip()
    try:
        import torch
        env["torch"] = torch.__version__
    except ImportError:
        env["torch"] = "not installed"
    env["cc"] = shutil.which(os.environ.get("AOTC_CC", "cc")) or "none"
    return env


def write_report(args, report):
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1)
    lines = [f"# aotc GPU check ({report['env']['mode']})", ""]
    lines += [f"- {k}: {v}" for k, v in report["env"].items()]
    lines += [f"- elapsed: {time.time() - report['started']:.0f} s", ""]
    fx = report.get("fixtures")
    if fx:
        res = fx["results"]
        groups = {"ops": [r for r in res if r["name"].startswith("ops/")], "models and programs": [r for r in res if not r["name"].startswith("ops/")]}
        lines.append("## Fixtures on the device")
        for g, rs in groups.items():
            lines.append(f"- {g}: {sum(r['status'] == 'pass' for r in rs)} of {len(rs)} pass")
        lines.append(f"- not run for lack of time: {fx['not_run_for_time']}")
        bad = [r for r in res if r["status"] != "pass"]
        if bad:
            lines += ["", "| fixture | status | error |", "| --- | --- | --- |"]
            lines += [f"| {r['name']} | {r['status']} | {r['error'][:400].replace('|', '/')} |" for r in bad]
        lines.append("")
    san = report.get("sanitizer")
    if san:
        lines += ["## compute-sanitizer", f"- tool: {san['tool'] or 'not installed'}"]
        lines += [f"- {r['model']} {r['tool']}: {r['result']} ({r.get('summary', '')})" for r in san["rows"]]
        lines.append("")
    bench = report.get("bench")
    if bench:
        lines += ["## Timings (median ms per call)", ""]
        if bench.get("torch"):
            lines += [f"- {bench['torch']}", ""]
        cols = ["aotc_ms", "eager_ms", "compile_ms", "aoti_ms", "aotc_compile_s", "torch_compile_s", "aoti_build_s", "max_abs_diff_vs_eager"]
        lines += ["| model | " + " | ".join(cols) + " | notes |", "| --- " * (len(cols) + 2) + "|"]
        for r in bench["rows"]:
            lines.append(f"| {r['model']} | " + " | ".join("-" if r.get(c) is None else f"{r[c]:.4g}" for c in cols)
                         + " | " + "; ".join(r.get("notes", [])).replace("|", "/")[:400] + " |")
    with open(os.path.join(args.out, "gpu_check.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--aotc", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--budget", type=float, default=450, help="seconds for the whole check")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--skip", help="an earlier gpu_check.json: its fixtures are not run again")
    p.add_argument("--phases", default="fixtures,sanitizer,bench")
    p.add_argument("--inductor", default="compile,aoti", help="which of torch.compile and AOTInductor to time")
    if sys.argv[1:2] == ["--aoti-child"]:  # inductor_rows's child process: --aoti-child WORK --iters N
        return aoti_child(sys.argv[2], int(sys.argv[4]))
    args = p.parse_args()
    args.aotc = os.path.abspath(args.aotc)
    args.work = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"aotc-gpu-check-{os.getpid()}")
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    report = {"started": start, "env": environment(args)}
    print(json.dumps(report["env"]), flush=True)
    write_report(args, report)
    phases = args.phases.split(",")
    for phase, share in [(phase_fixtures, 0.5), (phase_sanitizer, 0.62), (phase_bench, 0.95)]:
        if phase.__name__.removeprefix("phase_") in phases:
            phase(args, report, start + (share if len(phases) > 1 else 0.95) * args.budget)
            write_report(args, report)
    print(open(os.path.join(args.out, "gpu_check.md")).read())
    failed = [r for r in report.get("fixtures", {}).get("results", []) if r["status"] != "pass"]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
