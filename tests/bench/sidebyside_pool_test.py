#!/usr/bin/env python3
"""Tests of sidebyside_pool on random runs written as ../shared/pslite's sidebyside.json lays
them out, against an independent count (the seed is printed)."""
import io
import json
import os
import random
import sys
import tempfile
import time
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sidebyside_pool as sp  # noqa: E402

SEED = int(os.environ.get("KV_TEST_SEED", 0)) or time.time_ns() % (1 << 31)
print(f"sidebyside_pool_test: seed {SEED}", file=sys.stderr)

CASES = [("push_4KB_1w1s", "us", False), ("pull_1MB_2w2s", "GB/s", True),
         ("push_100MB_2w2s", "GB/s", True), ("pull_100MB_1w1s", "GB/s", True),
         ("small_4KB_inflight64_1w1s", "k ops/s", True), ("pushpull_4KB_2w2s", "us", False)]


def stats(values):
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2], "min": ordered[0], "max": ordered[-1],
            "per_round": values}


def random_run(rng, rounds):
    rows = []
    for case, unit, higher in CASES:
        ratios = [rng.uniform(0.5, 2.0) for _ in range(rounds)]
        rows.append({"case": case, "unit": unit, "higher_is_better": higher,
                     "ratio": stats(ratios)})
    load = [[[f"{rng.uniform(0, 4):.2f}", "1.0", "1.0"], [f"{rng.uniform(0, 4):.2f}", "1.0", "1.0"]]
            for _ in range(rounds)]
    return {"kvbench_commit": "abc1234", "loadavg": load, "tables": {"pslite_tcmalloc": rows}}


class PoolTest(unittest.TestCase):
    def test_random_runs(self):
        rng = random.Random(SEED)
        for _ in range(100):
            runs = [random_run(rng, 3) for _ in range(rng.randint(1, 5))]
            cases = sp.pool([r["tables"]["pslite_tcmalloc"] for r in runs])
            self.assertEqual([c["case"] for c in cases], [c[0] for c in CASES])
            for i, (case, _, higher) in enumerate(CASES):
                rows = [r["tables"]["pslite_tcmalloc"][i] for r in runs]
                # Independently: kvbench ahead when a rate's ratio is above 1, or a latency's
                # ratio below 1.
                ahead = sum(1 for row in rows
                            if (row["ratio"]["median"] > 1) == higher
                            and row["ratio"]["median"] != 1)
                self.assertEqual(cases[i]["runs_ahead"], ahead, case)
                every = sorted((x if higher else 1 / x)
                               for row in rows for x in row["ratio"]["per_round"])
                n = len(every)
                want = every[n // 2] if n % 2 else (every[n // 2 - 1] + every[n // 2]) / 2
                self.assertAlmostEqual(cases[i]["pooled"], want, places=12)
                self.assertEqual(cases[i]["rounds"], 3 * len(runs))

    def test_summary_counts(self):
        cases = [{"case": "push_100MB_2w2s", "runs_ahead": 2, "pooled": 1.1, "rounds": 9},
                 {"case": "pull_100MB_2w2s", "runs_ahead": 3, "pooled": 1.25, "rounds": 9},
                 {"case": "pull_1MB_1w1s", "runs_ahead": 1, "pooled": 0.9, "rounds": 9}]
        lines = sp.summary(cases, 3, 1.2)
        self.assertIn("every one of the 3 runs: 1 of 3", lines[0])
        self.assertIn("most runs: 2 of 3", lines[1])
        self.assertIn("9 rounds: 2 of 3", lines[2])
        self.assertIn("1.2x or more by the pooled median: 1 of 2", lines[3])

    def test_missing_case_refused(self):
        rng = random.Random(SEED + 1)
        a, b = random_run(rng, 3), random_run(rng, 3)
        b["tables"]["pslite_tcmalloc"].pop()
        with self.assertRaisesRegex(ValueError, "missing from 1 run"):
            sp.pool([a["tables"]["pslite_tcmalloc"], b["tables"]["pslite_tcmalloc"]])

    def test_run_without_the_variant_left_out(self):
        rng = random.Random(SEED + 2)
        with tempfile.TemporaryDirectory() as d:
            good, bad = os.path.join(d, "a.json"), os.path.join(d, "b.json")
            with open(good, "w") as f:
                json.dump(random_run(rng, 3), f)
            with open(bad, "w") as f:
                json.dump({"tables": {"pslite": []}}, f)
            out, err = io.StringIO(), io.StringIO()
            sys.argv = ["sidebyside_pool", good, bad]
            with redirect_stdout(out), redirect_stderr(err):
                sp.main()
            self.assertIn("has no pslite_tcmalloc table; left out", err.getvalue())
            self.assertIn("| push_100MB_2w2s | GB/s |", out.getvalue())
            self.assertIn(" of 1 |", out.getvalue())
            self.assertRegex(err.getvalue(), r"run 1: kvbench at abc1234, load average \d\.\d-\d\.\d")


if __name__ == "__main__":
    unittest.main()
