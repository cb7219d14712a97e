#!/usr/bin/env python3
"""Side-by-side CPU latency of PyTorch eager, AOTInductor, ONNX Runtime, OpenVINO and aotc on
the same programs.

For every row of ROWS (below), on the same inputs and the same thread count:
  eager         torch.export.load(pt2).module() called under torch.inference_mode()
  AOTInductor   torch._inductor.aoti_compile_and_package(ep) + torch._inductor.aoti_load_package
  ONNX Runtime  torch.onnx.export(ep, args, dynamo=True) once per row, then an
                onnxruntime.InferenceSession with all graph optimizations
  OpenVINO      the same ONNX file, openvino.Core().compile_model(.., "CPU") with the latency
                hint and f32 inference precision
  aotc          `aotc compile MODEL.pt2 -o X.so` + `aotc bench X.so --json`
and writes a Markdown report (default docs/PERFORMANCE.md) plus the raw numbers as JSON
(WORKDIR/results.json).

Every runner's outputs are checked against the row's expected outputs (the fixture's
expected_0.safetensors; eager's outputs for the rows this script exports): the Python runners
check the first call of every timed round, aotc is checked once with `aotc run`. A runner
whose outputs differ is marked WRONG in the table, so that a fast wrong answer is not a result.

Each row's one-time work (inputs; the ONNX export; AOTInductor's and aotc's compile) is done
once, for every row first; then --rounds rounds over all rows, each timing every row's runners
back to back (in RUNNERS order), and the table reports each runner's round with the lowest
median (see write_report).

Every measurement runs in its own child process (this script re-invoked with --child ROLE,
or the aotc CLI itself); the parent never imports torch. A child's peak RSS is its
ru_maxrss as returned by os.wait4() for that child alone.

Usage (see benchmarks/README.md):
  benchmarks/setup_env.sh                       # once: benchmarks/.venv with torch, ORT, OpenVINO
  benchmarks/.venv/bin/python benchmarks/compare.py [AOTC] [--threads 2] [--iters 50] ...
"""
import argparse
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.normpath(os.path.join(REPO, "..", "shared", "fixtures"))
RESULT_MARK = "@@COMPARE_RESULT@@ "

# ---------------------------------------------------------------------------------------
# The rows: one place. `fixture` rows read FIXTURES/<fixture>/{model.pt2,inputs_0.safetensors,
# expected_0.safetensors}; every folder of FIXTURES/models is a row. `torchvision` and `bert`
# rows are exported by this script (eval mode, random init, seed 0).
# target_ms: the performance issue's target for aotc's median latency, where it set one.
# ---------------------------------------------------------------------------------------

def model_fixture_rows():
    models = os.path.join(FIXTURES, "models")
    names = sorted(os.listdir(models)) if os.path.isdir(models) else []
    return [dict(name=n, fixture=os.path.join("models", n)) for n in names
            if os.path.exists(os.path.join(models, n, "model.pt2"))]


IMAGE = (1, 3, 224, 224)
ROWS = [
    dict(name="bench_mlp", fixture="bench_mlp", target_ms=7.0),
    dict(name="bench_convnet", fixture="bench_convnet", target_ms=2.5),
    dict(name="small_cnn", fixture="small_cnn", target_ms=0.08),
    dict(name="transformer_block", fixture="transformer_block", target_ms=0.02),
    dict(name="mlp_buffer_mutation", fixture="mlp_buffer_mutation", target_ms=0.002),
    *model_fixture_rows(),
    dict(name="ResNet-18", torchvision="resnet18", shape=IMAGE, target_ms=22.0),
    dict(name="MobileNetV3-small", torchvision="mobilenet_v3_small", shape=(2, 3, 224, 224),
         target_ms=5.0),
    dict(name="ResNet-50", torchvision="resnet50", shape=IMAGE),
    dict(name="DenseNet-121", torchvision="densenet121", shape=IMAGE),
    dict(name="ViT-B/16", torchvision="vit_b_16", shape=IMAGE),
    dict(name="ConvNeXt-tiny", torchvision="convnext_tiny", shape=IMAGE),
    dict(name="Swin-T", torchvision="swin_t", shape=IMAGE),
    dict(name="EfficientNet-V2-S", torchvision="efficientnet_v2_s", shape=IMAGE),
    dict(name="R3D-18", torchvision="r3d_18", shape=(1, 3, 16, 112, 112)),
    # BERT-base: 12 layers, 768 wide, 12 heads, FFN 3072; batch 1, sequence 128.
    dict(name="BERT-base", bert=dict(layers=12, width=768, heads=12, ffn=3072), seq=128),
]
RUNNERS = ("eager", "aoti", "ort", "openvino", "aotc")
PEERS = ("aoti", "ort", "openvino")  # the compilers aotc is compared with: "aotc / best peer"


# =======================================================================================
# Child side: everything that imports torch.
# =======================================================================================

def emit(obj):
    """Hand a result to the parent: the last marked line of the child's stdout."""
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(obj), flush=True)


def set_threads(n):
    import torch
    torch.set_num_threads(n)


def load_inputs(path):
    """Inputs in the fixture layout: tensors keyed "0","1",... in call order; non-tensor
    leaves in the header metadata "scalars" as JSON {"index": value}."""
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        values = {int(k): f.get_tensor(k) for k in f.keys()}
    for k, v in json.loads(meta.get("scalars", "{}")).items():
        values[int(k)] = v
    return [values[i] for i in range(len(values))]


def save_inputs(path, args):
    """The fixture layout (also used for expected outputs: the flat outputs keyed "0","1",...)."""
    from safetensors.torch import save_file
    import torch
    tensors = {str(i): a.contiguous() for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    scalars = {str(i): a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
    save_file(tensors, path, metadata={"scalars": json.dumps(scalars)} if scalars else None)


def time_calls(fn, args, warmup, iters):
    """Median/min wall-clock ms of fn(*args) over `iters` calls after `warmup` calls."""
    import torch
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            fn(*args)
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t0) * 1e3)
    return dict(median_ms=statistics.median(times), min_ms=min(times), max_ms=max(times),
                iters=iters, warmup=warmup)


