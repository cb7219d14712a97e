#!/usr/bin/env bash
# The long fuzz campaign: mutants of every fixture that compiles (vendored, and
# ../shared/fixtures with its single-op and model folders when present), every compiled
# mutant run under valgrind. Failing mutants are saved, one folder each, with the
# mutation, stderr and the commands that reproduce it.
#
# usage: scripts/fuzz.sh [MUTANTS [SEED]]     (defaults: 5000, 1)
#   OUT=DIR   where failures go (default target/fuzz-failures)
#   JOBS=N    parallel workers (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."

mutants=${1:-5000}
seed=${2:-1}
out=${OUT:-target/fuzz-failures}
jobs=${JOBS:-$(nproc)}

command -v valgrind >/dev/null || { echo "fuzz.sh: valgrind is needed (scripts/setup.sh installs it)" >&2; exit 2; }
cargo build --release -p aotc -p aotc-tests --bin aotc --bin aotc-fuzz

fixtures=tests/fixtures
for dir in ../shared/fixtures ../shared/fixtures/ops ../shared/fixtures/models; do
    [ -d "$dir" ] && fixtures="$fixtures,$dir"
done

rm -rf "$out"
exec target/release/aotc-fuzz --aotc target/release/aotc --fixtures "$fixtures" \
    --mutants "$mutants" --seed "$seed" --jobs "$jobs" --valgrind all --out "$out"
