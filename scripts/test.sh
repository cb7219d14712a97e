#!/usr/bin/env bash
# The project's test command (what .ci/run runs): installs the tests' tools
# (scripts/setup_tests.sh), then runs every check even when an earlier one fails:
#   rustfmt       cargo fmt --check, for the workspace and python/ (rustfmt.toml)
#   clippy        cargo clippy --all-targets -- -D warnings, for the workspace and python/
#   cargo test    the Rust workspace's tests (--no-fail-fast: every test binary runs)
#   python        scripts/test_python.sh (the wheel, then pytest over python/tests)
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
run gpu-check env -u OUT bash scripts/gpu_check.sh --dry-run

# Counts: cargo's "test result: ... N passed; M failed" lines, pytest's closing line.
read -r rust_passed rust_failed < <(grep -E '^test result:' "$logs/cargo-test.log" |
  sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/' | awk '{p += $1; f += $2} END {print p + 0, f + 0}')
py_line=$(grep -E '^=* ?[0-9]+ (passed|failed)' "$logs/python.log" | tail -n1)
py_passed=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed.*/\2/p' <<<"$py_line")
py_failed=$(sed -nE 's/(^|.*[^0-9])([0-9]+) failed.*/\2/p' <<<"$py_line")
py_errors=$(sed -nE 's/(^|.*[^0-9])([0-9]+) errors?.*/\2/p' <<<"$py_line")
passed=$((rust_passed + ${py_passed:-0}))
py_failed=$(( ${py_failed:-0} + ${py_errors:-0} ))
failed=$((rust_failed + py_failed))
# A check that failed without a failing test (formatting, lints, a build error) counts as one.
for check in "${failed_checks[@]}"; do
  case $check in
    cargo-test*) [ "$rust_failed" -gt 0 ] || failed=$((failed + 1)) ;;
    python*) [ "$py_failed" -gt 0 ] || failed=$((failed + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
done

echo
echo "==> summary"
echo "rust: $rust_passed passed, $rust_failed failed; python: ${py_passed:-0} passed, $py_failed failed"
if [ ${#failed_checks[@]} -gt 0 ]; then
  echo "failed checks:"
  printf '  %s\n' "${failed_checks[@]}"
  echo "failed tests:"
  grep -hE '^test .* \.\.\. FAILED$' "$logs/cargo-test.log" | sed -E 's/^test (.*) \.\.\. FAILED$/  rust: \1/' | sort -u
  grep -hE '^(FAILED|ERROR) ' "$logs/python.log" | sed 's/^/  python: /'
  grep -hE '^ +`?-p .*--(test|lib|bin)' "$logs/cargo-test.log" | sed 's/^ */  rust target: /'
fi
echo "summary: $passed passed, $failed failed"
[ ${#failed_checks[@]} -eq 0 ]