def check_outputs(outputs, a):
    """Compare a call's outputs (any pytree of tensors or numpy arrays) with the row's expected
    outputs (a.expected): floats elementwise within atol * min(1, max |expected|) + rtol *
    |expected| (atol is meant for outputs of magnitude 1 and is scaled down for smaller ones,
    as random-init classifiers can output 1e-9), other dtypes exactly. Returns
    dict(ok, max_abs_err) and, for a count or shape mismatch, why."""
    import torch
    got = [torch.as_tensor(o) for o in torch.utils._pytree.tree_flatten(outputs)[0]]
    expected = load_inputs(a.expected)
    if len(got) != len(expected):
        return dict(ok=False, why=f"{len(got)} outputs, expected {len(expected)}")
    ok, worst = True, 0.0
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            return dict(ok=False, why=f"output {i} has shape {list(g.shape)}, "
                        f"expected {list(e.shape)}")
        err = (g.double() - e.double()).abs().nan_to_num(nan=float("inf"))
        bound = 0
        if e.is_floating_point():
            scale = min(1.0, float(e.abs().max())) if e.numel() else 1.0
            bound = a.atol * scale + a.rtol * e.double().abs()
        ok = ok and bool((err <= bound).all())
        worst = max(worst, float(err.max()) if err.numel() else 0.0)
    return dict(ok=ok, max_abs_err=worst)


def check_and_time(fn, args, a, **fields):
    """The first call's outputs checked (the model as loaded: fixtures that mutate a buffer
    expect the first call's outputs), then warm-up and timed calls."""
    import torch
    with torch.inference_mode():
        check = check_outputs(fn(*args), a)
    return dict(time_calls(fn, args, a.warmup, a.iters), check=check, **fields)


def build_model(row):
    """(model, example args) of a row this script exports: eval mode, random init, seed 0,
    zero-initialised parameters randomised."""
    import torch
    torch.manual_seed(0)
    if "torchvision" in row:
        import torchvision
        model = torchvision.models.get_model(row["torchvision"], weights=None)
        return randomize_zero_params(model).eval(), [torch.randn(*row["shape"])]
    import transformers
    b = row["bert"]
    # return_dict=False: a plain tuple out, so that loading the .pt2 does not need transformers
    config = transformers.BertConfig(num_hidden_layers=b["layers"], hidden_size=b["width"],
                                     num_attention_heads=b["heads"], intermediate_size=b["ffn"],
                                     return_dict=False)
    model = transformers.BertModel(config)
    return (randomize_zero_params(model).eval(),
            [torch.randint(0, config.vocab_size, (1, row["seq"]))])


def randomize_zero_params(model):
    """Parameters initialised to all zeros (ViT-B/16's classifier head, biases) would make an
    output constant and the output check vacuous: small random values instead, as zoo.py."""
    import torch
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and p.is_floating_point() and not p.any():
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)
    return model


def tolerance(row_dir, expected):
    """(rtol, atol): the fixture's info.json "tolerance" where it has one, else 1e-3 / 1e-4
    for float32 outputs and 1e-2 / 1e-2 where an output is float16 or bfloat16."""
    import torch
    info = os.path.join(row_dir, "info.json")
    if os.path.exists(info):
        tol = json.load(open(info)).get("tolerance")
        if tol:
            return tol["rtol"], tol["atol"]
    if any(e.dtype in (torch.float16, torch.bfloat16) for e in expected):
        return 1e-2, 1e-2
    return 1e-3, 1e-4


def child_prepare(a):
    """Locate (fixture) or export (torchvision, BERT) the row's program, inputs and expected
    outputs; count FLOPs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    set_threads(a.threads)
    row = row_by_name(a.row)
    if "fixture" in row:
        d = os.path.join(FIXTURES, row["fixture"])
        args = load_inputs(os.path.join(d, "inputs_0.safetensors"))
    else:
        model, args = build_model(row)
        # Core ATen IR, as the shared fixtures (make_fixtures.py) are saved.
        ep = torch.export.export(model, tuple(args)).run_decompositions()
        d = os.path.join(a.workdir, "models", slug(row["name"]))
        os.makedirs(d, exist_ok=True)
        torch.export.save(ep, os.path.join(d, "model.pt2"))
        save_inputs(os.path.join(d, "inputs_0.safetensors"), args)
    module = torch.export.load(os.path.join(d, "model.pt2")).module()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        outputs = torch.utils._pytree.tree_flatten(module(*args))[0]
    expected = os.path.join(d, "expected_0.safetensors")
    if "fixture" not in row:  # eager's outputs are the reference
        save_inputs(expected, outputs)
    rtol, atol = tolerance(d, outputs)
    versions = {}
    for name in ("torchvision", "transformers"):
        try:
            versions[name + "_version"] = __import__(name).__version__
        except ImportError:
            versions[name + "_version"] = "not installed"
    emit(dict(pt2=os.path.join(d, "model.pt2"), inputs=os.path.join(d, "inputs_0.safetensors"),
              expected=expected, rtol=rtol, atol=atol, flops=counter.get_total_flops(),
              torch_version=torch.__version__, **versions))


def child_baseline(a):
    """Python + torch + safetensors imported and the row's inputs loaded: the floor under
    the Python runners' RSS numbers."""
    import torch  # noqa: F401
    set_threads(a.threads)
    load_inputs(a.inputs)
    emit({})


def child_eager(a):
    import torch
    set_threads(a.threads)
    module = torch.export.load(a.pt2).module()
    args = load_inputs(a.inputs)
    emit(check_and_time(module, args, a))


def child_aoti_compile(a):
    import torch
    set_threads(a.threads)
    ep = torch.export.load(a.pt2)
    t0 = time.perf_counter()
    path = torch._inductor.aoti_compile_and_package(ep, package_path=a.package)
    compile_s = time.perf_counter() - t0
    with zipfile.ZipFile(path) as z:
        so_bytes = sum(i.file_size for i in z.infolist() if i.filename.endswith(".so"))
    emit(dict(compile_s=compile_s, package=path, package_bytes=os.path.getsize(path),
              so_bytes=so_bytes))


