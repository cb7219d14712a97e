#!/usr/bin/env bash
# The Python tests: builds the wheel (scripts/build_wheel.sh), installs it with numpy,
# pytest and ml_dtypes (numpy's bfloat16) into the virtual environment, and runs pytest
# over python/tests. Fixtures of ../shared/fixtures are tested when that folder exists.
#
# usage: scripts/test_python.sh [PYTEST ARGS...]    (AOTC_VENV=DIR as for build_wheel.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${AOTC_VENV:-python/.venv}
export AOTC_VENV=$venv

wheel=$(scripts/build_wheel.sh | tail -n1)
"$venv/bin/python" -m pip install -q --disable-pip-version-check "numpy>=1.21" pytest ml_dtypes
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
echo "installed $wheel" >&2

# The pytest script, not `python -m pytest`: that would put the current directory on
# sys.path, and a source checkout of the package (without its extension) could shadow the
# installed one.
exec "$venv/bin/pytest" -q -p no:cacheprovider python/tests "$@"
