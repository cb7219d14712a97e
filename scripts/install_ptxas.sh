#!/usr/bin/env bash
# Installs ptxas (NVIDIA's PTX assembler) into .tools/ptxas, for tests/tests/ptx_assemble.rs:
# it comes from the PyPI wheel nvidia-cuda-nvcc-cu12 (a static binary needing only libc),
# so no CUDA toolkit is needed. Idempotent: does nothing when .tools/ptxas already runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.tools/ptxas"
if [ -x "$dest" ] && "$dest" --version >/dev/null 2>&1; then
  exit 0
fi
command -v python3 >/dev/null || { echo "install_ptxas: python3 is required" >&2; exit 1; }
echo "==> install_ptxas: downloading ptxas (the nvidia-cuda-nvcc-cu12 wheel) into .tools/"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The system python may lack pip (Debian's python3 without python3-pip): use a venv's then.
pip=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  python3 -m venv "$work/venv"
  pip=("$work/venv/bin/python" -m pip)
fi
"${pip[@]}" download --quiet --no-deps --dest "$work" nvidia-cuda-nvcc-cu12
wheel="$(ls "$work"/nvidia_cuda_nvcc_cu12-*.whl | head -n 1)"
# A wheel is a zip file; Python reads it wherever unzip is missing.
python3 - "$wheel" "$work/ptxas" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    with z.open("nvidia/cuda_nvcc/bin/ptxas") as src, open(sys.argv[2], "wb") as dst:
        dst.write(src.read())
PY
chmod +x "$work/ptxas"
mkdir -p "$root/.tools"
mv "$work/ptxas" "$dest"
"$dest" --version | tail -n 1