def child_aoti_run(a):
    import torch
    set_threads(a.threads)
    runner = torch._inductor.aoti_load_package(a.package)
    args = load_inputs(a.inputs)
    emit(check_and_time(runner, args, a))


def child_onnx_export(a):
    """The row's ExportedProgram to ONNX (torch's dynamo exporter), for ORT and OpenVINO."""
    import onnx
    import onnxscript
    import torch
    set_threads(a.threads)
    ep = torch.export.load(a.pt2)
    args = load_inputs(a.inputs)
    t0 = time.perf_counter()
    torch.onnx.export(ep, tuple(args), a.onnx, dynamo=True)
    emit(dict(onnx=a.onnx, export_s=time.perf_counter() - t0, onnx_version=onnx.__version__,
              onnxscript_version=onnxscript.__version__))


def onnx_inputs(names, args, convert):
    """The row's tensor inputs, each convert()ed, in the ONNX graph's input order (the exporter
    keeps the program's flat input order; Python scalars are constants in the graph)."""
    import torch
    tensors = [convert(x) for x in args if isinstance(x, torch.Tensor)]
    if len(tensors) != len(names):
        raise RuntimeError(f"the ONNX graph takes {len(names)} inputs, the row has "
                           f"{len(tensors)} tensors")
    return dict(zip(names, tensors))


def child_ort(a):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = a.threads
    options.inter_op_num_threads = 1
    t0 = time.perf_counter()
    session = ort.InferenceSession(a.onnx, options, providers=["CPUExecutionProvider"])
    load_s = time.perf_counter() - t0
    feeds = onnx_inputs([i.name for i in session.get_inputs()], load_inputs(a.inputs),
                        lambda x: x.numpy())
    emit(check_and_time(lambda: session.run(None, feeds), [], a, load_s=load_s,
                        version=ort.__version__))


def child_openvino(a):
    import openvino
    import openvino.properties as props
    import openvino.properties.hint as hints
    config = {hints.performance_mode: hints.PerformanceMode.LATENCY,
              props.inference_num_threads: a.threads,
              hints.inference_precision: openvino.Type.f32}
    t0 = time.perf_counter()
    compiled = openvino.Core().compile_model(a.onnx, "CPU", config)
    load_s = time.perf_counter() - t0
    request = compiled.create_infer_request()
    feeds = onnx_inputs([p.get_any_name() for p in compiled.inputs], load_inputs(a.inputs),
                        to_openvino)

    def call():  # outputs as views (no copy), then copied once as ORT's are
        request.infer(feeds, share_outputs=True)
        return [from_openvino(t) for t in request.output_tensors]
    emit(check_and_time(call, [], a, load_s=load_s, version=openvino.__version__))


def to_openvino(x):
    """An openvino.Tensor holding a copy of torch tensor x; bfloat16, which numpy lacks, as
    its bits."""
    import openvino
    import torch
    if x.dtype != torch.bfloat16:
        return openvino.Tensor(x.numpy())
    t = openvino.Tensor(openvino.Type.bf16, list(x.shape))
    t.data.view("int16")[...] = x.view(torch.int16).numpy()
    return t


def from_openvino(t):
    """A torch tensor with a copy of openvino.Tensor t's values (bfloat16 by its bits)."""
    import openvino
    import torch
    if t.element_type != openvino.Type.bf16:
        return torch.from_numpy(t.data.copy())
    return torch.from_numpy(t.data.view("int16").copy()).view(torch.bfloat16)


def child_check(a):
    """aotc's outputs (`aotc run --output-dir`) against the row's expected outputs."""
    emit(check_outputs(load_inputs(a.outputs), a))


CHILDREN = dict(prepare=child_prepare, baseline=child_baseline, eager=child_eager,
                aoti_compile=child_aoti_compile, aoti_run=child_aoti_run,
                onnx_export=child_onnx_export, ort=child_ort, openvino=child_openvino,
                check=child_check)


# =======================================================================================
# Parent side: child processes, the three runners, the report.
# =======================================================================================

class ChildError(Exception):
    pass


def run_child(cmd, env, timeout):
    """Run cmd to completion; return (stdout, wall seconds, peak RSS bytes). The peak RSS
    is ru_maxrss from os.wait4() on this child (Linux reports KiB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        deadline = t0 + timeout
        try:
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    raise ChildError(f"timed out after {timeout} s")
                time.sleep(0.02)
        except BaseException:  # timeout or Ctrl-C: take the child's whole group down
            os.killpg(p.pid, signal.SIGKILL)
            os.wait4(p.pid, 0)
            p.returncode = -signal.SIGKILL
            raise
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    if p.returncode != 0:
        raise ChildError(f"exit {p.returncode}: {last_error_line(stderr or stdout)}",
                         stderr or stdout)
    return stdout, wall, usage.ru_maxrss * 1024


def last_error_line(text):
    """The line that says what went wrong: the last one naming an error (a Python traceback
    ends with "SomeError: message"); one ending in ':' gets the lines it introduces."""
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    for i in reversed(range(len(lines))):
        if "Error" in lines[i] or "error" in lines[i] or "Exception" in lines[i]:
            if lines[i].endswith(":"):
                return lines[i] + " " + "; ".join(l.split(":")[0] for l in lines[i + 1:])
            return lines[i]
    return lines[-1] if lines else "(no output)"


def py_child(ctx, role, env=None, **kw):
    cmd = [ctx.python, os.path.abspath(__file__), "--child", role, "--threads", str(ctx.threads),
           "--iters", str(ctx.iters), "--warmup", str(ctx.warmup), "--workdir", ctx.workdir]
    for k, v in kw.items():
        cmd += [f"--{k}", str(v)]
    stdout, wall, rss = run_child(cmd, env or ctx.env, ctx.timeout)
    marked = [l for l in stdout.splitlines() if l.startswith(RESULT_MARK)]
    if not marked:
        raise ChildError("child printed no result", stdout)
    return json.loads(marked[-1][len(RESULT_MARK):]), wall, rss


def guarded(fn):
    """Run one measurement; an exception becomes {"error": message} for the table."""
    try:
        return fn()
    except Exception as e:  # report it, keep the row
        detail = e.args[1] if isinstance(e, ChildError) and len(e.args) > 1 else ""
        return dict(error=str(e.args[0]) if e.args else repr(e), detail=detail[-4000:])


def labelled(label, fn):
    """fn(), with `label: ` put in front of a ChildError's message, so that the table says
    which step of a runner failed (its compile, or a timed run)."""
    try:
        return fn()
    except ChildError as e:
        raise ChildError(f"{label}: {e.args[0]}", *e.args[1:]) from None


def aoti_env(ctx, row):
    """The row's own Inductor cache: fresh for its compile, reused by every timed round."""
    cache = os.path.join(ctx.workdir, "inductor_cache", slug(row["name"]))
    return dict(ctx.env, TORCHINDUCTOR_CACHE_DIR=cache), cache


