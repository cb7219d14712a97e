#!/usr/bin/env bash
# The one-call GPU check (issue 24; docs/GPU_CHECK.md): every fixture on cuda:0 against
# PyTorch's recorded outputs, compute-sanitizer on a few models, and timings beside torch.
# It writes gpu_check.md, gpu_check.json and gpu_check.log into $OUT (the device tool's
# output folder), else target/gpu-check.
#
#   scripts/gpu_check.sh --prepare    here: build the release aotc and pack it, stripped and
#                                     xz-compressed, into .gpu/ (ignored by git) for `carry`
#   scripts/gpu_check.sh [--budget S] on the GPU machine (no Rust there): unpacks .gpu/aotc.xz
#   scripts/gpu_check.sh --dry-run    here or in CI: the same script on the fake driver, which
#                                     runs the PTX in an interpreter; a sample of fixtures
set -euo pipefail
cd "$(dirname "$0")/.."

mode=gpu; extra=()
for a in "$@"; do
  case "$a" in
    --prepare) mode=prepare ;;
    --dry-run) mode=dry; extra+=(--dry-run --budget 600) ;;
    *) extra+=("$a") ;;
  esac
done

if [ "$mode" = prepare ]; then
  cargo build --release -p aotc >&2
  mkdir -p .gpu
  strip -o .gpu/aotc target/release/aotc
  xz -T0 -6 -f .gpu/aotc
  ls -l .gpu/aotc.xz >&2
  echo "run on the device with carry [\".gpu\"]: bash scripts/gpu_check.sh" >&2
  exit 0
fi

out=${OUT:-target/gpu-check}
mkdir -p "$out"
if [ -n "${AOTC_BIN:-}" ]; then
  aotc=$AOTC_BIN
elif [ -f .gpu/aotc.xz ] && [ "$mode" = gpu ]; then
  aotc=${TMPDIR:-/tmp}/aotc-gpu-check-bin
  xz -dc .gpu/aotc.xz >"$aotc" && chmod +x "$aotc"
else
  cargo build --release -p aotc >&2
  aotc=target/release/aotc
fi
if [ "$mode" = dry ]; then
  cargo build --release -p aotc-fake-cuda >&2
  export AOTC_CUDA_DRIVER=$PWD/target/release/libaotc_fake_cuda.so
fi
export PYTHONUNBUFFERED=1
python3 scripts/gpu_check.py --aotc "$aotc" --out "$out" "${extra[@]}" 2>&1 | tee "$out/gpu_check.log"
