#!/usr/bin/env bash
# What observability costs: kvbench without metrics and with the daemons at --log_level=warn
# ("off"), and with Prometheus metrics on in the scheduler, every kvserver and every worker and
# the daemons logging at their default level, info ("on"), alternated ROUNDS times so that both
# see the same moments of a noisy machine. A Prometheus-like scraper fetches every daemon's
# /metrics once a second during the "on" runs, as a deployment would.
#
#   bash tests/bench/kvbench_observability.sh ROUNDS [kvbench flags, e.g. --quick --only=4KB]
#   bash tests/bench/kvbench_observability.sh --interleaved ROUNDS [kvbench flags]
#
# --interleaved runs kvbench --interleave_observe ROUNDS times instead: both jobs run side by
# side and their repetitions alternate, so "off" and "on" see the same seconds of the machine,
# not only the same minutes; the rows then compare CASE with CASE@observe of the same run.
#
# Prints, per case, the median over the rounds of each variant's median (us) and their ratio
# (on/off). Builds kvbench first, unless KVBENCH names a kvbench to run (a copy of
# bazel-bin/tests/bench/kvbench with its .runfiles folder beside it). The JSON of every run goes
# to ${KVBENCH_OBSERVABILITY_DIR:-/tmp/kvbench-observability}/VARIANT-ROUND.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
interleaved=0
if [[ "${1:-}" == --interleaved ]]; then
  interleaved=1
  shift
fi
source tests/bench/kvbench_rounds.sh "${KVBENCH_OBSERVABILITY_DIR:-/tmp/kvbench-observability}" "$@"
shift
tmp=${TMPDIR:-/tmp}

# scrape PID: while PID runs, fetch /metrics of every daemon kvbench started (their logs name
# the ports) once a second, from one long-lived process with kept-alive connections, as a
# Prometheus server does (and more often: its usual interval is 15 s or more).
scrape() {
  python3 - "$1" "$tmp" <<'PY'
import glob, http.client, os, re, sys, time
pid, tmp = int(sys.argv[1]), sys.argv[2]
connections = {}
def alive():
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False
while alive():
    for log in glob.glob(f"{tmp}/kvbench-*-{pid}-*.log"):
        try:
            ports = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)", open(log).read())
        except OSError:
            continue
        for port in ports[-1:]:
            try:
                conn = connections.setdefault(port, http.client.HTTPConnection("127.0.0.1", int(port), timeout=1))
                conn.request("GET", "/metrics")
                conn.getresponse().read()
            except Exception:
                connections.pop(port, None)
    time.sleep(1)
PY
}

if ((interleaved)); then
  for ((r = 1; r <= rounds; r++)); do
    echo "kvbench_observability: round $r of $rounds, interleaved" >&2
    "$kvbench" --format=json --interleave_observe "$@" >"$out/interleaved-$r.json" &
    bench=$!
    scrape "$bench" &
    wait "$bench"
    wait
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = [{c["name"]: c["median_s"] for c in json.load(open(f"{out}/interleaved-{r}.json"))["cases"]}
        for r in range(1, rounds + 1)]
print(f"{rounds} interleaved runs; off_us, on_us: medians over the runs of each case's median; "
      "on/off: the median of the runs' ratios, with the smallest and largest")
print(f"{'case':30} {'off_us':>10} {'on_us':>10} {'on/off':>8} {'min':>7} {'max':>7}")
worst = 0
for name in runs[0]:
    if name.endswith("@observe"):
        continue
    off = [run[name] for run in runs]
    on = [run[name + "@observe"] for run in runs]
    ratios = [b / a for a, b in zip(off, on)]
    ratio = statistics.median(ratios)
    worst = max(worst, ratio)
    print(f"{name:30} {statistics.median(off) * 1e6:10.1f} {statistics.median(on) * 1e6:10.1f} "
          f"{ratio:8.3f} {min(ratios):7.3f} {max(ratios):7.3f}")
print(f"largest on/off ratio: {worst:.3f}")
PY
  exit 0
fi

for ((r = 1; r <= rounds; r++)); do
  for variant in off on; do
    flags=()
    [[ $variant == on ]] && flags=(--observe)
    echo "kvbench_observability: round $r of $rounds, $variant" >&2
    "$kvbench" --format=json "${flags[@]}" "$@" >"$out/$variant-$r.json" &
    bench=$!
    if [[ $variant == on ]]; then scrape "$bench" & fi
    wait "$bench"
    wait
  done
done

python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
variants = ("off", "on")
medians = {v: {} for v in variants}
for v in variants:
    for r in range(1, rounds + 1):
        for case in json.load(open(f"{out}/{v}-{r}.json"))["cases"]:
            medians[v].setdefault(case["name"], []).append(case["median_s"])
def quartiles(xs):
    xs = sorted(xs)
    if len(xs) < 4:
        return xs[0], xs[-1]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]
print(f"{rounds} rounds; off_us, on_us: medians over the rounds of each run's median; "
      "paired: the median of the rounds' on/off ratios (each round runs off, then on) and its "
      "interquartile range")
print(f"{'case':30} {'off_us':>10} {'on_us':>10} {'on/off':>8} {'paired':>8} {'q1':>7} {'q3':>7}")
worst = 0
for name in medians["off"]:
    m = {v: statistics.median(medians[v][name]) * 1e6 for v in variants}
    ratios = [on / off for off, on in zip(medians["off"][name], medians["on"][name])]
    paired = statistics.median(ratios)
    q1, q3 = quartiles(ratios)
    worst = max(worst, paired)
    print(f"{name:30} {m['off']:10.1f} {m['on']:10.1f} {m['on'] / m['off']:8.3f} "
          f"{paired:8.3f} {q1:7.3f} {q3:7.3f}")
print(f"largest paired on/off ratio: {worst:.3f}")
PY
