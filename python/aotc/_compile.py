"""aotc.compile: a torch.export program (or its saved archive) into a native library."""
import os
import subprocess
import tempfile

from ._native import Error
from ._paths import cli_binary


def _flags(options):
    flags = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            flags.append(flag)
        else:
            flags += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return flags


def compile(program, output, *, verbose=False, **options):
    """Compiles `program` into the shared library `output` and returns its path.

    program: a path to a torch.export archive (.pt2) or a bare model.json, or a
    torch.export.ExportedProgram (saved with torch.export.save into a temporary .pt2).
    options: the flags of `aotc compile` by name, e.g. weights="w.safetensors"
    (True for a bare flag). verbose=True prints the compiler's report.
    Raises aotc.Error with the compiler's message when compilation fails.
    """
    output = os.fspath(output)
    with tempfile.TemporaryDirectory(prefix="aotc-") as tmp:
        if isinstance(program, (str, bytes, os.PathLike)):
            source = os.fsdecode(program)
        else:
            try:
                import torch.export
            except ImportError as e:  # pragma: no cover - only without torch
                raise TypeError(f"aotc.compile: expected a path or a torch.export.ExportedProgram, got {type(program).__name__}") from e
            if not isinstance(program, torch.export.ExportedProgram):
                raise TypeError(f"aotc.compile: expected a path or a torch.export.ExportedProgram, got {type(program).__name__}")
            source = os.path.join(tmp, "model.pt2")
            torch.export.save(program, source)
        argv = [cli_binary(), "compile", source, "-o", output] + (["--verbose"] if verbose else []) + _flags(options)
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        message = done.stderr.strip() or done.stdout.strip() or f"aotc compile exited with status {done.returncode}"
        if message.startswith("error: "):
            message = message[len("error: "):]
        err = Error(message)
        err.code, err.status = None, None
        err.returncode = done.returncode
        raise err
    if verbose:
        print(done.stdout, end="")
    return output
