#!/usr/bin/env bash
# Builds aotc, compiles the example archive (an MLP whose buffer counts its calls) into a
# self-contained .so, and runs it twice (state carries over), printing the outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p aotc --bin aotc
mkdir -p target/example
./target/release/aotc compile examples/mlp/model.pt2 -o target/example/mlp.so
./target/release/aotc run target/example/mlp.so \
  --input examples/mlp/inputs_0.safetensors --input examples/mlp/inputs_1.safetensors \
  --output-dir target/example/out --print
./target/release/aotc inspect target/example/mlp.so
