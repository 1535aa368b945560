#!/usr/bin/env bash
# What replicas cost: kvbench's 2-server cases with one copy of each shard (--replicas=1) and
# with two (--replicas=2: every push goes to the shard's server and to its backup on the next
# rank, and is acknowledged once both hold it), alternated ROUNDS times so that both see the
# same moments of a noisy machine.
#
#   bash tests/bench/kvbench_replicas.sh ROUNDS [kvbench flags, e.g. --quick --only=4KB]
#
# Prints, per case, the median over the rounds of each variant's median (us) and their ratio.
# Builds kvbench first, unless KVBENCH names a kvbench to run. The JSON of every run goes to
# ${KVBENCH_REPLICAS_DIR:-/tmp/kvbench-replicas}/VARIANT-ROUND.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/kvbench_rounds.sh "${KVBENCH_REPLICAS_DIR:-/tmp/kvbench-replicas}" "$@"
shift
for ((r = 1; r <= rounds; r++)); do
  for replicas in 1 2; do
    echo "kvbench_replicas: round $r of $rounds, replicas $replicas" >&2
    "$kvbench" --format=json --replicas=$replicas --only=2w2s "$@" >"$out/replicas$replicas-$r.json"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
medians = {1: {}, 2: {}}  # replicas -> case -> [median_s per round]
for v in medians:
    for r in range(1, rounds + 1):
        for case in json.load(open(f"{out}/replicas{v}-{r}.json"))["cases"]:
            medians[v].setdefault(case["name"], []).append(case["median_s"])
print(f"{rounds} rounds; medians over the rounds of each run's median")
print(f"{'case':24} {'replicas1_us':>12} {'replicas2_us':>12} {'2/1':>7}")
for name in medians[1]:
    one, two = (statistics.median(medians[v][name]) * 1e6 for v in (1, 2))
    print(f"{name:24} {one:12.1f} {two:12.1f} {two / one:7.3f}")
PY
