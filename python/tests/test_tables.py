"""Tables from Python (docs/tables.md): init_table, pull_rows and push_rows on an in-process
store against a float64 reference, the errors, kvstore.torch.Embedding and EmbeddingBag
against PyTorch's own modules, and a table trained by 2 workers on 2 kvservers."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import kvstore
import kvstore.torch as kvt
from table_reference import TableReference

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_local_table_matches_a_float64_reference(rng, optimizer):
    kv = kvstore.create("local")
    dim = int(rng.integers(1, 9))
    args = dict(optimizer=optimizer, lr=0.05, wd=0.01, admit_after=int(rng.integers(1, 4)))
    kv.init_table("emb", dim, initializer="uniform", init_range=(-0.5, 0.5), seed=11, **args)
    ref = TableReference(dim, epsilon=1e-8, **args)
    for step in range(25):
        ids = (rng.zipf(1.3, size=int(rng.integers(0, 40))) % 300).astype(np.int64) * 7919 - 900
        for id_ in ids:
            if int(id_) not in ref.initial and int(id_) not in ref.rows:
                ref.know_initial(id_, kv.pull_rows("emb", [id_])[0])
        grads = rng.integers(-8, 9, size=(len(ids), dim)).astype(np.float32) / 4
        kv.push_rows("emb", ids, grads)
        ref.push(ids, grads)
        known = np.array(sorted(set(ref.rows) | set(ref.initial)), dtype=np.int64)
        got = kv.pull_rows("emb", known)
        want = np.stack([ref.row(i) for i in known]) if len(known) else np.zeros((0, dim))
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=f"step {step}")
    kv.close()


def test_table_rows_are_the_initializers_and_bad_calls_are_refused():
    kv = kvstore.create("local")
    kv.init_table(3, 4, initializer="normal", mean=1.0, std=0.0)
    np.testing.assert_array_equal(kv.pull_rows(3, np.array([5, -9, 5])), np.ones((3, 4)))
    out = torch.zeros(2, 4)
    assert kv.pull_rows(3, torch.tensor([1, 2]), out) is out
    assert torch.equal(out, torch.ones(2, 4))
    with pytest.raises(kvstore.NotFoundError, match="no table"):
        kv.pull_rows(4, [1])
    with pytest.raises(kvstore.InvalidArgumentError, match="float32"):
        kv.push_rows(3, [1, 2], np.zeros((2, 5), dtype=np.float32))
    with pytest.raises(kvstore.InvalidArgumentError, match="integers"):
        kv.pull_rows(3, np.array([1.5, 2.0]))
    with pytest.raises(kvstore.InvalidArgumentError, match="integers"):
        kv.push_rows(3, torch.tensor([1.0]), np.zeros((1, 4), dtype=np.float32))
    with pytest.raises(kvstore.AlreadyExistsError):
        kv.init_table(3, 4)
    kv.init(7, np.zeros(2, dtype=np.float32))
    with pytest.raises(kvstore.AlreadyExistsError, match="own"):
        kv.init_table(7, 4)
    with pytest.raises(kvstore.InvalidArgumentError, match="optimizer"):
        kv.init_table(8, 4, optimizer="lamb")
    with pytest.raises(kvstore.InvalidArgumentError, match="admit_after"):
        kv.init_table(9, 4, admit_after=0)
    # A table over its budget with eviction off refuses the push, changing nothing.
    kv.init_table(10, 2, max_rows=3, evict_over_budget=False, optimizer="sgd", lr=1.0)
    kv.push_rows(10, [1, 2, 3], np.ones((3, 2), dtype=np.float32))
    with pytest.raises(kvstore.ResourceExhaustedError, match="max_rows"):
        kv.push_rows(10, [4], np.ones((1, 2), dtype=np.float32))
    np.testing.assert_array_equal(kv.pull_rows(10, [1, 4]), [[-1, -1], [0, 0]])
    kv.close()


def test_torch_embedding_and_embedding_bag_step_as_torch_would(rng):
    ctx = kvt.Context(kvstore.create("local"))
    emb = kvt.Embedding("e", 5, ctx=ctx, initializer="uniform", init_range=(-1, 1), seed=4,
                        optimizer="sgd", lr=0.5)
    bag = kvt.EmbeddingBag("b", 5, mode="mean", ctx=ctx, initializer="uniform",
                           init_range=(-1, 1), seed=5, optimizer="sgd", lr=0.5)
    for module in (emb, bag):
        ids = torch.from_numpy(rng.integers(0, 12, size=(6, 3))) * 1000003
        unique = torch.unique(ids)
        before = ctx.store.pull_rows(module.key, unique)
        target = torch.from_numpy(rng.normal(size=(6, 3, 5) if module is emb else (6, 5))).float()
        out = module(ids)
        # PyTorch's own module over the same rows, for the forward and the gradient.
        weight = before.clone().requires_grad_()
        index = torch.searchsorted(unique, ids)
        if module is emb:
            want = torch.nn.functional.embedding(index, weight)
        else:
            want = torch.nn.functional.embedding_bag(index, weight, mode="mean")
        torch.testing.assert_close(out, want)
        (out * target).sum().backward()
        (want * target).sum().backward()
        after = ctx.store.pull_rows(module.key, unique)
        torch.testing.assert_close(after, before - 0.5 * weight.grad, rtol=1e-5, atol=1e-6)
    ctx.store.close()


def test_a_table_trained_by_two_workers_on_two_servers(tmp_path, rng):
    seed = int(rng.integers(0, 2**31))
    cmd = [sys.executable, os.environ["KV_TEST_LAUNCH"], "-n", "2", "-s", "2",
           "--scheduler", os.environ["KV_TEST_SCHEDULER"],
           "--kvserver", os.environ["KV_TEST_KVSERVER"], "--timeout", "60", "--",
           sys.executable, os.path.join(HERE, "table_worker.py"), str(seed)]
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=90)
    print(proc.stdout)
    assert proc.returncode == 0
    for rank in (0, 1):
        assert re.search(rf"\[worker {rank}\] 15 steps checked, \d+ rows", proc.stdout)


def test_the_click_through_example_trains_to_the_one_process_auc():
    """examples/torch_ctr.py: an EmbeddingBag over 10^7 ids (admission, eviction) and an MLP,
    trained by 2 workers on 2 kvservers; the loss falls and the test AUC is the one process's."""
    cmd = [sys.executable, os.environ["KV_TEST_LAUNCH"], "-n", "2", "-s", "2",
           "--scheduler", os.environ["KV_TEST_SCHEDULER"],
           "--kvserver", os.environ["KV_TEST_KVSERVER"], "--timeout", "90", "--",
           sys.executable, os.environ["KV_TEST_CTR_EXAMPLE"]]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    print(proc.stdout)
    assert proc.returncode == 0
    losses = [float(x) for x in re.findall(r"\[worker 0\] epoch \d  loss ([0-9.]+)", proc.stdout)]
    assert len(losses) == 3, proc.stdout
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.95 * losses[0], losses
    m = re.search(r"\[worker 0\] test AUC: 2 workers ([0-9.]+), one process ([0-9.]+)",
                  proc.stdout)
    assert m, proc.stdout
    distributed, single = float(m.group(1)), float(m.group(2))
    assert single > 0.7
    assert abs(distributed - single) < 0.01
