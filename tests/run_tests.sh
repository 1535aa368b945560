#!/usr/bin/env bash
# Installs what is needed, builds everything and runs every test, then the two checks that hold
# the code's style: clang's thread-safety analysis of the libraries (tests/thread_safety_build.sh)
# and the formatting (tests/format_check.sh), each counted as one test case. Prints a per-target
# summary and, last, one line "N passed, N failed[, N skipped]" counting test cases; exits
# non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh || exit 1
source deploy/bazel-env.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
kv_bazel test //... --nocache_test_results --test_summary=short --keep_going "$@" 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}

# Count Catch2 test cases per target; a target that failed without a Catch2 summary (a crash, a
# timeout, a build error) counts as one failed case.
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
passed=0 failed=0 skipped=0
while read -r target status; do
  logfile="$testlogs/$(echo "${target#//}" | tr ':' '/')/test.log"
  summary=$(grep -E "^(All tests passed|test cases:)" "$logfile" 2>/dev/null | tail -n 1)
  # Cases that need hardware this machine lacks print "SKIPPED: <reason>" and count as skipped,
  # not passed.
  s=$(grep -c "^SKIPPED:" "$logfile" 2>/dev/null || true)
  skipped=$((skipped + s))
  if [[ "$summary" =~ ^All\ tests\ passed.*in\ ([0-9]+)\ test\ case ]]; then
    passed=$((passed + BASH_REMATCH[1] - s))
  elif [[ "$summary" =~ test\ cases:\ *([0-9]+)\ \|\ *([0-9]+)\ passed\ \|\ *([0-9]+)\ failed ]]; then
    passed=$((passed + BASH_REMATCH[2] - s))
    failed=$((failed + BASH_REMATCH[3]))
  elif [ "$status" = PASSED ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done < <(grep -oE "^//[^ ]+ +(\(cached\) )?(PASSED|FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE|FLAKY)" "$log" |
         sed -E 's/ +\(cached\)//; s/ +/ /' | sed -E 's/ (NO STATUS|FAILED TO BUILD)$/ FAILED/')

if [ "$bazel_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "bazel test exited with status $bazel_rc (build error?)"
  failed=1
fi
for check in tests/thread_safety_build.sh tests/format_check.sh; do
  if bash "$check"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo
if [ "$skipped" -gt 0 ]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ] && [ "$bazel_rc" -eq 0 ]
