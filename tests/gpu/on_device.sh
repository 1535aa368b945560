#!/bin/bash
# on_device.sh [BUNDLE]: the GPU kit's checks, on a GPU machine, from a bundle made elsewhere by
# tests/gpu/bundle.sh (default: gpu-bundle). Needs there: an NVIDIA driver, nvcc (for the
# selftest), g++ and a python3 with pybind11 and PyTorch (for the Python check); builds nothing
# else. Writes into $OUT (default ./gpu-results): summary.txt, one line per check
# ("NAME: PASS|FAIL|SKIPPED (seconds) detail"), and NAME.log per check; gpubench.json and
# gpu_job_{cuda,cpu}.json hold the figures docs/gpu.md records. Every step has its own time
# limit; the whole runs in about 90 seconds on one H200. Exits 1 when a check failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
bundle=$(cd "${1:-gpu-bundle}" && pwd) || { echo "on_device.sh: no bundle" >&2; exit 1; }
out=${OUT:-./gpu-results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.txt
: >"$summary"
work=$(mktemp -d)
failed=0

# record NAME STATUS SECONDS DETAIL: one summary line, echoed.
record() {
  printf '%s: %s (%ss) %s\n' "$1" "$2" "$3" "$4" | tee -a "$summary"
  [ "$2" = FAIL ] && failed=1
  return 0
}

# check NAME LIMIT_S COMMAND...: runs COMMAND into NAME.log; PASS on exit 0 (SKIPPED when it
# printed "SKIPPED"), FAIL otherwise, with the last line of its log.
check() {
  local name=$1 limit=$2 start rc status
  shift 2
  start=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  status=PASS
  if ((rc != 0)); then
    status=FAIL
  elif grep -q '^SKIPPED' "$out/$name.log"; then
    status=SKIPPED
  fi
  local detail
  detail=$(grep -v '^\s*$' "$out/$name.log" | tail -1 | cut -c1-160)
  ((rc == 124)) && detail="timed out after ${limit}s; $detail"
  record "$name" "$status" "$(($(date +%s) - start))" "rc=$rc $detail"
}

# The summary names the bundle as given (it is kept beside the figures; no machine's paths).
echo "on_device.sh: bundle ${1:-gpu-bundle}" | tee -a "$summary"
check nvidia-smi 30 nvidia-smi

# The two builds run while the tests do (none of the tests is timed).
nvcc -std=c++17 -O2 -lineinfo -gencode=arch=compute_90,code=sm_90 -I. \
  client/gpu/cuda_reduce.cu client/gpu/device_info.cu client/gpu/cuda_reduce_check.cc \
  client/gpu/cuda_reduce_selftest.cc -o "$work/selftest" >"$out/selftest-build.log" 2>&1 &
selftest_build=$!
bash "$bundle/python/build_python.sh" "$bundle" "$work/py" >"$out/python-build.log" 2>&1 &
python_build=$!

check cuda_reduce_test 180 "$bundle/run.sh" cuda_reduce_test
check device_info_test 60 "$bundle/run.sh" device_info_test
check gpu_store_test 180 "$bundle/run.sh" gpu_store_test

if wait $selftest_build; then
  # SELFTEST_REPEAT=N runs it N times (new random sizes' contents each), for races.
  for ((i = 1; i <= ${SELFTEST_REPEAT:-1}; i++)); do
    check "selftest$( ((i > 1)) && echo "_$i")" 120 "$work/selftest"
  done
else
  record selftest FAIL 0 "nvcc failed: $(tail -1 "$out/selftest-build.log")"
fi

check gpubench 300 bash -c "'$bundle/run.sh' gpubench --format=json --cpu_max_mb=256 \
  >'$out/gpubench.json'"
python3 - "$out/gpubench.json" >>"$summary" 2>&1 <<'EOF' || failed=1
import json, sys
r = json.load(open(sys.argv[1]))
gpu = [c for c in r["cases"] if c["name"].startswith("gpu_")]
big = [c for c in gpu if c["bytes"] // (int(c["name"].split("_k")[1].split("_")[0]) + 1) >= 64 << 20]
if not gpu:
    print("gpubench ratios: no GPU cases:", r.get("no_gpu"))
    sys.exit(0)
worst = min(big, key=lambda c: c["ratio"])
print(f"gpubench ratios: {r['gpu']}, copy {r['gpu_copy_gbps']:.0f} GB/s, a synchronous Sum "
      f"call {r['gpu_sum_call_us']:.1f} us; sums from 64 MB: "
      f"min {worst['ratio']:.2f} ({worst['name']}), median "
      f"{sorted(c['ratio'] for c in big)[len(big) // 2]:.2f}; target >= 0.80: "
      f"{'PASS' if worst['ratio'] >= 0.8 else 'FAIL'}")
EOF

for values in cuda cpu; do
  check "gpu_job_$values" 240 bash -c "set -o pipefail; '$bundle/run.sh' gpu_job --values=$values \
    --rounds=5 \
    --scheduler='$bundle/bin/scheduler' --kvserver='$bundle/bin/kvserver' --format=json \
    | tee '$out/gpu_job_$values.json'"
done
python3 - "$out/gpu_job_cuda.json" "$out/gpu_job_cpu.json" >>"$summary" 2>&1 <<'EOF'
import json, sys
try:
    cuda, cpu = (json.load(open(p)) for p in sys.argv[1:])
except Exception as e:
    print("gpu_job figures: none:", e)
    sys.exit(0)
for a, b in zip(cuda["cases"], cpu["cases"]):
    print(f"gpu_job {a['key_bytes']} B x 4 copies x 2 workers: push cuda {a['push_s']:.4f}s "
          f"(staged first {a['push_staged_first_s']:.4f}s) cpu {b['push_s']:.4f}s "
          f"(cuda/cpu time {a['push_s'] / b['push_s']:.2f}); pull cuda {a['pull_s']:.4f}s "
          f"cpu {b['pull_s']:.4f}s")
EOF

if wait $python_build; then
  check python_torch_cuda 180 env PYTHONPATH="$work/py" \
    LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    python3 "$bundle/python/torch_cuda_check.py"
else
  record python_torch_cuda FAIL 0 "the extension did not build: $(tail -1 "$out/python-build.log")"
fi

# The sum kernels under compute-sanitizer, where the machine's runtime lets it run.
if command -v compute-sanitizer >/dev/null && [ -x "$work/selftest" ]; then
  check sanitizer_memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 3 "$work/selftest"
  check sanitizer_racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 3 "$work/selftest"
fi

rm -rf "$work"
echo "on_device.sh: $( ((failed)) && echo FAILED || echo passed)" | tee -a "$summary"
exit $failed