# One-time work per row and runner, before the rounds. Each returns the runner's fields that
# do not change between rounds (compile time, sizes, the artifact's path).

def setup_eager(ctx, row, prep):
    """Nothing to build: every eager round loads the .pt2 itself."""
    return {}


def setup_aoti(ctx, row, prep):
    """The row's one AOTInductor compile (about 20 s and more; never repeated per round), in a
    fresh empty Inductor cache so that compile_s is a cold compile."""
    env, cache = aoti_env(ctx, row)
    shutil.rmtree(cache, ignore_errors=True)
    package = os.path.join(ctx.workdir, "aoti", slug(row["name"]) + ".pt2")
    if os.path.exists(package):
        os.remove(package)
    return labelled("compile", lambda: py_child(ctx, "aoti_compile", env, pt2=prep["pt2"],
                                                package=package)[0])


def setup_aotc(ctx, row, prep):
    """The row's one `aotc compile`; compile_s is that process's wall clock."""
    so = os.path.join(ctx.workdir, "aotc", slug(row["name"]) + ".so")
    if os.path.exists(so):
        os.remove(so)
    _, compile_s, _ = labelled("compile", lambda: run_child(
        [ctx.aotc, "compile", prep["pt2"], "-o", so], ctx.env, ctx.timeout))
    return dict(compile_s=compile_s, so_bytes=os.path.getsize(so), library=so,
                check=check_aotc(ctx, row, prep, so))


def check_aotc(ctx, row, prep, so):
    """aotc's outputs on the row's inputs (one `aotc run`) against the expected outputs: once
    per row, as `aotc bench` does not return outputs."""
    out_dir = os.path.join(ctx.workdir, "aotc", slug(row["name"]) + "_outputs")
    shutil.rmtree(out_dir, ignore_errors=True)
    labelled("run", lambda: run_child([ctx.aotc, "run", so, "--input", prep["inputs"],
                                       "--output-dir", out_dir], ctx.env, ctx.timeout))
    return labelled("check", lambda: py_child(
        ctx, "check", outputs=os.path.join(out_dir, "outputs_0.safetensors"),
        **reference(prep))[0])


def export_onnx(ctx, row, prep):
    """The row's one ONNX export, shared by ONNX Runtime and OpenVINO (prepare_row)."""
    path = os.path.join(ctx.workdir, "onnx", slug(row["name"]), "model.onnx")
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    os.makedirs(os.path.dirname(path))
    return py_child(ctx, "onnx_export", pt2=prep["pt2"], inputs=prep["inputs"], onnx=path)[0]


def setup_onnx(ctx, row, prep):
    """ONNX Runtime and OpenVINO: the row's ONNX file, or its export's failure. Each round
    builds its own session (ORT) or compiled model (OpenVINO); that time is load_s."""
    if "error" in prep["onnx"]:
        raise ChildError("ONNX export: " + prep["onnx"]["error"], prep["onnx"].get("detail", ""))
    return dict(prep["onnx"])


# One timed round: a fresh child that loads the artifact, warms up and times --iters calls.
# Each returns that round's numbers with the child's peak RSS, or raises ChildError.

def reference(prep):
    """The arguments of a child that checks outputs: the expected outputs and the tolerance."""
    return dict(expected=prep["expected"], rtol=prep["rtol"], atol=prep["atol"])


def time_eager(ctx, row, prep, setup):
    res, _, rss = py_child(ctx, "eager", pt2=prep["pt2"], inputs=prep["inputs"],
                           **reference(prep))
    return dict(res, peak_rss=rss)


def time_aoti(ctx, row, prep, setup):
    env, _ = aoti_env(ctx, row)
    res, _, rss = labelled("run", lambda: py_child(ctx, "aoti_run", env, package=setup["package"],
                                                   inputs=prep["inputs"], **reference(prep)))
    return dict(res, peak_rss=rss)


def time_ort(ctx, row, prep, setup):
    res, _, rss = py_child(ctx, "ort", onnx=setup["onnx"], inputs=prep["inputs"],
                           **reference(prep))
    return dict(res, peak_rss=rss)


def time_openvino(ctx, row, prep, setup):
    res, _, rss = py_child(ctx, "openvino", onnx=setup["onnx"], inputs=prep["inputs"],
                           **reference(prep))
    return dict(res, peak_rss=rss)


def time_aotc(ctx, row, prep, setup):
    stdout, _, rss = labelled("bench", lambda: run_child(
        [ctx.aotc, "bench", setup["library"], "--input", prep["inputs"],
         "--iters", str(ctx.iters), "--warmup", str(ctx.warmup),
         "--threads", str(ctx.threads), "--json"], ctx.env, ctx.timeout))
    try:
        bench = json.loads(stdout[stdout.index("{"):])
    except ValueError as e:
        raise ChildError(f"bench: unreadable --json output ({e})", stdout) from None
    return dict(bench, peak_rss=rss)


STEPS = dict(eager=(setup_eager, time_eager), aoti=(setup_aoti, time_aoti),
             ort=(setup_onnx, time_ort), openvino=(setup_onnx, time_openvino),
             aotc=(setup_aotc, time_aotc))


