#!/usr/bin/env bash
# The Python tests: builds the wheel (scripts/build_wheel.sh), installs it with numpy,
# pytest and ml_dtypes (numpy's bfloat16) into the virtual environment, and runs pytest
# over python/tests. Fixtures of ../shared/fixtures are tested when that folder exists.
# Models compiled for CUDA run on the fake driver (tests/fake_cuda, built here; its path
# in $AOTC_TEST_FAKE_CUDA), which executes their PTX in an interpreter: no GPU needed.
#
# usage: scripts/test_python.sh [PYTEST ARGS...]    (AOTC_VENV=DIR as for build_wheel.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${AOTC_VENV:-python/.venv}
export AOTC_VENV=$venv

wheel=$(scripts/build_wheel.sh | tail -n1)
cargo build --release -p aotc-fake-cuda >&2
AOTC_TEST_FAKE_CUDA=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/libaotc_fake_cuda.so
export AOTC_TEST_FAKE_CUDA
"$venv/bin/python" -m pip install -q --disable-pip-version-check "numpy>=1.21" pytest ml_dtypes
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
echo "installed $wheel" >&2

# The pytest script, not `python -m pytest`: that would put the current directory on
# sys.path, and a source checkout of the package (without its extension) could shadow the
# installed one.
exec "$venv/bin/pytest" -q -p no:cacheprovider python/tests "$@"
