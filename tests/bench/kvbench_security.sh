#!/usr/bin/env bash
# What security costs: kvbench without the job secret (--secret=false), with it (the default),
# and with the secret and TLS (--tls), alternated ROUNDS times so that all three see the same
# moments of a noisy machine; beside them, in the same run, AES-256-GCM on one core
# (`openssl speed`), the cipher gRPC's TLS 1.3 negotiates here (TLS_AES_256_GCM_SHA384).
#
#   bash tests/bench/kvbench_security.sh ROUNDS [kvbench flags, e.g. --quick --only=4KB]
#
# Prints, per case, the median over the rounds of each variant's median (us), the ratio of the
# secret's and of TLS's to the run without the secret, and aes_us: the time one core takes to
# encrypt and decrypt the case's payload once with AES-256-GCM (push or pull: the payload; push
# and pull: twice it), the least TLS can add to a case on one core. Builds kvbench first, unless
# KVBENCH names a kvbench to run (a copy of bazel-bin/tests/bench/kvbench with its .runfiles
# folder beside it, so that a rebuild during the run changes nothing). The JSON of every run
# goes to ${KVBENCH_SECURITY_DIR:-/tmp/kvbench-security}/VARIANT-ROUND.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/kvbench_rounds.sh "${KVBENCH_SECURITY_DIR:-/tmp/kvbench-security}" "$@"
shift
command -v openssl >/dev/null || { echo "kvbench_security: openssl is not installed" >&2; exit 1; }

# aes_gcm_gbps [-decrypt]: AES-256-GCM on 16 KB buffers (a TLS record's size) on one core.
aes_gcm_gbps() {
  openssl speed -evp aes-256-gcm -seconds 2 -bytes 16384 -mr "$@" 2>/dev/null |
    awk -F: '/^\+F:/ { printf "%.3f\n", $4 / 1e9 }'
}

aes_before_encrypt=$(aes_gcm_gbps)
aes_before_decrypt=$(aes_gcm_gbps -decrypt)
for ((r = 1; r <= rounds; r++)); do
  for variant in insecure secret tls; do
    case $variant in
      insecure) flags=(--secret=false) ;;
      secret) flags=() ;;
      tls) flags=(--tls) ;;
    esac
    echo "kvbench_security: round $r of $rounds, $variant" >&2
    "$kvbench" --format=json "${flags[@]}" "$@" >"$out/$variant-$r.json"
  done
done
aes_after_encrypt=$(aes_gcm_gbps)
aes_after_decrypt=$(aes_gcm_gbps -decrypt)

python3 - "$out" "$rounds" "$aes_before_encrypt" "$aes_before_decrypt" "$aes_after_encrypt" \
  "$aes_after_decrypt" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
enc_before, dec_before, enc_after, dec_after = map(float, sys.argv[3:7])
# One byte through TLS is encrypted once and decrypted once: seconds per byte.
aes_s_per_byte = (1 / ((enc_before + enc_after) / 2) + 1 / ((dec_before + dec_after) / 2)) / 1e9
variants = ("insecure", "secret", "tls")
medians = {v: {} for v in variants}   # case -> [median_s per round]
bytes_of = {}
for v in variants:
    for r in range(1, rounds + 1):
        for case in json.load(open(f"{out}/{v}-{r}.json"))["cases"]:
            medians[v].setdefault(case["name"], []).append(case["median_s"])
            bytes_of[case["name"]] = case["bytes"]
print(f"AES-256-GCM, 16 KB, one core: encrypt {enc_before:.2f} GB/s before, {enc_after:.2f} "
      f"after; decrypt {dec_before:.2f} before, {dec_after:.2f} after")
print(f"{rounds} rounds; medians over the rounds of each run's median")
print(f"{'case':30} {'insecure_us':>11} {'secret_us':>10} {'secret/ins':>10} "
      f"{'tls_us':>10} {'tls/ins':>8} {'aes_us':>9}")
worst = 0
for name in medians["insecure"]:
    m = {v: statistics.median(medians[v][name]) * 1e6 for v in variants}
    moved = bytes_of[name] * (2 if name.startswith("pushpull_") else 1)
    aes_us = moved * aes_s_per_byte * 1e6
    worst = max(worst, m["secret"] / m["insecure"])
    print(f"{name:30} {m['insecure']:11.1f} {m['secret']:10.1f} "
          f"{m['secret'] / m['insecure']:10.3f} {m['tls']:10.1f} {m['tls'] / m['insecure']:8.3f} "
          f"{aes_us:9.1f}")
print(f"largest secret/insecure ratio: {worst:.3f}")
PY
