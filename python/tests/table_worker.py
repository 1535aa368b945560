"""A worker of test_tables.py's job: a kvstore.torch.EmbeddingBag (sum) trained by every
worker in dist_sync, each step's pushes of both workers summed by the servers and scaled by
rescale_grad = 1/2; after each step this worker pulls the rows of both workers' ids and
checks them against a float64 reference that replays both workers' steps (each draws every
worker's batch from the seed)."""
import sys

import numpy as np
import torch

import kvstore.torch as kvt
from table_reference import TableReference


def batch(seed, step, rank):
    rng = np.random.default_rng([seed, step, rank])
    ids = (rng.zipf(1.2, size=(4, 3)) % 200).astype(np.int64) * 2654435761
    coef = rng.integers(-4, 5, size=(4, 6)).astype(np.float32) / 4
    return torch.from_numpy(ids), torch.from_numpy(coef)


def main():
    seed = int(sys.argv[1])
    ctx = kvt.init()
    size, rank = ctx.size, ctx.rank
    args = dict(optimizer="adagrad", lr=0.1, admit_after=2, epsilon=1e-7)
    bag = kvt.EmbeddingBag("ctr", 6, mode="sum", initializer="normal", std=0.1, seed=seed % 1000,
                           **args)
    ref = TableReference(6, rescale_grad=1.0 / size, **args)
    rows = 0
    for step in range(15):
        batches = [batch(seed, step, r) for r in range(size)]
        for ids, _ in batches:
            for id_ in torch.unique(ids).tolist():
                if id_ not in ref.rows and id_ not in ref.initial:
                    ref.know_initial(id_, ctx.store.pull_rows(bag.key, [id_])[0])
        ids, coef = batches[rank]
        (bag(ids) * coef).sum().backward()   # The backward pushes (and waits for the round).
        # The reference: d(sum(out * coef))/d(row of id) is the coef of each bag the id is
        # in; the servers apply one push per round, both workers' rows summed.
        all_ids = np.concatenate([b[0].reshape(-1).numpy() for b in batches])
        all_grads = np.concatenate([np.repeat(b[1].numpy().astype(np.float64), 3, axis=0)
                                    for b in batches])
        ref.push(all_ids, all_grads)
        check = np.unique(all_ids)
        got = ctx.store.pull_rows(bag.key, check)
        want = np.stack([ref.row(i) for i in check])
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=f"step {step}")
        rows += len(check)
    print(f"15 steps checked, {rows} rows", flush=True)
    kvt.shutdown()


if __name__ == "__main__":
    main()
