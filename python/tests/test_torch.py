"""kvstore.torch on real jobs: deploy/launch.py starts a scheduler, 2 kvservers and 2 workers
running torch_worker.py on 127.0.0.1. Each scenario's workers check their models against a
single-process reference and print a hash of their parameters after every step; here the two
workers' hashes must be equal (bitwise identical parameters)."""
import os
import re
import subprocess
import sys

from test_dist import HERE, launch, seed_of


def run(tmp_path, rng, scenario, timeout=90):
    proc = launch(tmp_path, [sys.executable, os.path.join(HERE, "torch_worker.py"), scenario,
                             str(tmp_path)], seed=seed_of(rng), timeout=timeout)
    return proc


def hashes(output, rank):
    return re.findall(rf"\[worker {rank}\] hash (\S+ \d+ \w+)", output)


def test_distributed_optimizer_matches_one_process(tmp_path, rng):
    proc = run(tmp_path, rng, "optimizer")
    assert proc.returncode == 0
    for name in ["cnn", "cnn-frozen-bias", "cnn-2-passes", "cnn-clipped", "lm-adam-tied"]:
        for rank in (0, 1):
            assert f"[worker {rank}] ok {name} " in proc.stdout, name
    assert len(hashes(proc.stdout, 0)) == 5 * 8
    assert hashes(proc.stdout, 0) == hashes(proc.stdout, 1)


def test_optimizer_on_the_servers_matches_one_process(tmp_path, rng):
    """server_side=True: SGD (nesterov, two param groups, StepLR), SGD over 2 backward passes
    with a frozen parameter, Adagrad, RMSprop (StepLR), Adam and AdamW (two groups, LambdaLR)
    run on the servers; every worker's parameters are equal after every step and equal
    torch.optim's in one process; what cannot be mapped is refused, naming it."""
    proc = run(tmp_path, rng, "server", timeout=120)
    assert proc.returncode == 0
    names = ["server-sgd-nesterov-groups", "server-sgd-2-passes", "server-adagrad",
             "server-rmsprop", "server-lm-adam-tied", "server-lm-adamw-groups"]
    for rank in (0, 1):
        for name in names:
            assert f"[worker {rank}] ok {name} " in proc.stdout, name
        assert f"[worker {rank}] ok server-side refusals" in proc.stdout
    assert len(hashes(proc.stdout, 0)) == len(names) * 8
    assert hashes(proc.stdout, 0) == hashes(proc.stdout, 1)


def test_ddp_comm_hook_matches_ddp_with_gloo(tmp_path, rng):
    proc = run(tmp_path, rng, "hook")
    assert proc.returncode == 0
    for rank in (0, 1):
        assert f"[worker {rank}] ok ddp hook matches ddp with gloo" in proc.stdout
    assert len(hashes(proc.stdout, 0)) == 2 * 8
    assert hashes(proc.stdout, 0) == hashes(proc.stdout, 1)


def test_torch_distributed_backend(tmp_path, rng):
    proc = run(tmp_path, rng, "backend")
    assert proc.returncode == 0
    for rank in (0, 1):
        assert f"[worker {rank}] ok ddp on the kvstore backend" in proc.stdout
        assert f"[worker {rank}] ok collectives of the kvstore backend" in proc.stdout
    assert len(hashes(proc.stdout, 0)) == 8
    assert hashes(proc.stdout, 0) == hashes(proc.stdout, 1)


def test_push_pull_and_broadcast(tmp_path, rng):
    proc = run(tmp_path, rng, "api", timeout=40)
    assert proc.returncode == 0
    for rank in (0, 1):
        assert f"[worker {rank}] ok broadcast from another root" in proc.stdout


def test_workers_started_by_torchrun(tmp_path, rng):
    """deploy/launch.py starts the scheduler and servers; torchrun starts the 2 workers, whose
    ranks come from torchrun's RANK and WORLD_SIZE."""
    # --redirects/--tee 1: torchrun 1.13 on Python 3.11 cannot parse their default of 0.
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2", "--redirects=1", "--tee=1", f"--log_dir={tmp_path}/logs"]
    proc = launch(tmp_path, torchrun + [os.path.join(HERE, "torch_worker.py"), "api",
                                        str(tmp_path)],
                  seed=seed_of(rng), timeout=60, options=["--workers-started-by-command"])
    assert proc.returncode == 0
    for rank in (0, 1):  # Each worker's rank is the RANK torchrun gave it.
        done = (tmp_path / f"done-{rank}").read_text()
        assert done == f"api rank {rank} of 2, RANK {rank}", done


def test_ddp_example_trains_on_two_workers(tmp_path, rng):
    """examples/torch_ddp_digits.py: a DDP script whose one changed line is the comm hook."""
    proc = launch(tmp_path, [sys.executable, os.environ["KV_TEST_DDP_EXAMPLE"]],
                  seed=seed_of(rng), timeout=60)
    assert proc.returncode == 0
    losses = [float(v) for v in re.findall(r"\[worker 0\] epoch +\d+ +loss ([0-9.]+)",
                                            proc.stdout)]
    assert len(losses) == 4 and losses[-1] < 0.5 * losses[0], losses
    m = re.search(r"\[worker 0\] test accuracy: 2 workers ([0-9.]+), one process ([0-9.]+)",
                  proc.stdout)
    assert m, proc.stdout
    assert float(m.group(1)) > 0.9 and abs(float(m.group(1)) - float(m.group(2))) < 0.02


def test_a_dead_worker_fails_the_job_instead_of_hanging(tmp_path, rng):
    proc = run(tmp_path, rng, "die", timeout=60)
    assert proc.returncode != 0 and proc.returncode != 124, proc.returncode
    assert "worker 1 exits abruptly" in proc.stdout
    assert "worker 1 exited with status 3" in proc.stdout  # The job's end names it.


def test_torchbench_runs(tmp_path):
    """tests/bench/torchbench.py --quick: a smoke run of the benchmark (its figures are not
    checked: speed is measured by running the benchmark, docs/benchmarks.md)."""
    proc = subprocess.run(
        [sys.executable, os.environ["KV_TEST_TORCHBENCH"], "--quick", "--workers", "2",
         "--rounds", "1", "--steps", "1", "--module", os.environ["KV_TEST_MODULE"],
         "--scheduler", os.environ["KV_TEST_SCHEDULER"],
         "--kvserver", os.environ["KV_TEST_KVSERVER"], "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    print(proc.stdout)
    assert proc.returncode == 0
    rows = re.findall(
        r"^\s+(kvt-opt|kvt-server|kvt-hook|ddp-gloo)\s+[0-9.]+ ms\s+[0-9.]+ samples/s",
        proc.stdout, re.M)
    assert len(rows) == 3 * 4, proc.stdout
