#!/usr/bin/env bash
# Installs what building and testing aotc need beyond the Rust toolchain: a C compiler
# driver (`cc`, used by `aotc compile` to link and by the tests to build the C example)
# binutils (`readelf`, used by the tests to check the dynamic section) and valgrind (the
# fuzz campaign and the C-ABI misuse harness check runs for invalid memory accesses),
# and ptxas in .tools/ (tests/tests/ptx_assemble.rs assembles the PTX aotc emits).
set -euo pipefail
missing=()
command -v cc >/dev/null || missing+=(gcc libc6-dev)
command -v readelf >/dev/null || missing+=(binutils)
command -v valgrind >/dev/null || missing+=(valgrind)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q && $SUDO apt-get install -y -q "${missing[@]}"
fi
command -v cargo >/dev/null || { echo "setup: cargo (Rust 1.95+) is required" >&2; exit 1; }
# ptxas (from the nvidia-cuda-nvcc-cu12 wheel) for tests/tests/ptx_assemble.rs.
"$(dirname "$0")/install_ptxas.sh"
