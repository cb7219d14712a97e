#!/usr/bin/env bash
# Installs what the tests need beyond scripts/setup.sh, each only when missing:
# binutils (`readelf`: the tests check the libraries' dynamic section), valgrind (the fuzz
# campaign and the C-ABI misuse harness check runs for invalid memory accesses), qemu-user
# (tests/tests/cpu_target.rs runs a library on an emulated older CPU), and ptxas in
# .tools/ (tests/tests/ptx_assemble.rs assembles the PTX aotc emits).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "==> setup_tests: $*"; }

missing=()
command -v cc >/dev/null || missing+=(gcc libc6-dev)
command -v readelf >/dev/null || missing+=(binutils)
command -v valgrind >/dev/null || missing+=(valgrind)
command -v qemu-x86_64 >/dev/null || missing+=(qemu-user)
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]} with apt-get"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q && $SUDO apt-get install -y -q "${missing[@]}"
fi
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  step "adding the rustfmt and clippy components with rustup"
  rustup component add rustfmt clippy
fi
scripts/install_ptxas.sh
