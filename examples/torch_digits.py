#!/usr/bin/env python3
"""Data-parallel training of a PyTorch MLP on scikit-learn's handwritten digits, through
`kvstore.torch` (docs/pytorch.md): each worker of a dist_sync job computes gradients on its
shard; DistributedOptimizer pushes them as backward produces them, and every worker's SGD with
momentum steps on the gradients the servers averaged.

Run it on a local cluster (2 workers, 2 kvservers):

    bash deploy/install-python.sh
    bazel build //server:kvserver //server/scheduler
    python3 deploy/launch.py -n 2 -s 2 -- python3 examples/torch_digits.py

Worker 0 prints the loss of each epoch as it falls, then the test accuracy beside that of the
same model (same initial weights, same hyper-parameters, same global batch) trained in one
process with torch.optim.SGD. Run without DMLC_* variables, it trains in one process with a
"local" store.
"""
import time

import torch
from sklearn.datasets import load_digits

import kvstore.torch as kvt

EPOCHS = 30
BATCH = 64          # per worker; the global batch is BATCH * num_workers
LR = 0.1
MOMENTUM = 0.9
SEED = 7


def dataset():
    """Digits scaled to [0, 1], split 1500 train / 297 test by a fixed permutation."""
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(SEED))
    x, y = x[perm], y[perm]
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


def model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


def accuracy(net, x, y):
    with torch.no_grad():
        return float((net(x).argmax(dim=1) == y).float().mean())


def train_distributed(train):
    """Horovod-style data parallelism through kvstore.torch: each worker's optimizer steps on
    the gradients averaged over the workers by the servers."""
    rank, n = kvt.rank(), kvt.size()
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    opt = kvt.DistributedOptimizer(opt, named_parameters=net.named_parameters())
    kvt.broadcast_parameters(net.state_dict(), root_rank=0)  # every worker starts from rank 0's
    x, y = train[0][rank::n], train[1][rank::n]
    steps = len(train[1]) // n // BATCH
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(SEED + rank)
    for epoch in range(EPOCHS):
        order = torch.randperm(len(y), generator=gen)
        total = 0.0
        for step in range(steps):
            idx = order[step * BATCH:(step + 1) * BATCH]
            opt.zero_grad()
            loss = loss_fn(net(x[idx]), y[idx])
            loss.backward()                 # the gradients' pushes start during backward
            opt.step()                      # waits for the averages, then SGD steps
            total += float(loss)
        if rank == 0 and (epoch % 3 == 0 or epoch == EPOCHS - 1):
            print(f"epoch {epoch:3d}  loss {total / steps:.4f}", flush=True)
    return net


def train_one_process(train, steps_per_epoch, global_batch):
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(SEED)
    x, y = train
    for _ in range(EPOCHS):
        order = torch.randperm(len(y), generator=gen)
        for step in range(steps_per_epoch):
            idx = order[step * global_batch:(step + 1) * global_batch]
            opt.zero_grad()
            loss_fn(net(x[idx]), y[idx]).backward()
            opt.step()
    return net


def main():
    torch.set_num_threads(1)
    kvt.init()  # dist_sync in a job of deploy/launch.py; one local worker otherwise
    train, test = dataset()
    start = time.monotonic()
    net = train_distributed(train)
    seconds = time.monotonic() - start
    if kvt.rank() == 0:
        n = kvt.size()
        single = train_one_process(train, len(train[1]) // n // BATCH, BATCH * n)
        print(f"trained in {seconds:.1f} s by {n} worker(s)")
        print(f"test accuracy: {n} workers {accuracy(net, *test):.4f}, "
              f"one process {accuracy(single, *test):.4f}", flush=True)


if __name__ == "__main__":
    main()
