#!/usr/bin/env python3
"""sidebyside_pool: several runs of ../shared/pslite/run.sh judged together.

One run of the side-by-side (3 rounds) decides a case by the median of its 3 per-round ratios;
on a machine whose runs spread by 30% the same build passes or fails a close case by chance.
This reads the `sidebyside.json` of several runs (each run prints where its JSON is) and prints,
for every case, kvbench's ratio to ps-lite's better variant (tcmalloc preloaded):

  runs ahead    in how many runs the run's median ratio was on kvbench's side of 1
  per run       each run's median ratio
  pooled        the median of every round's ratio of every run together, [min-max]

then how many cases are ahead by each judgement, and the 100 MB cases against `--big_bar`
(1.2x). A ratio is kvbench's figure over ps-lite's: above 1 is kvbench faster for GB/s and
ops/s, below 1 for microseconds; "ahead" and the bars read it the right way for each unit.

    python3 tests/bench/sidebyside_pool.py RUN1/sidebyside.json RUN2/sidebyside.json ...
        [--variant=pslite_tcmalloc] [--big_bar=1.2] [--json=FILE]
"""
import argparse
import json
import statistics
import sys


def load_rows(path, variant):
    """The rows of `variant`'s table in one run's JSON, or None when the run lacks it."""
    with open(path) as f:
        run = json.load(f)
    rows = run.get("tables", {}).get(variant)
    if not rows:
        return None, run
    return rows, run


def load_range(run):
    """"load average A-B": the 1-minute load averages the run recorded (sidebyside.sh keeps,
    for each round, the three load averages at its start and at its end)."""
    def firsts(x):
        if isinstance(x, list) and x and isinstance(x[0], list):
            return [v for item in x for v in firsts(item)]
        return x[:1] if isinstance(x, list) else []
    values = []
    for v in firsts(run.get("loadavg", [])):
        try:
            values.append(float(v))
        except (TypeError, ValueError):
            pass
    return f"load average {min(values):.1f}-{max(values):.1f}" if values else "load average ?"


def speedup(ratio, higher_is_better):
    """How many times faster kvbench is: the ratio as is for rates, inverted for latencies."""
    return ratio if higher_is_better else 1.0 / ratio


def pool(runs):
    """`runs`: one list of rows per run. Returns one entry per case, in the first run's order:
    its speedups per run (the run's median ratio), every round's speedup pooled, and counts."""
    order = [row["case"] for row in runs[0]]
    by_run = [{row["case"]: row for row in rows} for rows in runs]
    cases = []
    for case in order:
        present = [r[case] for r in by_run if case in r]
        if len(present) != len(runs):
            raise ValueError(f"case {case} is missing from {len(runs) - len(present)} run(s)")
        better = present[0]["higher_is_better"]
        per_run = [speedup(row["ratio"]["median"], better) for row in present]
        rounds = [speedup(x, better) for row in present for x in row["ratio"]["per_round"]]
        cases.append({
            "case": case,
            "unit": present[0]["unit"],
            "per_run": per_run,
            "runs_ahead": sum(1 for x in per_run if x > 1.0),
            "pooled": statistics.median(rounds),
            "pooled_min": min(rounds),
            "pooled_max": max(rounds),
            "rounds": len(rounds),
        })
    return cases


def summary(cases, runs, big_bar):
    """Lines that count the cases ahead by each judgement."""
    n = len(cases)
    majority = sum(1 for c in cases if 2 * c["runs_ahead"] > runs)
    pooled = sum(1 for c in cases if c["pooled"] > 1.0)
    every = sum(1 for c in cases if c["runs_ahead"] == runs)
    big = [c for c in cases if "_100MB_" in c["case"]]
    big_pooled = sum(1 for c in big if c["pooled"] >= big_bar)
    return [
        f"ahead in every one of the {runs} runs: {every} of {n} cases",
        f"ahead in most runs: {majority} of {n}",
        f"ahead by the pooled median of {cases[0]['rounds'] if cases else 0} rounds: {pooled} of {n}",
        f"100 MB cases at {big_bar}x or more by the pooled median: {big_pooled} of {len(big)}",
    ]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="sidebyside.json of each run")
    p.add_argument("--variant", default="pslite_tcmalloc")
    p.add_argument("--big_bar", type=float, default=1.2)
    p.add_argument("--json", default="")
    args = p.parse_args()
    runs, names = [], []
    for path in args.runs:
        rows, run = load_rows(path, args.variant)
        if rows is None:
            print(f"sidebyside_pool: {path} has no {args.variant} table; left out",
                  file=sys.stderr)
            continue
        runs.append(rows)
        names.append(f"{run.get('kvbench_commit', '?')}, {load_range(run)}")
    if not runs:
        raise SystemExit("sidebyside_pool: no run to pool")
    cases = pool(runs)
    for i, name in enumerate(names):
        print(f"run {i + 1}: kvbench at {name}", file=sys.stderr)
    print("speedup: how many times faster kvbench is than ps-lite (below 1: slower)\n")
    print("| case | unit | runs ahead | per run | pooled [min-max] |")
    print("|---|---|---|---|---|")
    for c in cases:
        per_run = " / ".join(f"{x:.2f}" for x in c["per_run"])
        print(f"| {c['case']} | {c['unit']} | {c['runs_ahead']} of {len(runs)} | {per_run} | "
              f"{c['pooled']:.2f} [{c['pooled_min']:.2f}-{c['pooled_max']:.2f}] |")
    print()
    for line in summary(cases, len(runs), args.big_bar):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": names, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
