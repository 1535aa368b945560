#!/usr/bin/env python3
"""pybench: a push of a 100 MB float32 tensor from Python next to the same push from the C++ SDK,
in the same run, on a real job over 127.0.0.1 (1 worker, 1 kvserver, dist_sync, the `sum`
updater, as kvbench's push_100MB_1w1s).

Each round times, one after the other, `kv.push(key, array)` from Python with a NumPy array (a
blocking push: it returns once the server has applied it), the same Push + Wait from C++ inside
the module (`KVStore._store._bench_push`, the SDK without Python), and `kv.push` of a PyTorch
tensor. It prints the median of each and the median of the per-round ratios python/C++; with --kvbench it also runs kvbench
--only=push_100MB_1w1s (the SDK linked with tcmalloc, its own job) for reference.

    bazel build -c opt //python:_kvstore.so //server:kvserver //server/scheduler \
        //tests/bench:kvbench
    python3 tests/bench/pybench.py --module bazel-bin/python/_kvstore.so --kvbench

Run outside a job, it starts one with deploy/launch.py and runs itself as the worker.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from staged_package import staged_package

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MB = 1 << 20


def worker(args):
    import numpy as np
    import torch

    import kvstore
    kv = kvstore.create("dist_sync")
    n = max(1, int(args.mb * MB) // 4)
    rng = np.random.default_rng(args.seed)
    array = rng.standard_normal(n, dtype=np.float32)
    tensor = torch.from_numpy(array.copy())
    kv.init(0, np.zeros(n, np.float32))
    kv.send_command_to_servers(0, "sum")
    for _ in range(2):  # warm-up: connections, server buffers
        kv.push(0, array)
    names = ["python numpy", "C++ SDK", "python torch"]
    results = {name: [] for name in names}
    # One push of each per round, alternated, so that a change in the machine's load affects
    # all three alike; the ratio is taken per round, then its median.
    for _ in range(args.rounds):
        t = time.perf_counter()
        kv.push(0, array)
        results["python numpy"].append(time.perf_counter() - t)
        results["C++ SDK"] += kv._store._bench_push(0, array, 1)
        t = time.perf_counter()
        kv.push(0, tensor)
        results["python torch"].append(time.perf_counter() - t)
    print(f"push of {args.mb:g} MB float32, 1 worker 1 server dist_sync, {args.rounds} rounds "
          f"(seed {args.seed})")
    cpp = results["C++ SDK"]
    for name in names:
        seconds = results[name]
        med = statistics.median(seconds)
        ratio = statistics.median(s / c for s, c in zip(seconds, cpp))
        print(f"  {name:13s} median {med * 1e3:8.2f} ms  {args.mb * MB / med / 1e9:6.2f} GB/s  "
              f"min {min(seconds) * 1e3:8.2f} ms  per-round ratio to C++ (median) {ratio:5.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--module", default=os.path.join(ROOT, "bazel-bin/python/_kvstore.so"),
                   help="the built module (its package files are taken from python/kvstore)")
    p.add_argument("--mb", type=float, default=100, help="size of the value in MiB")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--kvbench", action="store_true",
                   help="also run bazel-bin/tests/bench/kvbench --only=push_100MB_1w1s")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    with staged_package(ROOT, args.module) as env:
        cmd = [sys.executable, os.path.join(ROOT, "deploy/launch.py"), "-n", "1", "-s", "1",
               "--scheduler", os.path.join(ROOT, "bazel-bin/server/scheduler/scheduler"),
               "--kvserver", os.path.join(ROOT, "bazel-bin/server/kvserver"),
               "--timeout", "300", "--", sys.executable, os.path.abspath(__file__), "--worker",
               "--mb", str(args.mb), "--rounds", str(args.rounds),
               "--seed", str(args.seed)]
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        for line in out.stdout.splitlines():
            if line.startswith("[worker 0]"):
                print(line[len("[worker 0] "):])
        if out.returncode != 0:
            print(out.stdout)
            sys.exit(out.returncode)
    if args.kvbench:
        kvbench = os.path.join(ROOT, "bazel-bin/tests/bench/kvbench")
        res = subprocess.run([kvbench, "--only=push_100MB_1w1s", "--quick"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             cwd=kvbench + ".runfiles/kvstore")
        print("kvbench (C++ SDK with tcmalloc, its own job):")
        for line in res.stdout.splitlines():
            if "push_100MB_1w1s" in line or "case" in line.lower():
                print("  " + line)


if __name__ == "__main__":
    main()
