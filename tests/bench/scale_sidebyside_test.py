#!/usr/bin/env python3
"""Tests of scale_sidebyside's pure parts: merging workers' repetitions, reading bench_ps's
timings files, and the CPU interpolation, each against an independent computation on random
inputs (the seed is printed)."""
import os
import random
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale_sidebyside as sbs  # noqa: E402

SEED = int(os.environ.get("KV_TEST_SEED", 0)) or time.time_ns() % (1 << 31)
print(f"scale_sidebyside_test: seed {SEED}", file=sys.stderr)


class MergeTest(unittest.TestCase):
    def test_random_workers(self):
        rng = random.Random(SEED)
        for _ in range(200):
            workers, reps = rng.randint(1, 8), rng.randint(1, 30)
            t = rng.randint(0, 10**12)
            per_worker = [[] for _ in range(workers)]
            for _ in range(reps):
                t += rng.randint(1, 10**6)
                for spans in per_worker:
                    start = t + rng.randint(0, 10**5)
                    spans.append((start, start + rng.randint(1, 10**7)))
                t = max(s[-1][1] for s in per_worker)
            seconds, window = sbs.merge_spans(per_worker)
            self.assertEqual(len(seconds), reps)
            for i in range(reps):
                ends = sorted(s[i][1] for s in per_worker)
                starts = sorted(s[i][0] for s in per_worker)
                self.assertAlmostEqual(seconds[i], (ends[-1] - starts[0]) / 1e9, places=12)
            self.assertEqual(window[0], min(s[0][0] for s in per_worker))
            self.assertEqual(window[1], max(s[-1][1] for s in per_worker))

    def test_unequal_repetitions_refused(self):
        with self.assertRaisesRegex(ValueError, "different repetitions"):
            sbs.merge_spans([[(0, 1), (2, 3)], [(0, 1)]])


class TimingsFileTest(unittest.TestCase):
    def test_reads_the_named_case(self):
        rng = random.Random(SEED + 1)
        spans = [(rng.randint(0, 10**9), rng.randint(0, 10**9)) for _ in range(rng.randint(1, 40))]
        flat = " ".join(f"{a} {b}" for a, b in spans)
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write("pull_16MB_2w2s 32000000 1 1 5 6\n")
            f.write(f"pushpull_16MB_2w2s 32000000 1 {len(spans)} {flat}\nend\n")
        try:
            self.assertEqual(sbs.read_timings(f.name, "pushpull_16MB_2w2s"), spans)
            with self.assertRaisesRegex(ValueError, "no timings of push_16MB"):
                sbs.read_timings(f.name, "push_16MB_2w2s")
        finally:
            os.unlink(f.name)

    def test_unfinished_file_refused(self):
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write("pushpull_16MB_1w1s 16000000 1 1 5 6\n")
        try:
            with self.assertRaisesRegex(ValueError, "did not finish"):
                sbs.read_timings(f.name, "pushpull_16MB_1w1s")
        finally:
            os.unlink(f.name)


class InterpolateTest(unittest.TestCase):
    def test_piecewise_linear(self):
        rng = random.Random(SEED + 2)
        # CPU time growing at a known rate per segment: the interpolation must give the integral.
        t, cpu, samples, rates = 0, 0.0, [(0, 0.0)], []
        for _ in range(50):
            dt, rate = rng.randint(1, 10**7), rng.uniform(0, 2)
            rates.append((t, t + dt, rate))
            t, cpu = t + dt, cpu + rate * dt / 1e9
            samples.append((t, cpu))
        for _ in range(200):
            q = rng.randint(0, t)
            want = sum(rate * (min(q, b) - a) / 1e9 for a, b, rate in rates if a < q)
            self.assertAlmostEqual(sbs.interpolate(samples, q), want, places=9)
        self.assertEqual(sbs.interpolate(samples, -5), 0.0)
        self.assertAlmostEqual(sbs.interpolate(samples, t + 10**9), cpu, places=9)

    def test_own_cpu_is_read(self):
        # Burn 0.3 s of this process's own CPU (time.process_time, the reference), however
        # long a loaded machine makes that take, and compare what /proc says.
        start = sbs.cpu_seconds(os.getpid())
        reference = time.process_time()
        while time.process_time() - reference < 0.3:
            pass
        used = time.process_time() - reference
        self.assertAlmostEqual(sbs.cpu_seconds(os.getpid()) - start, used, delta=0.05)
        self.assertIsNone(sbs.cpu_seconds(2**22 + 7))


class CountsTest(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(sbs.counts("1,2,4,8", "workers"), [1, 2, 4, 8])
        for bad in ("", "0", "1,x", "65"):
            with self.assertRaises(SystemExit):
                sbs.counts(bad, "workers")


if __name__ == "__main__":
    unittest.main()
