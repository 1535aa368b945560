#!/usr/bin/env bash
# Usage test of the project's programs (common/flags_usage.h): for each PROGRAM FLAG pair,
# `PROGRAM --help` exits 0 and lists FLAG, one of the program's own flags, and
# `PROGRAM --version` exits 0 and prints "PROGRAM VERSION", VERSION being common/flags_usage.h's
# kVersion.
#
#   usage_test.sh FLAGS_USAGE_H PROGRAM FLAG [PROGRAM FLAG ...]
set -uo pipefail

version=$(sed -n 's/.*kVersion\[\] = "\(.*\)";.*/\1/p' "$1")
shift
if [ -z "$version" ]; then
  echo "FAIL: no kVersion in common/flags_usage.h"
  exit 1
fi

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

while [ $# -ge 2 ]; do
  program=$1 flag=$2
  shift 2
  name=$(basename "$program")

  help=$("$program" --help 2>&1)
  code=$?
  [ "$code" -eq 0 ] || fail "$name --help exited $code"
  grep -q -- "^ *$flag " <<<"$help" || fail "$name --help does not list $flag: $help"
  grep -q "SetProgramUsageMessage" <<<"$help" && fail "$name has no usage message: $help"

  printed=$("$program" --version 2>&1)
  code=$?
  [ "$code" -eq 0 ] || fail "$name --version exited $code"
  [ "$printed" = "$name $version" ] ||
    fail "$name --version printed \"$printed\", not \"$name $version\""
done

if [ "$failures" -ne 0 ]; then
  echo "$failures checks failed"
  exit 1
fi
echo "PASS: --help and --version of every program"
