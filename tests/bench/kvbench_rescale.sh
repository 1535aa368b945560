#!/usr/bin/env bash
# What adding a kvserver to a running job stalls, and how many bytes it moves: kvbench's
# push_100MB_2w2s (2 workers, 2 kvservers, one 100 MB key split over both) runs, and JOIN_AFTER
# seconds in, a kvserver started with --join joins the job: the scheduler cuts both servers,
# moves the parts the placement over 3 servers gives each server and publishes the new view.
#
#   bash tests/bench/kvbench_rescale.sh ROUNDS [kvbench flags]     # ROUNDS runs, one join each
#
# Prints, per run, the scheduler's rescale lines (the cut, the move with its bytes, the whole)
# and kvbench's row: the median repetition, and the longest, which holds the rescale. Builds
# kvbench first, unless KVBENCH names a kvbench to run (a copy of bazel-bin/tests/bench/kvbench
# with its .runfiles folder beside it). JOIN_AFTER defaults to 8; CASE (default
# push_100MB_2w2s) and REPS (default 400) choose the case and its repetitions.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/kvbench_rounds.sh "${KVBENCH_RESCALE_DIR:-/tmp/kvbench-rescale}" "$@"
shift
kvserver="$kvbench.runfiles/kvstore/server/kvserver"
[[ -x "$kvserver" ]] || { echo "kvbench_rescale: no kvserver at $kvserver" >&2; exit 1; }
for ((r = 1; r <= rounds; r++)); do
  logs=$(mktemp -d)
  TMPDIR=$logs "$kvbench" --observe --only="${CASE:-push_100MB_2w2s}" --reps="${REPS:-400}" "$@" \
    >"$logs/kvbench.out" 2>&1 &
  bench=$!
  sleep "${JOIN_AFTER:-8}"
  daemon_of "$bench" 0
  env ${secret:+"$secret"} "$kvserver" "$scheduler" --join --updater=sum --log_level=info \
    --metrics_port=-1 >"$logs/joined.log" 2>&1 &
  joined=$!
  wait "$bench"
  wait "$joined" || true
  echo "run $r of $rounds (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  grep -h "rescale" "$logs"/kvbench-scheduler-*.log | sed 's/^.*\] rescale/  rescale/'
  grep -E "^(case|${CASE:-push_100MB_2w2s}) " "$logs/kvbench.out" | sed 's/^/  /'
  rm -rf "$logs"
done
