"""Distributed stores from Python on a local job: deploy/launch.py starts a scheduler, 2
kvservers and 2 workers running dist_worker.py (or the PyTorch example), every process on
127.0.0.1, each job bounded by --timeout and by subprocess's timeout."""
import os
import re
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def launch(tmp_path, worker, timeout=40, seed=None, servers=2, options=()):
    env = dict(os.environ)
    if seed is not None:
        env["KV_TEST_SEED"] = str(seed)
    cmd = [sys.executable, os.environ["KV_TEST_LAUNCH"], "-n", "2", "-s", str(servers),
           "--scheduler", os.environ["KV_TEST_SCHEDULER"],
           "--kvserver", os.environ["KV_TEST_KVSERVER"],
           f"--server-arg=--checkpoint_root={tmp_path}",
           "--timeout", str(timeout), *options, "--"] + worker
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout + 15)
    print(proc.stdout)
    print(f"job took {time.monotonic() - start:.1f} s")
    return proc


def seed_of(rng):
    return int(rng.integers(0, 2**31))


def test_dist_sync_from_python(tmp_path, rng):
    seed = seed_of(rng)
    proc = launch(tmp_path, [sys.executable, os.path.join(HERE, "dist_worker.py"), "sync",
                             str(tmp_path)], seed=seed)
    assert proc.returncode == 0
    for rank in (0, 1):
        assert f"[worker {rank}] worker {rank}: done" in proc.stdout
        assert proc.stdout.count(f"[worker {rank}] ok ") >= 20
    for rank in (0, 1):
        assert (tmp_path / "ckpt-py" / f"server-{rank}.ckpt").stat().st_size > 0
        assert (tmp_path / "ckpt-abs" / "run1" / f"server-{rank}.ckpt").stat().st_size > 0


def test_dist_async_from_python(tmp_path, rng):
    proc = launch(tmp_path, [sys.executable, os.path.join(HERE, "dist_worker.py"), "async",
                             str(tmp_path)], seed=seed_of(rng), servers=1)
    assert proc.returncode == 0
    assert proc.stdout.count("ok dist_async sum of both pushes") == 2


def test_ctrl_c_in_a_blocked_call(tmp_path, rng):
    proc = launch(tmp_path, [sys.executable, os.path.join(HERE, "dist_worker.py"), "interrupt",
                             str(tmp_path)], seed=seed_of(rng), servers=1)
    assert proc.returncode == 0
    m = re.search(r"ok KeyboardInterrupt ([0-9.]+) s after SIGINT", proc.stdout)
    assert m and float(m.group(1)) < 1.0
    assert "ok rank 0 barriers" in proc.stdout and "ok rank 1 barriers" in proc.stdout


def test_pytorch_example_trains_on_two_workers(tmp_path):
    """examples/torch_digits.py: 2 workers in dist_sync with SGD on the servers; the loss falls
    and the test accuracy is close to the same model trained in one process."""
    proc = launch(tmp_path, [sys.executable, os.environ["KV_TEST_EXAMPLE"]], timeout=50)
    assert proc.returncode == 0
    losses = [float(x) for x in re.findall(r"\[worker 0\] epoch +\d+ +loss ([0-9.]+)",
                                           proc.stdout)]
    assert len(losses) >= 5 and losses[-1] < 0.5 * losses[0], losses
    m = re.search(r"\[worker 0\] test accuracy: 2 workers ([0-9.]+), one process ([0-9.]+)",
                  proc.stdout)
    assert m, proc.stdout
    dist_acc, single_acc = float(m.group(1)), float(m.group(2))
    assert dist_acc > 0.9 and single_acc > 0.9
    assert abs(dist_acc - single_acc) < 0.05
