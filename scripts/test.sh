#!/usr/bin/env bash
# The project's test command: the Rust workspace's tests, then the Python package's.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
scripts/test_python.sh
