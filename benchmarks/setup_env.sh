#!/usr/bin/env bash
# Creates the Python environment for benchmarks/compare.py: a venv (default
# benchmarks/.venv, or the first argument) with torch, torchvision and safetensors from pip,
# transformers (the BERT-base row, built from a config: no download), and the peer runners
# ONNX Runtime and OpenVINO with torch's ONNX exporter (onnx, onnxscript), pinned to the
# versions the benchmark was last run with.
# Only the benchmark needs this; building and testing aotc never depends on torch.
#
#   benchmarks/setup_env.sh [VENV_DIR]
#
# Environment:
#   PYTHON           interpreter that creates the venv (default: python3, 3.10+)
#   TORCH_VERSION    pip version spec for torch (default: 2.15.*, the version the shared
#                    fixtures were exported with; torch.export archives are version-sensitive)
#   TORCH_INDEX_URL  extra index for torch/torchvision wheels, e.g.
#                    https://download.pytorch.org/whl/cpu for the smaller CPU-only wheels
# AOTInductor also needs a C++ compiler at run time (g++ or $CXX); this script checks for one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-$here/.venv}
python=${PYTHON:-python3}
torch_spec="torch==${TORCH_VERSION:-2.15.*}"

"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet)
"${pip[@]}" --upgrade pip
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  "${pip[@]}" --extra-index-url "$TORCH_INDEX_URL" "$torch_spec" torchvision
else
  "${pip[@]}" "$torch_spec" torchvision
fi
"${pip[@]}" safetensors transformers==5.24.0 \
  onnx==1.23.2 onnxscript==0.7.2 onnxruntime==1.32.0 openvino==2026.4.1

"$venv/bin/python" -c 'import torch, torchvision, safetensors, transformers
import onnx, onnxscript, onnxruntime, openvino
print("torch", torch.__version__, "| torchvision", torchvision.__version__,
      "| safetensors", safetensors.__version__, "| transformers", transformers.__version__)
print("onnx", onnx.__version__, "| onnxscript", onnxscript.__version__,
      "| onnxruntime", onnxruntime.__version__, "| openvino", openvino.__version__)'
command -v "${CXX:-g++}" >/dev/null ||
  echo "setup_env: warning: no C++ compiler (${CXX:-g++}); the AOTInductor column will fail" >&2
echo "ready: $venv/bin/python $here/compare.py [path/to/aotc]"