def best_round(setup, rounds):
    """A runner's result: its one-time fields, every round as measured ("rounds"), and at the
    top level the fields of the round with the lowest median (its median, min, max and, for
    aotc, GFLOP/s), which the table reads. Every round lands in whatever phase a shared host
    is in; the fastest is the least disturbed. Peak RSS is the max over the rounds: memory
    does not depend on the phase, and the max is the honest bound. Failed rounds are kept in
    "rounds" and ignored here; if all failed, the runner failed with the first round's error.
    The output check ("check") is the best round's (aotc's is its setup's)."""
    ok = [i for i, res in enumerate(rounds) if "error" not in res]
    if not ok:
        first = rounds[0] if rounds else dict(error="no rounds run")
        return dict(setup, error=first["error"], detail=first.get("detail", ""), rounds=rounds)
    best = min(ok, key=lambda i: rounds[i]["median_ms"])
    return {**setup, **rounds[best], "best_round": best + 1, "rounds": rounds,
            "peak_rss": max(rounds[i]["peak_rss"] for i in ok)}


def round_status(res):
    if "error" in res:
        return res["error"]
    wrong = "" if res.get("check", {}).get("ok", True) else f"  {wrong_text(res['check'])}"
    return f"{res.get('median_ms', float('nan')):.4f} ms{wrong}"


def measure(ctx, rows):
    """Every row prepared first (inputs, each runner's one-time work), then ctx.rounds rounds
    over all rows: round 1 of every row, then round 2, ... So a row's rounds are minutes
    apart, and a slow phase of the host (seconds to minutes) rarely covers all of them; and
    within a round a row's runners run back to back, so a phase hits them alike."""
    prepared = [prepare_row(ctx, row) for row in rows]
    for k in range(ctx.rounds):
        for out, state in prepared:
            if state:
                print(f"== round {k + 1}: {out['name']}", flush=True)
                time_round(ctx, state)
    return [finish_row(out, state) for out, state in prepared]


def prepare_row(ctx, row):
    """The row's inputs and each runner's one-time work: (the row's result so far, its state
    for the rounds, None if it cannot be timed)."""
    print(f"== {row['name']}", flush=True)
    out = dict(name=row["name"], target_ms=row.get("target_ms"))
    prep = guarded(lambda: py_child(ctx, "prepare", row=row["name"])[0])
    out["prepare"] = prep
    if "error" in prep:
        for r in RUNNERS:
            out[r] = dict(error="not run: prepare failed: " + prep["error"])
        return out, None
    out["baseline"] = guarded(lambda: dict(peak_rss=py_child(ctx, "baseline",
                                                             inputs=prep["inputs"])[2]))
    if any(r in ctx.runners for r in ("ort", "openvino")):
        t0 = time.time()
        prep["onnx"] = guarded(lambda: export_onnx(ctx, row, prep))
        print(f"   onnx     {prep['onnx'].get('error') or 'exported'}  ({time.time() - t0:.0f} s)",
              flush=True)
    setups = {}
    for r in RUNNERS:
        if r not in ctx.runners:
            out[r] = dict(error="skipped (--runners)")
            continue
        t0 = time.time()
        setups[r] = guarded(lambda: STEPS[r][0](ctx, row, prep))
        if "error" in setups[r] or "compile_s" in setups[r]:
            status = setups[r].get("error") or f"compiled in {setups[r]['compile_s']:.2f} s"
            if not setups[r].get("check", {}).get("ok", True):
                status += "  " + wrong_text(setups[r]["check"])
            print(f"   {r:8s} {status}  ({time.time() - t0:.0f} s)", flush=True)
    rounds = {r: [] for r in setups if "error" not in setups[r]}
    return out, dict(row=row, prep=prep, setups=setups, rounds=rounds)


def time_round(ctx, state):
    """One round of the row: each runner timed once, in RUNNERS order."""
    for r, done in state["rounds"].items():
        t0 = time.time()
        done.append(guarded(lambda: STEPS[r][1](ctx, state["row"], state["prep"], state["setups"][r])))
        print(f"   {r:8s} {round_status(done[-1])}  ({time.time() - t0:.0f} s)", flush=True)


def finish_row(out, state):
    """The row's result: each runner's one-time fields and its best round."""
    if state:
        for r, setup in state["setups"].items():
            out[r] = setup if r not in state["rounds"] else best_round(setup, state["rounds"][r])
    return out


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

def slug(name):
    return "".join(c if c.isalnum() else "_" for c in name).lower()


def row_by_name(name):
    return next(r for r in ROWS if r["name"] == name)


def cell_error(res):
    if res["error"].startswith("skipped"):
        return "skipped"
    msg = " ".join(res["error"].split())
    if len(msg) > 110:
        msg = msg[:107] + "..."
    return "FAILED: " + msg.replace("|", "\\|")


def wrong_text(check):
    why = check.get("why") or f"max abs err {check['max_abs_err']:.2g}"
    return f"WRONG ({why})"


def fmt_ms(res):
    """A runner's latency cell; a runner whose outputs did not match says WRONG first."""
    if "error" in res:
        return cell_error(res)
    ms = f"{sig(res['median_ms'])} (min {sig(res['min_ms'])})"
    return ms if res.get("check", {}).get("ok") else f"{wrong_text(res['check'])}: {ms}"


def correct(res):
    return "error" not in res and res.get("check", {}).get("ok", False)


def peer_ratio(r):
    """(aotc's median / the best correct peer's median, that peer) or None."""
    peers = [(r[k]["median_ms"], k) for k in PEERS if correct(r.get(k, {}))]
    if not peers or not correct(r["aotc"]):
        return None
    best, name = min(peers)
    return r["aotc"]["median_ms"] / best, name


def geomean_ratio(rows):
    """(geometric mean of aotc / best peer, rows it is over)."""
    ratios = [x[0] for x in map(peer_ratio, rows) if x]
    if not ratios:
        return None, 0
    return math.exp(sum(map(math.log, ratios)) / len(ratios)), len(ratios)


def sig(x, digits=3):
    """A number with `digits` significant digits, no exponent for the usual ranges."""
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def fmt_flops(flops):
    if flops is None:
        return "?"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if flops >= scale:
            return f"{sig(flops / scale)} {unit}"
    return str(flops)


def mib(n):
    return f"{n / 2**20:.1f}" if n is not None else "?"


def pair(values):
    return " / ".join(values)


def missing(res):
    """Cell text for a number a runner did not produce."""
    return "-" if res.get("error", "").startswith("skipped") else "err"


