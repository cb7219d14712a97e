#!/usr/bin/env bash
# The Ray Serve example's test (examples/ray_serve): Ray Serve from pip, pinned, into the
# Python tests' venv (scripts/test_python.sh made it and installed the aotc wheel), then
# pytest over examples/ray_serve: a local Ray cluster, 1,000 concurrent requests on 1
# and on 2 replicas checked against PyTorch's recorded outputs, a rolling upgrade.
# usage: scripts/test_ray_serve.sh [pytest options]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${AOTC_VENV:-python/.venv}
[ -x "$venv/bin/python" ] || { echo "no $venv: run scripts/test_python.sh first" >&2; exit 1; }
"$venv/bin/python" -c "import aotc" 2>/dev/null || { echo "aotc is not installed in $venv: run scripts/test_python.sh first" >&2; exit 1; }
"$venv/bin/python" -m pip install -q --disable-pip-version-check "ray[serve]==2.60.0" pytest
exec "$venv/bin/pytest" -q -s -p no:cacheprovider -W ignore::DeprecationWarning examples/ray_serve "$@"
