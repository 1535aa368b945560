#!/usr/bin/env bash
# One knob of the data path measured again under a TCP congestion control: kvbench runs once per
# value of FLAG, the values alternating round by round so that each sees the same moments of the
# machine, and prints each case's median and minimum per value and round.
#
#   CC=cubic bash tests/bench/kvbench_knobs.sh ROUNDS FLAG VALUE... -- [kvbench flags]
#   e.g. CC=cubic bash tests/bench/kvbench_knobs.sh 2 --chunk_bytes 262144 524288 1048576 -- \
#          --only=1MB_2w2s,16MB_2w2s,100MB_2w2s
#
# CC (cubic, reno or bbr; default: the machine's) is set with sysctl for the run and put back
# afterwards, as ../shared/pslite/run.sh does. KVBENCH names the kvbench to run (a copy of
# bazel-bin/tests/bench/kvbench with its .runfiles folder beside it); without it, it is built.
# An empty VALUE ('') runs kvbench without the flag (its default).
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 3 && "$1" =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: CC=cubic $0 ROUNDS FLAG VALUE... -- [kvbench flags]" >&2
  exit 2
}
rounds=$1 flag=$2
shift 2
values=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  values+=("$1")
  shift
done
[[ $# -gt 0 ]] && shift
kvbench=${KVBENCH:-}
if [[ -z "$kvbench" ]]; then
  source deploy/bazel-env.sh
  kv_bazel build -c opt //tests/bench:kvbench >/dev/null 2>&1 || kv_bazel build -c opt //tests/bench:kvbench
  kvbench=bazel-bin/tests/bench/kvbench
fi
before=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
if [[ -n "${CC:-}" ]]; then
  trap 'sysctl -q -w net.ipv4.tcp_congestion_control="$before" || true' EXIT
  sysctl -q -w net.ipv4.tcp_congestion_control="$CC"
fi
echo "kvbench_knobs: TCP congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control)" \
  "(the machine's: $before), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for value in "${values[@]}"; do
    args=()
    [[ -n "$value" ]] && args=("$flag=$value")
    "$kvbench" "${args[@]}" "$@" |
      awk -v v="${value:-default}" -v r="$r" \
        '/_(1w1s|2w2s|[0-9]w[0-9]s) / { printf "%-28s %s=%-10s round %d  median %s  min %s\n", $1, "'"$flag"'", v, r, $2, $3 }'
  done
done | sort -s -k1,1
echo "kvbench_knobs: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