def size_of(res, key):
    return mib(res[key]) if key in res else missing(res)


def report_row(r):
    prep, aoti, aotc = r["prepare"], r["aoti"], r["aotc"]
    flops = fmt_flops(prep.get("flops")) if "error" not in prep else cell_error(prep)
    if aotc.get("gflop") and prep.get("flops"):
        ours = aotc["gflop"] * 1e9
        if abs(ours - prep["flops"]) > 0.01 * prep["flops"]:
            flops += f" (aotc counts {fmt_flops(ours)})"
    if "error" in aotc:
        gflops = peak = "-"
    else:
        gflops = sig(aotc["gflops"]) if aotc.get("gflops") else "n/a"
        frac, top = aotc.get("fraction_of_peak"), aotc.get("peak_gflops")
        peak = f"{100 * frac:.1f}% of {sig(top)}" if frac is not None and top else "n/a"
    comp = pair([f"{aoti['compile_s']:.1f}" if "compile_s" in aoti else missing(aoti),
                 f"{aotc['compile_s']:.2f}" if "compile_s" in aotc else missing(aotc)])
    aoti_size = (f"{mib(aoti['so_bytes'])} (pkg {mib(aoti['package_bytes'])})"
                 if "package_bytes" in aoti else missing(aoti))
    size = pair([aoti_size, size_of(aotc, "so_bytes")])
    rss = pair([size_of(r[k], "peak_rss") for k in RUNNERS])
    ratio = peer_ratio(r)
    ratio = f"{ratio[0]:.2f} (vs {RUNNER_NAMES[ratio[1]]})" if ratio else "n/a"
    if r["target_ms"] is None:
        met = "-"
    elif not correct(aotc):
        met = "n/a (aotc failed)" if "error" in aotc else "n/a (aotc WRONG)"
    else:
        met = "**yes**" if aotc["median_ms"] <= r["target_ms"] else "no"
    return ([r["name"], flops] + [fmt_ms(r[k]) for k in RUNNERS]
            + [ratio, gflops, peak, comp, size, rss,
               sig(r["target_ms"]) if r["target_ms"] is not None else "-", met])


RUNNER_NAMES = dict(eager="eager", aoti="AOTInductor", ort="ONNX Runtime", openvino="OpenVINO",
                    aotc="aotc")
HEADER = (["model", "FLOPs"] + [RUNNER_NAMES[k] + " ms" for k in RUNNERS]
          + ["aotc / best peer", "aotc GFLOP/s", "% of peak", "compile s (AOTI / aotc)",
             ".so MiB (AOTI / aotc)",
             "peak RSS MiB (" + " / ".join(RUNNER_NAMES[k] for k in RUNNERS) + ")",
             "target ms (aotc)", "target met"])


def round_medians(res):
    """Every round's median in round order ("err" for a failed round), so that the spread
    behind the chosen round is visible."""
    if "rounds" not in res:
        return missing(res)
    return " / ".join("err" if "error" in x else sig(x["median_ms"]) for x in res["rounds"])


def round_failures(rows):
    """(row, "runner, round k", result) for each failed round of a runner that still has a
    result from its other rounds; a runner whose rounds all failed is listed as a whole."""
    return [(r["name"], f"{k}, round {i + 1}", x) for r in rows for k in RUNNERS
            if "error" not in r.get(k, {}) for i, x in enumerate(r.get(k, {}).get("rounds", []))
            if "error" in x]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def tool_version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except Exception as e:
        return f"unknown ({e})"


