#!/usr/bin/env bash
# What a scheduler restarted in place stalls: kvbench's push_100MB_2w2s (2 workers, 2 kvservers,
# one 100 MB key split over both) runs; KILL_AFTER seconds in, its scheduler is killed
# (SIGKILL) and, DELAY_MS later, started again with the same command line on the same port, as
# systemd's Restart=on-failure does. The kvservers register again and the scheduler re-forms the
# job (docs/reliability.md, "The scheduler restarted").
#
#   bash tests/bench/kvbench_scheduler_restart.sh ROUNDS [kvbench flags]   # one kill a run
#
# Prints, per run, when the job re-formed after the kill (the restarted scheduler's log), and
# kvbench's rows of the same case run first without a kill and then with it: the median
# repetition and the longest, which holds the kill. Builds kvbench
# first, unless KVBENCH names one to run (a copy of bazel-bin/tests/bench/kvbench with its
# .runfiles folder beside it). KILL_AFTER defaults to 6 (seconds), DELAY_MS to 500.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/kvbench_rounds.sh "${KVBENCH_RESTART_DIR:-/tmp/kvbench-restart}" "$@"
shift
now_ms() { date +%s%3N; }
for ((r = 1; r <= rounds; r++)); do
  logs=$(mktemp -d)
  # The same case without a kill first: its longest repetition is the bar for the kill's.
  TMPDIR=$logs "$kvbench" --only=push_100MB_2w2s --reps=300 "$@" >"$logs/baseline.out" 2>&1
  TMPDIR=$logs "$kvbench" --only=push_100MB_2w2s --reps=300 "$@" >"$logs/kvbench.out" 2>&1 &
  bench=$!
  sleep "${KILL_AFTER:-6}"
  scheduler=$(pgrep -P "$bench" -f -- "--port_file=" | head -n 1 || true)
  [[ -n "$scheduler" ]] || { echo "kvbench_scheduler_restart: no scheduler under kvbench $bench" >&2; exit 1; }
  mapfile -d '' argv </proc/"$scheduler"/cmdline
  mapfile -d '' environ </proc/"$scheduler"/environ
  port_file=$(printf '%s\n' "${argv[@]}" | sed -n 's/^--port_file=//p')
  port=$(cat "$port_file")
  kill -9 "$scheduler"
  killed=$(now_ms)
  sleep "$(awk -v ms="${DELAY_MS:-500}" 'BEGIN { print ms / 1000 }')"
  again=()
  for arg in "${argv[@]}"; do
    case $arg in
      --port=0) again+=("--port=$port") ;;
      *) again+=("$arg") ;;
    esac
  done
  # (kvbench runs its daemons at --log_level=warn; the re-forming is logged at info.)
  env -i "${environ[@]}" "${again[@]}" --log_level=info >"$logs/restarted.log" 2>&1 &
  restarted=$!
  reformed=""
  for _ in $(seq 1 300); do
    if grep -q "re-formed the running job" "$logs/restarted.log"; then
      reformed=$(($(now_ms) - killed))
      break
    fi
    sleep 0.02
  done
  wait "$bench"
  # The restarted scheduler exits once the job is over; bounded, it is this run's to stop.
  for _ in $(seq 1 150); do kill -0 "$restarted" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$restarted" 2>/dev/null || true
  wait "$restarted" 2>/dev/null || true
  echo "run $r of $rounds (load average: $(cut -d' ' -f1-3 /proc/loadavg)," \
    "congestion control: $(cat /proc/sys/net/ipv4/tcp_congestion_control))"
  echo "  scheduler killed, restarted ${DELAY_MS:-500} ms later; job re-formed ${reformed:-never} ms after the kill (polled every 20 ms)"
  grep -E "^case " "$logs/kvbench.out" | sed 's/^/  /'
  grep -E "^push_100MB_2w2s " "$logs/baseline.out" | sed 's/^/  no kill:   /'
  grep -E "^push_100MB_2w2s " "$logs/kvbench.out" | sed 's/^/  with kill: /'
  [[ -n "$reformed" ]] || sed "s/^/  restarted scheduler: /" "$logs/restarted.log" | tail -n 5
  rm -rf "$logs"
done
