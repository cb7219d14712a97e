"""Where the packaged `aotc` command-line binary lives."""
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))


def cli_binary():
    """The aotc compiler executable: $AOTC_CLI, the one shipped in the wheel, else `aotc`
    on PATH (a checkout's target/release/aotc, for instance)."""
    env = os.environ.get("AOTC_CLI")
    if env:
        return env
    packaged = os.path.join(_HERE, "_bin", "aotc")
    if os.path.isfile(packaged):
        return packaged
    found = shutil.which("aotc")
    if found and not _is_script(found):  # not this package's own console script
        return found
    raise FileNotFoundError("the aotc compiler binary is not in this installation (aotc/_bin/aotc) "
                            "and not on PATH; set AOTC_CLI to its path")


def _is_script(path):
    with open(path, "rb") as f:
        return f.read(2) == b"#!"
