#!/usr/bin/env bash
# Runs kvbench between two iperf3 single-stream loopback measurements and prints the ratio of
# each issue-4 target case to their mean (payload GB/s over iperf3 GB/s, the 4 KB round trip
# over kvbench's own raw-socket round trip, and the ops/s of 64 operations in flight).
#   bash tests/bench/kvbench_vs_iperf3.sh [kvbench flags, e.g. --quick]
# Needs iperf3 (apt-get install iperf3) and python3. Prints the JSON of the run to
# ${KVBENCH_JSON:-/tmp/kvbench.json}.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v iperf3 >/dev/null || { echo "kvbench_vs_iperf3: iperf3 is not installed" >&2; exit 1; }
source deploy/bazel-env.sh
kv_bazel build //tests/bench:kvbench >/dev/null 2>&1 || kv_bazel build //tests/bench:kvbench
out=${KVBENCH_JSON:-/tmp/kvbench.json}

iperf() {
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  iperf3 -c 127.0.0.1 -p "$port" -t 3 -J |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)'
  wait "$server" 2>/dev/null || true
}

before=$(iperf)
bazel-bin/tests/bench/kvbench --format=json "$@" > "$out"
after=$(iperf)
python3 - "$out" "$before" "$after" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
before, after = float(sys.argv[2]), float(sys.argv[3])
iperf = (before + after) / 2
cases = {c["name"]: c for c in run["cases"]}
print(f"iperf3 single stream, 127.0.0.1: {before:.3f} GB/s before, {after:.3f} after, mean {iperf:.3f}")
print(f"memcpy (kvbench): {run['memcpy_gbps']:.2f} GB/s; seed {run['seed']}")
print(f"{'target':34} {'measured':>14} {'ratio':>8} {'goal':>8}")
def row(label, measured, ratio, goal, unit):
    ok = "met" if ratio >= goal else "NOT met"
    print(f"{label:34} {measured:>10.3f} {unit:3} {ratio:8.3f} {goal:>8}  {ok}")
for name, goal in [("push_100MB_1w1s", 1.0), ("pull_100MB_1w1s", 1.0),
                   ("pushpull_100MB_1w1s", 0.5), ("push_100kx16B_1w1s", 0.6)]:
    if name in cases:
        row(name + " / iperf3", cases[name]["gbps"], cases[name]["gbps"] / iperf, goal, "GB/s")
# The same 100k keys sent with PushBucket (one tensor holding every value), for comparison.
for name in ["push_100kx16B_bucket_1w1s"]:
    if name in cases:
        row(name + " / iperf3", cases[name]["gbps"], cases[name]["gbps"] / iperf, 0.6, "GB/s")
if "pushpull_4KB_1w1s" in cases:
    c = cases["pushpull_4KB_1w1s"]
    # Goal: latency within 1.3x of the raw-socket round trip, i.e. raw/latency >= 1/1.3.
    row("pushpull_4KB_1w1s raw rtt / latency", c["latency_us"], c["ceiling_latency_us"] / c["latency_us"], round(1 / 1.3, 3), "us")
    if run.get("raw_4KB_two_cpus_us"):
        print(f"  raw 4 KB exchange: {c['ceiling_latency_us']:.1f} us in this case; pinned, "
              f"{run['raw_4KB_one_cpu_us']:.1f} us on one CPU, {run['raw_4KB_two_cpus_us']:.1f} on two")
if "small_4KB_inflight64_1w1s" in cases:
    c = cases["small_4KB_inflight64_1w1s"]
    row("small_4KB_inflight64_1w1s ops/s", c["ops_per_s"] / 1e3, c["ops_per_s"] / 140000, 1.0, "k/s")
PY
