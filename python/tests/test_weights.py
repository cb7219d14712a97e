"""External weights from Python: a library compiled with external_weights=True runs from
the file beside it; m.load_weights swaps in a second weights file (by path or bytes),
checked against a library compiled with those weights embedded; bad files raise
aotc.Error with status AOTC_ERR_WEIGHTS and a message naming what is wrong."""
import json
import os
import struct

import numpy as np
import pytest

import aotc
import helpers


def scaled_weights(archive_dir, out):
    """The fixture's weights (read from the archive's payloads) times 2 plus 0.01, as a
    --weights safetensors file keyed by FQN."""
    import zipfile
    with zipfile.ZipFile(os.path.join(archive_dir, "model.pt2")) as z:
        names = z.namelist()
        cfg_name = next(n for n in names if n.endswith("data/weights/model_weights_config.json"))
        prefix = cfg_name[: -len("model_weights_config.json")]
        cfg = json.loads(z.read(cfg_name))["config"]
        header, body = {}, b""
        for fqn, meta in sorted(cfg.items()):
            tm = meta["tensor_meta"]
            shape = [s["as_int"] for s in tm["sizes"]]
            assert tm["dtype"] == 7, "float32 weights"
            raw = z.read(prefix + meta["path_name"])
            n = int(np.prod(shape)) if shape else 1
            values = np.frombuffer(raw, np.float32)[tm["storage_offset"]["as_int"]:][:n] * 2 + 0.01
            data = values.astype(np.float32).tobytes()
            header[fqn] = {"dtype": "F32", "shape": shape, "data_offsets": [len(body), len(body) + len(data)]}
            body += data
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    d = helpers.fixture("dynamic_batch_mlp")
    pt2 = os.path.join(d, "model.pt2")
    out = tmp_path_factory.mktemp("weights")
    fqn = str(out / "second.safetensors")
    scaled_weights(d, fqn)
    # The second weights file: another compilation of the program, with those weights.
    second = str(out / "second.weights.safetensors")
    aotc.compile(pt2, str(out / "second.so"), weights=fqn, weights_out=second)
    return {
        "dir": d,
        "out": out,
        "external": aotc.compile(pt2, str(out / "m.so"), external_weights=True),
        # The reference: the second weights linked in.
        "reference": aotc.compile(pt2, str(out / "ref.so"), weights=fqn),
        "second_file": second,
    }


def calls(d):
    return [(helpers.flat_inputs(d, c, 1)[0], helpers.read_safetensors(os.path.join(d, f"expected_{c}.safetensors"))[0]["0"]) for c in range(3)]


def test_external_weights_match_pytorch(libs):
    assert os.path.exists(os.path.join(libs["out"], "m.weights.safetensors"))
    assert json.loads(aotc.load(libs["external"]).metadata_json)["weights"]["external"] is True
    m = aotc.load(libs["external"])
    rtol, atol = helpers.tolerance(libs["dir"])
    for i, (x, want) in enumerate(calls(libs["dir"])):
        helpers.compare(f"call {i}", want, m(x), rtol, atol)


@pytest.mark.parametrize("how", ["path", "pathlike", "bytes", "at_load"])
def test_load_weights_swaps_in_a_second_file(libs, how):
    second = libs["second_file"]
    ref = aotc.load(libs["reference"])
    if how == "at_load":
        m = aotc.load(libs["external"], weights=second)
    else:
        m = aotc.load(libs["external"])
        arg = {"path": second, "pathlike": __import__("pathlib").Path(second), "bytes": open(second, "rb").read()}[how]
        m.load_weights(arg)
    rtol, atol = helpers.tolerance(libs["dir"])
    for i, (x, original) in enumerate(calls(libs["dir"])):
        got, want = m(x), ref(x)
        assert not np.allclose(got, original, rtol=rtol, atol=atol), "the second weights change the outputs"
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"call {i}")


def test_bad_weights_raise_with_the_librarys_message(libs, tmp_path):
    m = aotc.load(libs["external"])
    good = open(os.path.join(libs["out"], "m.weights.safetensors"), "rb").read()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good[:-64])
    with pytest.raises(aotc.Error) as e:
        m.load_weights(str(cut))
    assert e.value.status == "AOTC_ERR_WEIGHTS" and "truncated" in str(e.value) and "cut.safetensors" in str(e.value)
    with pytest.raises(aotc.Error, match="not a safetensors file"):
        m.load_weights(b"garbage bytes")
    with pytest.raises(aotc.Error, match="No such file"):
        aotc.load(libs["external"], weights=str(tmp_path / "missing.safetensors"))
    with pytest.raises(TypeError):
        m.load_weights(42)
    # The failed swaps left the instance as it was.
    x, want = calls(libs["dir"])[0]
    helpers.compare("after failed swaps", want, m(x), *helpers.tolerance(libs["dir"]))
