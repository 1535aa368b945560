#!/usr/bin/env python3
"""A DistributedDataParallel script - gloo process group, DDP model, SGD - that trains on
KVStore by one changed line: the comm hook that sends DDP's gradient buckets through the
servers (docs/pytorch.md).

    python3 deploy/launch.py -n 2 -s 2 -- python3 examples/torch_ddp_digits.py

torchrun works as well (deploy/launch.py --workers-started-by-command). Worker 0 prints the
loss as it falls and the test accuracy beside that of the same model trained in one process on
the global batch.
"""
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel as DDP

import kvstore.torch as kvt

EPOCHS, BATCH, LR, SEED = 20, 64, 0.1, 7


def data():
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(SEED))
    return (x[perm][:1500], y[perm][:1500]), (x[perm][1500:], y[perm][1500:])


def model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def train(net, x, y, batch, rank, n, verbose=True):
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9)
    gen = torch.Generator().manual_seed(SEED)
    steps = len(y) // (batch * n)
    for epoch in range(EPOCHS):
        order = torch.randperm(len(y), generator=gen)
        total = 0.0
        for step in range(steps):
            idx = order[(step * n + rank) * batch:(step * n + rank + 1) * batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += float(loss)
        if verbose and rank == 0 and epoch % 5 == 4:
            print(f"epoch {epoch:3d}  loss {total / steps:.4f}", flush=True)


def main():
    torch.set_num_threads(1)
    kvt.init()
    rank, n = kvt.rank(), kvt.size()
    # The process group DDP needs besides gradients (its initial broadcast), as any DDP script
    # makes it: deploy/launch.py and torchrun set MASTER_ADDR, RANK and WORLD_SIZE.
    dist.init_process_group("gloo")
    (x, y), (tx, ty) = data()
    ddp = DDP(model())
    ddp.register_comm_hook(None, kvt.push_pull_hook)  # the one changed line
    train(ddp, x, y, BATCH, rank, n)
    if rank == 0:
        single = model()
        train(single, x, y, BATCH * n, 0, 1, verbose=False)
        with torch.no_grad():
            acc = float((ddp.module(tx).argmax(1) == ty).float().mean())
            acc1 = float((single(tx).argmax(1) == ty).float().mean())
        print(f"test accuracy: {n} workers {acc:.4f}, one process {acc1:.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
