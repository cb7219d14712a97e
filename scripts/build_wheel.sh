#!/usr/bin/env bash
# Builds the Python wheel of aotc (one abi3 wheel for this platform, Python >= 3.8): the
# aotc._native extension (python/, built by maturin), the aotc package and the aotc
# compiler binary (as package data, run by the `aotc` console command and aotc.compile).
# Prints the wheel's path on the last line of stdout.
#
# usage: scripts/build_wheel.sh        (AOTC_VENV=DIR: the virtual environment to use,
#                                        default python/.venv, created when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${AOTC_VENV:-python/.venv}

apt_install() {
    local SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -q >&2 && $SUDO apt-get install -y -q "$@" >&2
}
if [ ! -x "$venv/bin/python" ]; then
    command -v python3 >/dev/null || apt_install python3 python3-venv
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        # Debian/Ubuntu ship venv (ensurepip) separately.
        rm -rf "$venv"
        apt_install python3-venv
        python3 -m venv "$venv" >&2
    fi
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.5,<2" >&2

cargo build --release -p aotc --bin aotc >&2
mkdir -p python/aotc/_bin
# Stripped: the symbols are most of the binary's size and no use to a wheel's users.
if command -v strip >/dev/null; then
    strip -o python/aotc/_bin/aotc target/release/aotc
else
    cp target/release/aotc python/aotc/_bin/aotc
fi
chmod 755 python/aotc/_bin/aotc

out=target/wheels
rm -f "$out"/aotc-*.whl
"$venv/bin/maturin" build --release --manifest-path python/Cargo.toml --interpreter "$venv/bin/python" --out "$out" >&2
ls -t "$out"/aotc-*.whl | head -n1