def write_report(ctx, rows, meta):
    t = meta["torch_version"]
    lines = []
    if ctx.preliminary:
        lines += [f"**PRELIMINARY: {ctx.preliminary}** - not the numbers to quote; re-run on an "
                  "idle machine.", ""]
    lines += [
        "# Performance: aotc vs PyTorch eager, AOTInductor, ONNX Runtime and OpenVINO (CPU)", "",
        f"Generated by `benchmarks/compare.py` (see `benchmarks/README.md`); do not edit by hand.",
        "",
        f"- Date: {meta['date']}",
        f"- Machine: {meta['cpu']}, {meta['cpus']} logical CPUs "
        f"({meta['affinity']} usable by this process), {platform.system()} {platform.release()}",
        f"- Load average (1 min) at start / end: {meta['load_start']:.2f} / {meta['load_end']:.2f}",
        f"- torch {t}, torchvision {meta['torchvision_version']}, "
        f"transformers {meta['transformers_version']}, Python {platform.python_version()}, "
        f"C++ compiler for AOTInductor: {meta['cxx']}",
        f"- ONNX Runtime {meta['ort_version']}, OpenVINO {meta['openvino_version']}; ONNX files "
        f"from `torch.onnx.export(ep, args, dynamo=True)` (onnx {meta['onnx_version']}, "
        f"onnxscript {meta['onnxscript_version']})",
        f"- aotc: `{ctx.aotc}` ({meta['aotc_version']}); repository HEAD at run time: "
        f"{meta['commit']}",
        f"- Threads: {ctx.threads} for every runner (`torch.set_num_threads({ctx.threads})` and "
        f"OMP_NUM_THREADS/MKL_NUM_THREADS={ctx.threads} for eager and AOTInductor; ONNX Runtime "
        f"`intra_op_num_threads={ctx.threads}`, `inter_op_num_threads=1`; OpenVINO "
        f"`INFERENCE_NUM_THREADS={ctx.threads}`; `aotc bench --threads {ctx.threads}`)",
        f"- Timing: {ctx.warmup} warm-up calls, then the median (and min) of {ctx.iters} timed "
        f"calls on the row's inputs_0.safetensors, in each of {ctx.rounds} interleaved rounds per "
        "runner; the table gives each runner's round with the lowest median (see below)",
        f"- Full run took {meta['elapsed_s'] / 60:.1f} min",
    ]
    mean, n = geomean_ratio(rows)
    lines += [f"- **aotc / best peer, geometric mean over the {n} rows that have one: "
              + (f"{mean:.2f}**" if mean else "n/a**")
              + " (best peer: the fastest correct one of AOTInductor, ONNX Runtime and OpenVINO; "
              "below 1 means aotc is faster)", ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(report_row(r)) + " |" for r in rows]
    lines += ["", "## Round medians (ms)", "",
              "Every round's median, in round order; the table above reports the lowest.", "",
              "| model | " + " | ".join(RUNNER_NAMES[k] for k in RUNNERS) + " |",
              "|---" * (len(RUNNERS) + 1) + "|"]
    lines += [f"| {r['name']} | " + " | ".join(round_medians(r[k]) for k in RUNNERS) + " |"
              for r in rows]
    base = [f"{r['name']} {mib(r['baseline']['peak_rss'])}" for r in rows
            if "peak_rss" in r.get("baseline", {})]
    lines += [
        "", "## How to read this", "",
        f"- **Rounds: the fastest of {ctx.rounds}.** After the row's one-time work (the "
        "ONNX export, the AOTInductor and aotc compiles, done once), each runner is timed in "
        f"{ctx.rounds} rounds: eager, AOTInductor, ONNX Runtime, OpenVINO, aotc back to back, "
        "and a row's rounds spread "
        "over the whole run (round 1 of every row, then round 2 of every row, ...). A round is "
        "one fresh child process: load, warm-up, the timed calls. Each "
        "latency cell is the round with the lowest median: that round's median and that same "
        "round's min (aotc's GFLOP/s and % of peak are from that round too). The rule is the "
        "same for all runners. Why: on a shared machine other tenants slow every process "
        "down, torch and aotc alike, in phases lasting seconds to minutes, and one round lands "
        "in whatever phase the host is in, so a single round can put one runner in a fast "
        "phase and the next in a slow one. The fastest round is the one least disturbed by "
        "other tenants; slower rounds measure the neighbours, not the code. This is the "
        "reasoning of Python's `timeit` documentation, which recommends the minimum of "
        "repeated measurements. Every round's median is in the Round medians table, so the "
        "spread is visible.",
        "- **Latency.** The eager, AOTInductor, ONNX Runtime and OpenVINO columns are timed "
        "from Python with `time.perf_counter()` around each call, so they include the Python "
        "call overhead (for eager, also the pytree flattening of the unlifted `torch.export` "
        "module; for ONNX Runtime `session.run(None, feeds)` with numpy arrays in and out, for "
        "OpenVINO `request.infer(feeds)` on `openvino.Tensor` inputs, its outputs copied out "
        "once). The aotc "
        "column is timed by its Rust CLI (`aotc bench --json`, median of the per-call times), "
        "which calls the library through its C ABI with no Python in the loop. For the "
        "microsecond-scale rows this difference dominates; compare those with that in mind.",
        "- **ONNX Runtime / OpenVINO** run the row's ExportedProgram exported once to ONNX with "
        "`torch.onnx.export(ep, args, dynamo=True)`. ONNX Runtime: `InferenceSession` with "
        "`GraphOptimizationLevel.ORT_ENABLE_ALL` on the CPUExecutionProvider. OpenVINO: "
        "`Core().compile_model(path, \"CPU\", {PERFORMANCE_HINT: LATENCY, INFERENCE_NUM_THREADS, "
        "INFERENCE_PRECISION_HINT: f32})`. Session creation / model compile is done in every "
        "round and not timed in the table (it is `load_s` in results.json). A failed ONNX export "
        "fails both cells with the exporter's error.",
        "- **Correctness.** Every runner's outputs on the row's inputs are compared with the "
        "row's expected outputs: the fixture's `expected_0.safetensors`, or eager's outputs for "
        "the rows this script exports. Floats pass within atol * min(1, max |expected|) + "
        "rtol * |expected| (the fixture's own tolerance where its info.json has one, else rtol "
        "1e-3 / atol 1e-4 for float32 and 1e-2 / 1e-2 for float16/bfloat16 outputs; atol is "
        "scaled down for an output smaller than 1, as some random-init classifiers output "
        "1e-9), other dtypes must be equal. "
        "The Python runners check the first call of each round (the model as loaded), aotc one "
        "`aotc run` after its compile. A runner that does not match says `WRONG (max abs err "
        "...)` before its time, and is not counted in aotc / best peer.",
        "- **aotc / best peer** is aotc's median over the lowest median of AOTInductor, ONNX "
        "Runtime and OpenVINO among those that ran and matched (named in brackets); n/a when "
        "aotc failed or was wrong, or no peer has a correct time. The geometric mean at the "
        "top is over the rows that have one.",
        "- **FLOPs** are counted by `torch.utils.flop_counter.FlopCounterMode` on one eager call "
        "(matmul/conv/attention FLOPs, 2 per multiply-add). When aotc's own count (GEMM FLOPs "
        "recorded by the compiler, which `aotc bench` uses for GFLOP/s) differs by more than 1% "
        "it is shown in brackets.",
        "- **aotc GFLOP/s / % of peak** are `aotc bench`'s `gflops` and `fraction_of_peak`: its "
        "GEMM FLOPs over the median time, against the FMA peak it measures on this machine at "
        "the same thread count (the number after 'of'); n/a where aotc reports no FLOP count. "
        "A convolution counts as its direct computation: where aotc runs it as Winograd's "
        "F(4x4, 3x3) (3x3 at stride 1, 4 times fewer multiplies), this is an effective "
        "rate, and the fraction of peak is not a bound on it.",
        "- **Compile s.** AOTInductor: `torch._inductor.aoti_compile_and_package(ep)` timed "
        "inside the child (after `torch.export.load`), with a fresh empty "
        "`TORCHINDUCTOR_CACHE_DIR` per row, so a cold compile. aotc: wall clock of the "
        "`aotc compile MODEL.pt2 -o X.so` process.",
        "- **.so MiB.** AOTInductor: the .so files inside the package (the whole package .pt2 "
        "in brackets). aotc: the single self-contained .so (weights included).",
        "- **Peak RSS** is `ru_maxrss` from `os.wait4()` on the one child process that loads "
        "the model, runs the warm-up and the timed calls, the largest over the rounds (eager, "
        "AOTInductor, ONNX Runtime, OpenVINO: a Python process; aotc: the `aotc bench` "
        "process, which also measures the FMA peak). The Python "
        "numbers include the interpreter and the torch import (ONNX Runtime's and OpenVINO's "
        "children import torch too, to load the inputs); a Python child that only "
        "imports torch and loads the inputs peaks at: " + (", ".join(base) or "?") + " MiB.",
        "- **Targets** are the performance issue's targets for aotc's median latency, where it "
        "set one (`-` elsewhere).",
        "- A runner that fails keeps its row; the cell says FAILED and why (details below). "
        "A runner that fails in some rounds only is reported from its other rounds; the failed "
        "rounds show `err` in the Round medians table and are listed below.",
    ]
    failures = [(r["name"], k, r[k]) for r in rows for k in ("prepare",) + RUNNERS
                if "error" in r.get(k, {}) and not r[k]["error"].startswith("skipped")]
    failures += round_failures(rows)
    if failures:
        lines += ["", "## Failures", ""]
        for name, k, res in failures:
            lines += [f"### {name}: {k}", "", res["error"], ""]
            if res.get("detail"):
                lines += ["```", res["detail"].strip()[-2000:], "```", ""]
    lines += ["", "## Command", "", "```", meta["command"], "```", ""]
    os.makedirs(os.path.dirname(os.path.abspath(ctx.out)), exist_ok=True)
    # The GPU section (written from scripts/gpu_check.sh reports, on machines this script
    # never runs on) is kept as it is.
    kept = ""
    if os.path.exists(ctx.out):
        old = open(ctx.out).read()
        if GPU_SECTION in old:
            kept = "\n" + old[old.index(GPU_SECTION):]
    with open(ctx.out, "w") as f:
        f.write("\n".join(lines) + kept)


