#!/usr/bin/env bash
# Builds the C++ libraries with clang and -Wthread-safety -Werror=thread-safety: the Abseil
# thread-safety annotations (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...) are checked,
# not only written. GCC, the project's compiler, ignores them. Run by tests/run_tests.sh (the
# README's test command) after the tests.
#
#   bash tests/thread_safety_build.sh
#
# Installs clang from Debian when missing. Uses an output base (one per clone) and a disk cache
# of its own under ~/.cache/kvstore, so it neither invalidates nor shares the GCC build's
# results, and makes no bazel-* links; the second run is fast. Without CUDA (nvcc's host
# compiler stays GCC), and at -O0 without debug information: the analysis is the front end's, so
# code generation is kept cheap (the check still fails on an unguarded access). Exits non-zero,
# printing the compiler's errors, when an access breaks an annotation.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang++ >/dev/null 2>&1; then
  echo "thread_safety_build: installing clang" >&2
  apt-get update -qq >/dev/null && apt-get install -y -qq clang >/dev/null
fi
cache="${KV_CLANG_CACHE:-$HOME/.cache/kvstore}"
# An output base per clone (Bazel ties one to a workspace); the disk cache is shared.
output_base="$cache/clang-output-base-$(pwd | md5sum | cut -c1-12)"
mkdir -p "$cache"
# The libraries - where the annotated classes and the accesses to their guarded members live -
# and the Python module: built quickly enough for the README's test command (a test's own
# annotations, in two test files, go unchecked).
query='kind("cc_library", //client/... + //common/... + //server/... + //tests/in_process/...)'
mapfile -t targets < <(bazel --output_base="$output_base" query --noshow_progress "$query" \
  2>/dev/null)
if ((${#targets[@]} < 10)); then
  echo "thread_safety_build: the query for the libraries found ${#targets[@]} targets" >&2
  exit 1
fi
targets+=(//python:_kvstore.so)
CC=clang CXX=clang++ bazel --output_base="$output_base" build \
  --disk_cache="$cache/bazel-disk-cache-clang" --define=cuda=off --symlink_prefix=/ \
  --copt=-Wthread-safety --copt=-Werror=thread-safety --copt=-Wno-unknown-warning-option \
  --copt=-O0 --copt=-g0 \
  --keep_going "${targets[@]}"
status=$?
bazel --output_base="$output_base" shutdown >/dev/null 2>&1 || true
echo "thread_safety_build: clang -Werror=thread-safety build of ${#targets[@]} targets $( ((status == 0)) && echo passed || echo FAILED)"
exit $status
