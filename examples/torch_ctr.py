#!/usr/bin/env python3
"""A click-through model on an embedding table that grows with the data (docs/tables.md):
`kvstore.torch.EmbeddingBag` over 10^7 possible ids - no vocabulary is allocated; a row is
made once an id has been seen in two steps (admission) and forgotten when unseen for 50 steps
(eviction), which here also keeps rare ids from overfitting - feeding an MLP, trained by the workers of a dist_sync job. The table's rows are
updated by the servers' adagrad; the MLP's gradients are averaged by DistributedOptimizer.

Run it on a local cluster (2 workers, 2 kvservers):

    bash deploy/install-python.sh
    bazel build //server:kvserver //server/scheduler
    python3 deploy/launch.py -n 2 -s 2 -- python3 examples/torch_ctr.py

The data are generated: each sample has one id in each of 4 fields, drawn from a Zipf
distribution (a few ids are frequent, most are rare), and a click whose probability is a
logistic function of hidden per-id weights. Worker 0 prints the loss as it falls, then the
test AUC beside that of the same model trained in one process (a "local" store, the same
global batch and hyper-parameters). Run without DMLC_* variables, it trains in one process.
"""
import time

import numpy as np
import torch

import kvstore
import kvstore.torch as kvt

VOCAB = 10_000_000
FIELDS = 4
DIM = 8
TRAIN, TEST = 48_000, 12_000
BATCH = 256            # per worker; the global batch is BATCH * num_workers
EPOCHS = 3
SEED = 11
TABLE = dict(initializer="normal", std=0.05, seed=SEED, optimizer="adagrad", lr=0.1,
             admit_after=2, evict_unseen_rounds=50)


def dataset():
    """(ids, clicks) for training and test: ids of shape (n, FIELDS), int64."""
    rng = np.random.default_rng(SEED)
    n = TRAIN + TEST
    per_field = VOCAB // FIELDS
    ranks = np.minimum(rng.zipf(1.15, size=(n, FIELDS)), per_field)
    ids = (ranks * 2654435761) % per_field + np.arange(FIELDS) * per_field
    # Hidden weights: a fixed function of the id, so every id has its own effect.
    hidden = ((ids * 0x9E3779B1) % 1000003) / 1000003.0 * 3.0 - 1.5
    logit = hidden.sum(axis=1) - 0.5
    clicks = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    ids, clicks = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(clicks)
    return (ids[:TRAIN], clicks[:TRAIN]), (ids[TRAIN:], clicks[TRAIN:])


class CTR(torch.nn.Module):
    def __init__(self, ctx, name):
        super().__init__()
        self.bag = kvt.EmbeddingBag(name, DIM, mode="sum", ctx=ctx, **TABLE)
        torch.manual_seed(SEED)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))

    def forward(self, ids):
        return self.mlp(self.bag(ids)).squeeze(1)


def auc(scores, labels):
    """The area under the ROC curve: the probability that a click scores above a non-click."""
    scores, labels = np.asarray(scores), np.asarray(labels) > 0.5
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores, kind="stable")] = np.arange(1, len(scores) + 1)
    positives = labels.sum()
    negatives = len(labels) - positives
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def evaluate(net, test):
    with torch.no_grad():  # Pulls only: no push without a backward.
        scores = torch.cat([net(test[0][i:i + 4096]) for i in range(0, len(test[1]), 4096)])
    return auc(scores.numpy(), test[1].numpy())


def train(net, optimizer, x, y, batch, log):
    loss_fn = torch.nn.BCEWithLogitsLoss()
    steps = len(y) // batch
    for epoch in range(EPOCHS):
        total = 0.0
        for step in range(steps):
            ids, clicks = x[step * batch:(step + 1) * batch], y[step * batch:(step + 1) * batch]
            optimizer.zero_grad()
            loss = loss_fn(net(ids), clicks)
            loss.backward()     # pushes the MLP's gradients and the table's rows' gradients
            optimizer.step()
            total += float(loss)
            if log and step % 40 == 0:
                print(f"epoch {epoch}  step {step:3d}  loss {total / (step + 1):.4f}", flush=True)
        if log:
            print(f"epoch {epoch}  loss {total / steps:.4f}", flush=True)


def main():
    torch.set_num_threads(1)
    ctx = kvt.init()  # dist_sync in a job of deploy/launch.py; one local worker otherwise
    rank, n = ctx.rank, ctx.size
    (x, y), test = dataset()
    start = time.monotonic()
    net = CTR(ctx, "ctr")
    opt = kvt.DistributedOptimizer(torch.optim.Adam(net.mlp.parameters(), lr=0.01),
                                   named_parameters=net.mlp.named_parameters())
    kvt.broadcast_parameters(net.mlp.state_dict(), root_rank=0)
    train(net, opt, x[rank::n], y[rank::n], BATCH, log=rank == 0)
    seconds = time.monotonic() - start
    if rank == 0:
        distributed = evaluate(net, test)
        local = kvt.Context(kvstore.create("local"))
        single = CTR(local, "ctr")
        # One batch of the one process holds the samples of every worker's batch of a step
        # (worker r trains on samples r, r + n, ...).
        train(single, torch.optim.Adam(single.mlp.parameters(), lr=0.01), x, y, BATCH * n,
              log=False)
        print(f"trained in {seconds:.1f} s by {n} worker(s)")
        print(f"test AUC: {n} workers {distributed:.4f}, one process {evaluate(single, test):.4f}",
              flush=True)
        local.store.close()


if __name__ == "__main__":
    main()
