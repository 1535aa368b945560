#!/usr/bin/env bash
# Compares two builds of the data path with kvbench, alternating them so that both see the same
# moments of a noisy machine.
#
#   bash tests/bench/kvbench_ab.sh snapshot DIR     # copy bazel-bin's kvbench, kvserver and
#                                                   # scheduler (build them first) into DIR
#   bash tests/bench/kvbench_ab.sh compare ROUNDS DIR_A DIR_B [kvbench flags]
#
# `compare` runs kvbench from DIR_A, then DIR_B, ROUNDS times, each with the given flags (for
# example --only=push_100kx16B_bucket --reps=1000), and prints every case's median and minimum
# (ms) per build and round, grouped by case.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)

case "${1:-}" in
  snapshot)
    [[ $# -eq 2 ]] || { echo "usage: $0 snapshot DIR" >&2; exit 2; }
    mkdir -p "$2"
    for binary in tests/bench/kvbench server/kvserver server/scheduler/scheduler; do
      [[ -x "$root/bazel-bin/$binary" ]] || {
        echo "kvbench_ab: $root/bazel-bin/$binary is missing: build //tests/bench:kvbench," \
             "//server:kvserver and //server/scheduler:scheduler first" >&2
        exit 1
      }
      cp "$root/bazel-bin/$binary" "$2/"
    done
    ;;
  compare)
    [[ $# -ge 4 ]] || { echo "usage: $0 compare ROUNDS DIR_A DIR_B [kvbench flags]" >&2; exit 2; }
    rounds=$2; a=$3; b=$4; shift 4
    for ((r = 1; r <= rounds; r++)); do
      for dir in "$a" "$b"; do
        "$dir/kvbench" --kvserver="$dir/kvserver" --scheduler="$dir/scheduler" "$@" |
          awk -v build="$dir" -v round="$r" \
            '/_(1w1s|2w2s) / { printf "%-32s %-24s round %d  median %s  min %s\n", $1, build, round, $2, $3 }'
      done
    done | sort -s -k1,1
    ;;
  *)
    echo "usage: $0 snapshot DIR | compare ROUNDS DIR_A DIR_B [kvbench flags]" >&2
    exit 2
    ;;
esac
