"""Fixture reading and comparison for the Python tests, mirroring tests/src/lib.rs:
safetensors files (parsed here: no torch, no safetensors package), the pytree call spec
(to build (args, kwargs) from a fixture's flat inputs) and PyTorch's tolerances."""
import json
import os
import struct

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The repository's fixtures (tests/fixtures/README.md), or $AOTC_FIXTURES as in the Rust tests.
VENDORED = os.environ.get("AOTC_FIXTURES") or os.path.join(REPO, "tests", "fixtures")

_DTYPES = {
    "U8": np.uint8, "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
    "F16": np.float16, "F32": np.float32, "F64": np.float64, "BOOL": np.bool_,
}


def _dtype(name):
    if name == "BF16":
        if ml_dtypes is None:
            raise RuntimeError("bfloat16 fixture: pip install ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_DTYPES[name])


def read_safetensors(path):
    """{key: array} and the header's "scalars" metadata ({key: python value})."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    tensors = {}
    for key, t in header.items():
        start, end = t["data_offsets"]
        dt = _dtype(t["dtype"])
        tensors[key] = np.frombuffer(body[start:end], dtype=dt).reshape(t["shape"]).copy()
    scalars = json.loads(meta["scalars"]) if "scalars" in meta else {}
    return tensors, scalars


def fixture_dirs():
    """(name, dir) of every model fixture: those of tests/fixtures and of its models/
    folder."""
    found = {}
    for root in [VENDORED, os.path.join(VENDORED, "models")]:
        for name in sorted(os.listdir(root)):
            d = os.path.join(root, name)
            if os.path.isfile(os.path.join(d, "model.pt2")) and name not in found:
                found[name] = d
    return sorted(found.items())


def fixture(name):
    for n, d in fixture_dirs():
        if n == name:
            return d
    raise LookupError(f"fixture {name} not found in {VENDORED}")


def info(d):
    with open(os.path.join(d, "info.json")) as f:
        return json.load(f)


def tolerance(d):
    t = info(d).get("tolerance")
    return (t["rtol"], t["atol"]) if t else (1e-3, 1e-4)


def flat_inputs(d, call, count):
    tensors, scalars = read_safetensors(os.path.join(d, f"inputs_{call}.safetensors"))
    out = []
    for i in range(count):
        k = str(i)
        if k in tensors:
            out.append(tensors[k])
        elif k in scalars:
            out.append(scalars[k])
        else:
            raise KeyError(f"{d}: no input {i}")
    return out


def compare(what, want, got, rtol, atol):
    """Raises AssertionError at the first element out of tolerance, as tests/src/lib.rs
    compare does: same dtype and shape; equal, both NaN, or (floats)
    |got - want| <= atol + rtol * |want|."""
    assert isinstance(got, np.ndarray), f"{what}: got a {type(got).__name__}, not an array"
    assert (want.dtype, want.shape) == (got.dtype, got.shape), f"{what}: want {want.dtype}{want.shape}, got {got.dtype}{got.shape}"
    w = want.astype(np.float64).ravel()
    g = got.astype(np.float64).ravel()
    is_float = want.dtype.kind == "f" or want.dtype.name == "bfloat16"
    with np.errstate(invalid="ignore"):
        ok = (np.isnan(w) & np.isnan(g)) | (w == g)
        if is_float:
            ok |= np.abs(w - g) <= atol + rtol * np.abs(w)
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, f"{what}: element {bad[0]}: want {w[bad[0]]}, got {g[bad[0]]} (rtol {rtol}, atol {atol})"


# The call spec (torch.utils._pytree, serialised by torch.export), independently of the
# package's own (Rust) implementation.

def _node(spec):
    ty = spec["type"]
    ctx = spec.get("context")
    # A namedtuple's context is its serialized type name as is, others' a JSON text.
    if isinstance(ctx, str) and ty != "collections.namedtuple":
        ctx = json.loads(ctx)
    return ty, ctx, spec.get("children_spec", [])


def _keys(ty, ctx):
    return ctx["dict_context"] if ty == "collections.defaultdict" and isinstance(ctx, dict) else ctx


def unflatten(spec_json, leaves):
    """The tree `spec_json` (a TreeSpec as JSON text) describes, from its leaves."""
    it = iter(leaves)

    def go(spec):
        ty, ctx, kids = _node(spec)
        if ty is None:
            return next(it)
        if ty in ("builtins.NoneType", "NoneType"):
            return None
        values = [go(k) for k in kids]
        if ty in ("builtins.tuple", "collections.namedtuple"):
            return tuple(values)
        if ty == "builtins.list":
            return values
        if ty in ("builtins.dict", "collections.OrderedDict", "collections.defaultdict"):
            return dict(zip(_keys(ty, ctx), values))
        raise ValueError(f"node type {ty}")

    version, root = json.loads(spec_json)
    assert version == 1
    return go(root)


def flatten(spec_json, tree):
    """The leaves of `tree` in spec order, checking its structure against the spec."""
    out = []

    def go(spec, v):
        ty, ctx, kids = _node(spec)
        if ty is None:
            out.append(v)
        elif ty in ("builtins.NoneType", "NoneType"):
            assert v is None, f"expected None, got {v!r}"
        elif ty == "builtins.list":
            assert isinstance(v, list) and len(v) == len(kids), f"expected a list of {len(kids)}, got {type(v).__name__}"
            for k, x in zip(kids, v):
                go(k, x)
        elif ty in ("builtins.tuple", "collections.namedtuple"):
            assert isinstance(v, tuple) and len(v) == len(kids), f"expected a tuple of {len(kids)}, got {type(v).__name__}"
            for k, x in zip(kids, v):
                go(k, x)
        else:
            keys = _keys(ty, ctx)
            assert isinstance(v, dict) and list(v.keys()) == list(keys), f"expected a dict with keys {keys}, got {v!r}"
            for k, key in zip(kids, keys):
                go(k, v[key])

    version, root = json.loads(spec_json)
    go(root, tree)
    return out


def call_with_flat(model, leaves):
    """model(*args, **kwargs) with (args, kwargs) rebuilt from the flat inputs; the
    output tree flattened back into a list."""
    args, kwargs = unflatten(model.in_spec, leaves)
    out = model(*args, **kwargs)
    return flatten(model.out_spec, out)
