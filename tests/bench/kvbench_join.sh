#!/usr/bin/env bash
# What a replacement kvserver's join stalls on big shards: kvbench's push_100MB_2w2s (2 workers,
# 2 kvservers, one 100 MB key split over both) runs with --replicas=2, so each kvserver holds
# 50 MB of its own shard and 50 MB of the other's backup. KILL_AFTER seconds in, kvserver rank 1
# is killed (SIGKILL); a second later a replacement for rank 1 is started, which joins the
# running job and is sent both shards by the scheduler.
#
#   bash tests/bench/kvbench_join.sh ROUNDS [kvbench flags]     # ROUNDS runs, one kill each
#
# Prints, per run, the scheduler's join lines (each shard's bytes, the join's duration) and
# kvbench's row: the median repetition, and the longest, which holds the kill or the join.
# Builds kvbench first, unless KVBENCH names a kvbench to run (a copy of
# bazel-bin/tests/bench/kvbench with its .runfiles folder beside it). KILL_AFTER defaults to 8.
# CASE (default push_100MB_2w2s) and REPS (default 400) choose the case and its repetitions:
# CASE=push_1GB_2w2s REPS=30 KILL_AFTER=40 moves two shards of 512 MB (about 15 GB of memory).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/kvbench_rounds.sh "${KVBENCH_JOIN_DIR:-/tmp/kvbench-join}" "$@"
shift
kvserver="$kvbench.runfiles/kvstore/server/kvserver"
[[ -x "$kvserver" ]] || { echo "kvbench_join: no kvserver at $kvserver" >&2; exit 1; }
for ((r = 1; r <= rounds; r++)); do
  logs=$(mktemp -d)
  TMPDIR=$logs "$kvbench" --replicas=2 --observe --only="${CASE:-push_100MB_2w2s}" \
    --reps="${REPS:-400}" "$@" \
    >"$logs/kvbench.out" 2>&1 &
  bench=$!
  sleep "${KILL_AFTER:-8}"
  daemon_of "$bench" 1
  kill -9 "$server"
  sleep 1
  env ${secret:+"$secret"} "$kvserver" "$scheduler" --rank=1 --updater=sum --log_level=info \
    --metrics_port=-1 >"$logs/replacement.log" 2>&1 &
  replacement=$!
  wait "$bench"
  wait "$replacement" || true
  echo "run $r of $rounds (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  grep -h "join: " "$logs"/kvbench-scheduler-*.log | sed 's/^.*\] join: /  join: /'
  grep -E "^(case|${CASE:-push_100MB_2w2s}) " "$logs/kvbench.out" | sed 's/^/  /'
  rm -rf "$logs"
done
