#!/usr/bin/env bash
# The project's test command (what .ci/run runs): installs the tests' tools
# (scripts/setup_tests.sh), then runs every check even when an earlier one fails:
#   rustfmt       cargo fmt --check, for the workspace and python/ (rustfmt.toml)
#   clippy        cargo clippy --all-targets -- -D warnings, for the workspace and python/
#   cargo test    the Rust workspace's tests (--no-fail-fast: every test binary runs)
#   python        scripts/test_python.sh (the wheel, then pytest over python/tests)
#   ray-serve     scripts/test_ray_serve.sh (Ray Serve from pip; pytest over examples/ray_serve)
#   gpu-check     scripts/gpu_check.sh --dry-run (the GPU check on the fake driver)
# and ends with a summary naming each failed check and test, and a closing line
# "summary: N passed, N failed" over all tests. Exit status 0 only when all pass.
#
# usage: scripts/test.sh        (logs in target/test-logs/)
set -uo pipefail
cd "$(dirname "$0")/.."
logs=target/test-logs
mkdir -p "$logs"
bash scripts/setup_tests.sh || { echo "test.sh: installing the tests' tools failed" >&2; exit 1; }

failed_checks=()
# run NAME COMMAND...: runs it with its output on the terminal and in $logs/NAME.log.
run() {
  local name=$1; shift
  echo "==> $name: $*"
  local start=$SECONDS
  "$@" 2>&1 | tee "$logs/$name.log"
  local status=${PIPESTATUS[0]}
  echo "==> $name: exit $status after $((SECONDS - start)) s"
  [ "$status" -eq 0 ] || failed_checks+=("$name (exit $status, log $logs/$name.log)")
}

run rustfmt bash -c 'cargo fmt --all --check && cd python && cargo fmt --check'
run clippy bash -c 'cargo clippy --workspace --all-targets -- -D warnings && cd python && cargo clippy --all-targets -- -D warnings'
run cargo-test cargo test --workspace --no-fail-fast
run python scripts/test_python.sh -rfE
run ray-serve scripts/test_ray_serve.sh -rfE
run gpu-check env -u OUT bash scripts/gpu_check.sh --dry-run

# Counts: cargo's "test result: ... N passed; M failed" lines, pytest's closing line.
read -r rust_passed rust_failed < <(grep -E '^test result:' "$logs/cargo-test.log" |
  sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/' | awk '{p += $1; f += $2} END {print p + 0, f + 0}')
# pytest_counts LOG: "PASSED FAILED" from a pytest run's closing line (errors count as failed).
pytest_counts() {
  local line p f e
  line=$(grep -E '^=* ?[0-9]+ (passed|failed)' "$1" 2>/dev/null | tail -n1)
  p=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed.*/\2/p' <<<"$line")
  f=$(sed -nE 's/(^|.*[^0-9])([0-9]+) failed.*/\2/p' <<<"$line")
  e=$(sed -nE 's/(^|.*[^0-9])([0-9]+) errors?.*/\2/p' <<<"$line")
  echo "${p:-0} $(( ${f:-0} + ${e:-0} ))"
}
read -r py_passed py_failed < <(pytest_counts "$logs/python.log")
read -r ray_passed ray_failed < <(pytest_counts "$logs/ray-serve.log")
py_passed=$((py_passed + ray_passed))
py_failed=$((py_failed + ray_failed))
passed=$((rust_passed + py_passed))
failed=$((rust_failed + py_failed))
# A check that failed without a failing test (formatting, lints, a build error) counts as one.
for check in "${failed_checks[@]}"; do
  case $check in
    cargo-test*) [ "$rust_failed" -gt 0 ] || failed=$((failed + 1)) ;;
    python*) [ "$py_failed" -gt "$ray_failed" ] || failed=$((failed + 1)) ;;
    ray-serve*) [ "$ray_failed" -gt 0 ] || failed=$((failed + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
done

echo
echo "==> summary"
echo "rust: $rust_passed passed, $rust_failed failed; python (with ray-serve): $py_passed passed, $py_failed failed"
if [ ${#failed_checks[@]} -gt 0 ]; then
  echo "failed checks:"
  printf '  %s\n' "${failed_checks[@]}"
  echo "failed tests:"
  grep -hE '^test .* \.\.\. FAILED$' "$logs/cargo-test.log" | sed -E 's/^test (.*) \.\.\. FAILED$/  rust: \1/' | sort -u
  grep -hE '^(FAILED|ERROR) ' "$logs/python.log" "$logs/ray-serve.log" 2>/dev/null | sed 's/^/  python: /'
  grep -hE '^ +`?-p .*--(test|lib|bin)' "$logs/cargo-test.log" | sed 's/^ */  rust target: /'
fi
echo "summary: $passed passed, $failed failed"
[ ${#failed_checks[@]} -eq 0 ]
