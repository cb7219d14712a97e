"""The wheel's compiler: the `aotc` command and aotc.compile's errors."""
import os
import subprocess
import sys

import pytest

import aotc
import helpers

BIN = os.path.join(os.path.dirname(sys.executable), "aotc")


def test_console_command_runs_the_compiler(tmp_path):
    v = subprocess.run([BIN, "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("aotc "), v.stderr
    so = tmp_path / "m.so"
    done = subprocess.run([BIN, "compile", os.path.join(helpers.fixture("dynamic_batch_mlp"), "model.pt2"), "-o", str(so)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert aotc.load(str(so)).inputs[0]["name"] == "x"


def test_compile_accepts_path_objects(tmp_path):
    out = aotc.compile(helpers.fixture("pytree_io") + "/model.pt2", tmp_path / "p.so")
    assert out == str(tmp_path / "p.so") and os.path.getsize(out) > 0


def test_compile_errors_carry_the_compilers_message(tmp_path):
    with pytest.raises(aotc.Error, match="nonexistent.pt2") as e:
        aotc.compile(tmp_path / "nonexistent.pt2", tmp_path / "x.so")
    assert e.value.code is None and e.value.returncode != 0
    with pytest.raises(aotc.Error, match="bogus"):
        aotc.compile(helpers.fixture("pytree_io") + "/model.pt2", tmp_path / "x.so", bogus_option=1)
    with pytest.raises(aotc.Error, match="missing.safetensors"):
        aotc.compile(helpers.fixture("pytree_io") + "/model.pt2", tmp_path / "x.so", weights=tmp_path / "missing.safetensors")


def test_compile_refuses_other_objects(tmp_path):
    with pytest.raises(TypeError):
        aotc.compile(object(), tmp_path / "x.so")
