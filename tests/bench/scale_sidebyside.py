#!/usr/bin/env python3
"""scale_sidebyside: kvscale's sweep of workers and servers next to ps-lite's, in one run.

For every job of W workers and S servers it times a push+pull of one 16 MB float32 key by every
worker at once, on KVStore (`kvscale`, the daemons as processes, the workers in its process) and
on ps-lite (`bench_ps` from ../shared/pslite, started here as a scheduler, S servers and W
workers, each a process of its own, as ps-lite allows one node per process). Rounds alternate
the two (even rounds ps-lite first). For each it prints, over the rounds, the median of:

  median_ms     the median repetition, from the earliest worker's start to the latest's end
  GB/s job      16 MB x W over that median (a push+pull counts the bytes once, as kvbench does)
  cpu_s/GB      the CPU time of every process of the job (/proc/PID/stat) over the timed
                repetitions, divided by the bytes the workers sent and received (both ways)
  kv/ps         KVStore's job throughput over ps-lite's, taken per round (above 1: KVStore faster)

ps-lite's CPU window runs from the earliest timed start to the latest timed end, read from the
workers' timings (CLOCK_MONOTONIC) against /proc samples taken every 10 ms and interpolated.
kvscale reads its own before and after the timed repetitions. Both count every process of the
job, the scheduler included.

    bazel build -c opt //tests/bench:kvscale
    bash ../shared/pslite/run.sh 1 --quick        # builds bench_ps once, if not built
    python3 tests/bench/scale_sidebyside.py [--rounds=3] [--workers=1,2,4,8] [--servers=1,2,4]
        [--reps=20] [--kvscale=PATH] [--bench_ps=PATH] [--no_tcmalloc] [--json=FILE]

bench_ps runs with tcmalloc preloaded (the allocator KVStore's processes link) when the library
is installed, as ps-lite's better variant in ../shared/pslite.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MB = 1000 * 1000
CASE_BYTES = 16 * MB
TCMALLOC_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
TCMALLOC = "libtcmalloc_minimal.so.4"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def counts(text, what):
    """Parses "1,2,4" into [1, 2, 4]; every count between 1 and 64."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"scale_sidebyside: --{what} must be counts such as 1,2,4, not {text!r}")
    if not values or any(v < 1 or v > 64 for v in values):
        raise SystemExit(f"scale_sidebyside: --{what} counts must be 1 to 64, not {text!r}")
    return values


def cpu_seconds(pid):
    """User and system CPU seconds of process `pid` so far; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    # fields[0] is the state (field 3 of stat); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


class CpuSampler:
    """Samples the summed CPU time of a set of processes every `period` seconds, with the
    CLOCK_MONOTONIC time of each sample, until stopped. A process that exits keeps its last
    reading."""

    def __init__(self, pids, period=0.01):
        self._pids = list(pids)
        self._last = {pid: 0.0 for pid in self._pids}
        self._period = period
        self._stop = threading.Event()
        self.samples = []  # (monotonic ns, CPU seconds)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            now = time.monotonic_ns()
            for pid in self._pids:
                value = cpu_seconds(pid)
                if value is not None:
                    self._last[pid] = value
            self.samples.append((now, sum(self._last.values())))
            self._stop.wait(self._period)

    def stop(self):
        self._stop.set()
        self._thread.join()


def interpolate(samples, t_ns):
    """The CPU seconds at time `t_ns`, linearly between the two samples around it."""
    if not samples:
        raise ValueError("no CPU samples")
    if t_ns <= samples[0][0]:
        return samples[0][1]
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if t0 <= t_ns <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (t_ns - t0) / (t1 - t0)
    return samples[-1][1]


def merge_spans(per_worker):
    """Each repetition of W workers, from the earliest start to the latest end (seconds), and
    the window of all of them (ns). `per_worker`: one list of (start_ns, end_ns) per worker."""
    reps = len(per_worker[0])
    if reps == 0 or any(len(spans) != reps for spans in per_worker):
        raise ValueError(f"workers timed different repetitions: {[len(s) for s in per_worker]}")
    seconds = []
    for i in range(reps):
        start = min(spans[i][0] for spans in per_worker)
        end = max(spans[i][1] for spans in per_worker)
        seconds.append((end - start) / 1e9)
    window = (min(s[0][0] for s in per_worker), max(s[-1][1] for s in per_worker))
    return seconds, window


def read_timings(path, name):
    """The (start_ns, end_ns) spans of case `name` in a bench_ps worker's timings file."""
    with open(path) as f:
        lines = f.read().splitlines()
    if "end" not in lines:
        raise ValueError(f"{path}: the worker did not finish its timings")
    for line in lines:
        fields = line.split()
        if fields and fields[0] == name:
            n = int(fields[3])
            values = [int(v) for v in fields[4:4 + 2 * n]]
            if len(values) != 2 * n:
                raise ValueError(f"{path}: {name} lists {len(values) // 2} of {n} spans")
            return list(zip(values[0::2], values[1::2]))
    raise ValueError(f"{path}: no timings of {name}")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcmalloc_path():
    for d in TCMALLOC_DIRS:
        path = os.path.join(d, TCMALLOC)
        if os.path.exists(path):
            return path
    return None