GPU_SECTION = "# Performance on the GPU"


# ---------------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("aotc", nargs="?", default=os.path.join(REPO, "target", "release", "aotc"),
                   help="aotc binary (default: target/release/aotc in the repository)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3,
                   help="timed rounds per runner and row, interleaved; the table reports the "
                   "round with the lowest median (default 3)")
    p.add_argument("--rows", default="", help="comma-separated row names (default: all): "
                   + ", ".join(r["name"] for r in ROWS))
    p.add_argument("--runners", default=",".join(RUNNERS),
                   help="subset of " + ",".join(RUNNERS) + " (default: all)")
    p.add_argument("--workdir", default=os.path.join(REPO, "benchmarks", ".work"),
                   help="exported models, compiled artifacts, results.json")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "PERFORMANCE.md"))
    p.add_argument("--timeout", type=int, default=3600, help="seconds per child process")
    p.add_argument("--python", default=sys.executable, help="Python with torch for the children")
    p.add_argument("--preliminary", default="", metavar="WHY",
                   help='adds the header line "PRELIMINARY: WHY" to the report')
    # child-only
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    for k in ("row", "pt2", "inputs", "package", "onnx", "expected", "outputs"):
        p.add_argument(f"--{k}", help=argparse.SUPPRESS)
    for k in ("rtol", "atol"):
        p.add_argument(f"--{k}", type=float, help=argparse.SUPPRESS)
    return p.parse_args()


def recorded_argv(a):
    """sys.argv with --rounds made explicit: the report's Command section must say how many
    rounds the table was chosen from, also when the default was used."""
    if any(x == "--rounds" or x.startswith("--rounds=") for x in sys.argv):
        return sys.argv
    return sys.argv + ["--rounds", str(a.rounds)]


def main():
    a = parse_args()
    if a.child:
        CHILDREN[a.child](a)
        return
    a.aotc = os.path.abspath(a.aotc)
    a.workdir = os.path.abspath(a.workdir)
    a.runners = [r for r in a.runners.split(",") if r]
    unknown = set(a.runners) - set(RUNNERS)
    if unknown:
        sys.exit(f"compare.py: unknown runners {sorted(unknown)}; they are {', '.join(RUNNERS)}")
    if a.rounds < 1:
        sys.exit("compare.py: --rounds must be at least 1")
    if not os.access(a.aotc, os.X_OK):
        sys.exit(f"compare.py: no aotc binary at {a.aotc} (build it or pass its path)")
    rows = [r for r in ROWS if not a.rows or r["name"] in a.rows.split(",")]
    for d in ("models", "aoti", "aotc"):
        os.makedirs(os.path.join(a.workdir, d), exist_ok=True)
    a.env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    t0, load_start = time.time(), os.getloadavg()[0]
    results = measure(a, rows)
    versions = next((r["prepare"] for r in results if "torch_version" in r["prepare"]), {})
    onnx = next((r["prepare"]["onnx"] for r in results
                 if "onnx_version" in r["prepare"].get("onnx", {})), {})
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        cpu=cpu_model(), cpus=os.cpu_count(), affinity=len(os.sched_getaffinity(0)),
        load_start=load_start, load_end=os.getloadavg()[0], elapsed_s=time.time() - t0,
        torch_version=versions.get("torch_version", "?"),
        torchvision_version=versions.get("torchvision_version", "?"),
        transformers_version=versions.get("transformers_version", "?"),
        ort_version=next((r["ort"]["version"] for r in results if "version" in r["ort"]), "?"),
        openvino_version=next((r["openvino"]["version"] for r in results
                               if "version" in r["openvino"]), "?"),
        onnx_version=onnx.get("onnx_version", "?"),
        onnxscript_version=onnx.get("onnxscript_version", "?"),
        cxx=tool_version([os.environ.get("CXX", "g++"), "--version"]),
        aotc_version=tool_version([a.aotc, "--version"]),
        commit=tool_version(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
        command=shlex.join([os.path.relpath(a.python, REPO) if a.python.startswith(REPO)
                            else a.python] + recorded_argv(a)),
    )
    with open(os.path.join(a.workdir, "results.json"), "w") as f:
        json.dump(dict(meta=meta, threads=a.threads, iters=a.iters, warmup=a.warmup,
                       rounds=a.rounds, rows=results), f, indent=1)
    write_report(a, results, meta)
    print(f"wrote {a.out} and {os.path.join(a.workdir, 'results.json')} "
          f"in {meta['elapsed_s'] / 60:.1f} min")


if __name__ == "__main__":
    main()
