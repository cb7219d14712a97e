#!/usr/bin/env bash
# Installs what building and using aotc need beyond the Rust toolchain (a C compiler
# driver, `cc`, which `aotc compile` links with, and binutils' `nm`, with which the build
# lists the support library's symbols) and builds the `aotc` command. Prints a
# line per step. The tests' own tools come with `scripts/setup_tests.sh` (run by
# scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "==> setup: $*"; }

command -v cargo >/dev/null || { echo "setup: cargo (Rust 1.95+) is required: https://rustup.rs" >&2; exit 1; }
if ! command -v cc >/dev/null || ! command -v nm >/dev/null; then
  step "installing a C compiler driver and binutils (gcc, libc6-dev, binutils) with apt-get"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q && $SUDO apt-get install -y -q gcc libc6-dev binutils
fi
step "building aotc (cargo build --release -p aotc; a few minutes the first time)"
cargo build --release -p aotc --bin aotc
step "done: target/release/aotc"