def row(workers, servers, seconds, cpu_s, reps):
    median = statistics.median(seconds)
    moved_gb = CASE_BYTES * workers * reps * 2 / 1e9
    return {"workers": workers, "servers": servers, "reps": reps, "median_s": median,
            "gbps_total": CASE_BYTES * workers / median / 1e9, "cpu_s_per_gb": cpu_s / moved_gb}


def run_pslite(args, workers, servers, seed, tmp):
    """One ps-lite job of `workers` x `servers`: returns its row."""
    name = f"pushpull_16MB_{workers}w{servers}s"
    prefix = os.path.join(tmp, f"ps-{workers}w{servers}s")
    port = free_port()
    env = dict(os.environ, DMLC_NUM_SERVER=str(servers), DMLC_NUM_WORKER=str(workers),
               DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
               DMLC_NODE_HOST="127.0.0.1", DMLC_INTERFACE="lo")
    if args.tcmalloc:
        env["LD_PRELOAD"] = args.tcmalloc
    argv = [args.bench_ps, f"--seed={seed}", f"--results={prefix}", f"--only={name}",
            f"--reps={args.reps}", "--sync=true"]
    roles = ["scheduler"] + ["server"] * servers + ["worker"] * workers
    nodes = []
    try:
        for i, role in enumerate(roles):
            log = open(f"{prefix}.{i}.{role}.log", "w")
            nodes.append(subprocess.Popen(argv, env=dict(env, DMLC_ROLE=role), stdout=log,
                                          stderr=subprocess.STDOUT))
            log.close()
        sampler = CpuSampler([n.pid for n in nodes])
        deadline = time.monotonic() + args.timeout_s
        try:
            for node, role in zip(nodes, roles):
                left = deadline - time.monotonic()
                if node.wait(timeout=max(left, 0.1)) != 0:
                    raise RuntimeError(f"ps-lite {role} (pid {node.pid}) exited with "
                                       f"{node.returncode}; logs under {tmp}")
        finally:
            sampler.stop()
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"ps-lite {workers}w{servers}s did not finish within "
                           f"{args.timeout_s} s; logs under {tmp}")
    finally:
        for node in nodes:  # Only the processes started here, by pid.
            if node.poll() is None:
                node.send_signal(signal.SIGKILL)
                node.wait()
    spans = [read_timings(f"{prefix}.w{w}", name) for w in range(workers)]
    seconds, (start, end) = merge_spans(spans)
    cpu = interpolate(sampler.samples, end) - interpolate(sampler.samples, start)
    return row(workers, servers, seconds, cpu, len(seconds))


