#!/usr/bin/env bash
# Runs pytest over the kvstore package's tests and prints a Catch2-style summary line
# ("test cases: N | P passed | F failed", skipped cases counted as passed and listed on
# "SKIPPED: ..." lines) for tests/run_tests.sh.
#
# Usage: run_pytest.sh PATH/_kvstore.so TEST_FILE...
# The package is assembled in a temporary folder (its .py files beside the built module) and
# put on PYTHONPATH. Tests run with Debian's interpreter, whose numpy, torch and pytest they use
# ($KV_PYTHON overrides it).
set -uo pipefail
module="$1"
shift
python="${KV_PYTHON:-/usr/bin/python3}"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/kvstore-py.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/kvstore"
cp "$(dirname "$module")"/kvstore/*.py "$work/kvstore/"
cp "$module" "$work/kvstore/_kvstore.so"
export PYTHONPATH="$work${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
"$python" -m pytest -v -p no:cacheprovider -o console_output_style=classic --durations=8 \
  --junitxml="$work/junit.xml" "$@"
rc=$?
"$python" - "$work/junit.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as e:
    print(f"test cases: 1 | 0 passed | 1 failed   (no pytest report: {e})")
    sys.exit(0)
total = failed = skipped = 0
for case in root.iter("testcase"):
    total += 1
    if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
    elif case.find("skipped") is not None:
        skipped += 1
        print(f"SKIPPED: {case.get('name')}: {case.find('skipped').get('message')}")
print(f"test cases: {total} | {total - failed} passed | {failed} failed")
PY
exit $rc
