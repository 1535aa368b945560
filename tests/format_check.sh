#!/usr/bin/env bash
# Checks that every C++ and CUDA source is as clang-format leaves it (.clang-format: Google
# style, 100 columns). Run by .ci/run; prints the files that differ and how to fix them.
#
#   bash tests/format_check.sh          # check
#   bash tests/format_check.sh --fix    # reformat in place
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "format_check: installing clang-format" >&2
  apt-get update -qq >/dev/null && apt-get install -y -qq clang-format >/dev/null
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' | grep -v '^bazel/')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
differ=()
for f in "${files[@]}"; do
  clang-format --style=file "$f" | cmp -s - "$f" || differ+=("$f")
done
if ((${#differ[@]} > 0)); then
  echo "format_check: ${#differ[@]} files differ from clang-format (bash tests/format_check.sh --fix):"
  printf '  %s\n' "${differ[@]}"
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