def run_kvscale(args, seed, jobs):
    """One kvscale sweep of `jobs` jobs: {(workers, servers): row} of its pushpull_16MB case."""
    out = subprocess.run([args.kvscale, "--format=json", f"--workers={args.workers}",
                          f"--servers={args.servers}", f"--reps={args.reps}", f"--seed={seed}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=args.timeout_s * jobs)
    if out.returncode != 0:
        raise RuntimeError(f"kvscale exited with {out.returncode}:\n{out.stderr[-2000:]}")
    rows = {}
    for case in json.loads(out.stdout)["cases"]:
        if case["name"] == "pushpull_16MB":
            rows[(case["workers"], case["servers"])] = case
    return rows


def fmt(values, digits):
    med = statistics.median(values)
    return f"{med:.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", default="1,2,4,8")
    p.add_argument("--servers", default="1,2,4")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions of every job")
    p.add_argument("--kvscale", default=os.path.join(ROOT, "bazel-bin/tests/bench/kvscale"))
    p.add_argument("--bench_ps", default=os.path.expanduser(
        "~/.cache/kvstore/pslite/build/bench_ps"))
    p.add_argument("--no_tcmalloc", action="store_true",
                   help="run bench_ps with glibc's malloc, as built")
    p.add_argument("--timeout_s", type=int, default=300, help="bound on one job")
    p.add_argument("--json", default="", help="also write the rounds and the table here")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    workers, servers = counts(args.workers, "workers"), counts(args.servers, "servers")
    if args.rounds < 1 or args.reps < 1:
        raise SystemExit("scale_sidebyside: --rounds and --reps must be at least 1")
    for path, how in ((args.kvscale, "bazel build -c opt //tests/bench:kvscale"),
                      (args.bench_ps, "bash ../shared/pslite/run.sh 1 --quick")):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"scale_sidebyside: {path} is not an executable; build it with: {how}")
    args.tcmalloc = None if args.no_tcmalloc else tcmalloc_path()
    seed = args.seed or 1 + time.time_ns() % (1 << 30)  # kvscale's --seed is an int
    print(f"scale_sidebyside: seed {seed}; ps-lite malloc: {args.tcmalloc or 'glibc'}; "
          f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    rounds = []  # [{"kvstore": {...}, "pslite": {...}}], keyed by "WwSs"
    with tempfile.TemporaryDirectory(prefix="scale_sidebyside-") as tmp:
        for r in range(args.rounds):
            got = {"kvstore": {}, "pslite": {}}

            def kv():
                for (w, s), case in run_kvscale(args, seed + r, len(workers) * len(servers)).items():
                    got["kvstore"][f"{w}w{s}s"] = case

            def ps():
                for s in servers:
                    for w in workers:
                        got["pslite"][f"{w}w{s}s"] = run_pslite(args, w, s, seed + r, tmp)
                        print(f"scale_sidebyside: round {r + 1} ps-lite {w}w{s}s "
                              f"{got['pslite'][f'{w}w{s}s']['median_s'] * 1e3:.2f} ms",
                              file=sys.stderr)

            for step in ((ps, kv) if r % 2 == 0 else (kv, ps)):
                step()
            rounds.append(got)
            print(f"scale_sidebyside: round {r + 1} of {args.rounds} done, load average "
                  f"{os.getloadavg()[0]:.2f}", file=sys.stderr)
    header = ("| W | S | ps-lite ms | KVStore ms | ps-lite GB/s job | KVStore GB/s job | kv/ps "
              "| ps-lite cpu_s/GB | KVStore cpu_s/GB |")
    lines = [header, "|" + "---|" * 9]
    table = []
    for s in servers:
        for w in workers:
            key = f"{w}w{s}s"
            ps_rows = [rd["pslite"][key] for rd in rounds]
            kv_rows = [rd["kvstore"][key] for rd in rounds]
            ratio = [k["gbps_total"] / p["gbps_total"] for k, p in zip(kv_rows, ps_rows)]
            entry = {"workers": w, "servers": s, "ratio_median": statistics.median(ratio)}
            cells = []
            for field, scale, digits in (("median_s", 1e3, 2), ("gbps_total", 1, 3)):
                for side in (ps_rows, kv_rows):
                    cells.append(fmt([x[field] * scale for x in side], digits))
            cells.append(fmt(ratio, 3))
            for side in (ps_rows, kv_rows):
                cells.append(fmt([x["cpu_s_per_gb"] for x in side], 3))
            lines.append(f"| {w} | {s} | " + " | ".join(cells) + " |")
            table.append(entry)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "reps": args.reps, "pslite_malloc": args.tcmalloc or "glibc",
                       "rounds": rounds, "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
