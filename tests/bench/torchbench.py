#!/usr/bin/env python3
"""torchbench: data-parallel PyTorch training steps through kvstore.torch next to DDP with gloo,
in the same job, alternating, on real jobs of deploy/launch.py over 127.0.0.1.

For each number of workers (--workers, default 2 and 4; one kvserver per worker) it starts one
job whose workers run, round by round, every model with every integration:
  kvt-opt    kvstore.torch.DistributedOptimizer (pushes start during backward)
  kvt-server the same with server_side=True: SGD runs on the kvservers, weights come back
  kvt-hook   DDP on gloo with kvstore.torch.push_pull_hook (the one-line change)
  ddp-gloo   DDP on gloo, as a DDP script runs without KVStore
on three models: a communication-heavy MLP (about 25 M parameters), a ResNet-18-sized CNN on
32x32 generated images, and a small Transformer encoder on generated tokens. Per model it
prints the median step time and samples per second of each integration, the ratio to
ddp-gloo (above 1: faster than DDP with gloo) and, for kvt-opt, the share of its communication
hidden behind backward: 1 - (time step() waited after backward) / (time a blocking push_pull of
the same gradients takes without overlap), both measured in the same round.

    bazel build -c opt //python:_kvstore.so //server:kvserver //server/scheduler
    python3 tests/bench/torchbench.py                       # 2 and 4 workers, 3 rounds
    python3 tests/bench/torchbench.py --workers 2 --rounds 5 --steps 8
    python3 tests/bench/torchbench.py --quick               # small models: a smoke run

Every worker and kvserver shares this machine's cores: on a 2-vCPU VM the figures measure a
CPU-bound machine, not a network (docs/benchmarks.md says which machine gave which table).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from staged_package import staged_package

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INTEGRATIONS = ["kvt-opt", "kvt-server", "kvt-hook", "ddp-gloo"]


def models(quick):
    import torch
    nn = torch.nn

    def mlp():
        width = 256 if quick else 4096
        return nn.Sequential(nn.Linear(1024, width), nn.ReLU(), nn.Linear(width, width),
                             nn.ReLU(), nn.Linear(width, 1024))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                        nn.BatchNorm2d(cout))
                          if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.short(x))

    def resnet():
        widths = [8, 16, 32, 64] if quick else [64, 128, 256, 512]
        layers, cin = [nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
                       nn.ReLU()], widths[0]
        for i, w in enumerate(widths):
            layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
            cin = w
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
        return nn.Sequential(*layers)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            d = 64 if quick else 256
            self.embed = nn.Embedding(1000, d)
            layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
            self.body = nn.TransformerEncoder(layer, 2)
            self.out = nn.Linear(d, 1000)

        def forward(self, x):
            return self.out(self.body(self.embed(x)))

    g = torch.Generator().manual_seed(0)
    return {
        # name: (make, batch, inputs, loss)
        "mlp-25M": (mlp, 32, lambda b: (torch.randn(b, 1024, generator=g),
                                        torch.randn(b, 1024, generator=g)),
                    lambda m, x, y: torch.nn.functional.mse_loss(m(x), y)),
        "resnet18-32px": (resnet, 8, lambda b: (torch.randn(b, 3, 32, 32, generator=g),
                                                torch.randint(0, 10, (b,), generator=g)),
                          lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y)),
        "transformer": (Encoder, 8, lambda b: (torch.randint(0, 1000, (b, 64), generator=g),
                                               torch.randint(0, 1000, (b, 64), generator=g)),
                        lambda m, x, y: torch.nn.functional.cross_entropy(
                            m(x).reshape(-1, 1000), y.reshape(-1))),
    }


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import kvstore.torch as kvt

    torch.set_num_threads(1)
    kvt.init()
    dist.init_process_group("gloo")
    rank, n = kvt.rank(), kvt.size()
    table = {}
    for name, (make, batch, data, loss_fn) in models(args.quick).items():
        torch.manual_seed(1)
        params = sum(p.numel() for p in make().parameters())
        x, y = data(batch)
        runs = {}
        for integration in INTEGRATIONS:
            torch.manual_seed(1)
            model = make()
            if integration in ("kvt-opt", "kvt-server"):
                opt = kvt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-3),
                                               named_parameters=model.named_parameters(),
                                               server_side=integration == "kvt-server")
                net = model
            else:
                net = DDP(model)
                if integration == "kvt-hook":
                    net.register_comm_hook(None, kvt.push_pull_hook)
                opt = torch.optim.SGD(net.parameters(), lr=1e-3)
            runs[integration] = (net, opt)
        times = {i: [] for i in INTEGRATIONS}
        hidden = []
        flat_name = f"bench/{name}/flat"
        for r in range(args.rounds + 1):  # Round 0 warms up (connections, keys, allocators).
            for integration in INTEGRATIONS:
                net, opt = runs[integration]
                for _ in range(args.steps):
                    dist.barrier()
                    start = time.perf_counter()
                    opt.zero_grad()
                    loss_fn(net, x, y).backward()
                    backward_end = time.perf_counter()
                    opt.step()
                    end = time.perf_counter()
                    if r > 0:
                        times[integration].append(end - start)
                    if integration == "kvt-opt" and r > 0:
                        # Exposed: step()'s wait for the averages; the optimizer's own step
                        # (SGD on the CPU) is measured apart, on the averaged gradients.
                        t = time.perf_counter()
                        with opt.skip_synchronize():
                            opt.step()
                        own = time.perf_counter() - t
                        exposed = max(0.0, (end - backward_end) - own)
                        grads = torch.cat([p.grad.reshape(-1) for p in net.parameters()
                                           if p.grad is not None])
                        dist.barrier()
                        t = time.perf_counter()
                        kvt.push_pull(grads, flat_name)
                        total = time.perf_counter() - t
                        hidden.append(max(0.0, 1 - exposed / total) if total > 0 else 0.0)
        table[name] = (params, batch, times, hidden)
    if rank == 0:
        print(f"{n} workers, {n} kvservers, {args.rounds} rounds x {args.steps} steps, "
              f"median step time (load average {os.getloadavg()[0]:.2f} at the end)")
        for name, (params, batch, times, hidden) in table.items():
            gloo = statistics.median(times["ddp-gloo"])
            print(f"  {name} ({params / 1e6:.1f} M parameters, batch {batch} per worker)")
            for integration in INTEGRATIONS:
                med = statistics.median(times[integration])
                extra = (f"  hidden behind backward {statistics.median(hidden) * 100:4.0f}%"
                         if integration == "kvt-opt" else "")
                print(f"    {integration:10s} {med * 1e3:9.1f} ms  {batch * n / med:8.1f} samples/s"
                      f"  vs ddp-gloo {gloo / med:5.2f}x{extra}")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--module", default=os.path.join(ROOT, "bazel-bin/python/_kvstore.so"),
                   help="the built module (its package files are taken from python/kvstore)")
    p.add_argument("--scheduler", default=os.path.join(ROOT, "bazel-bin/server/scheduler/scheduler"))
    p.add_argument("--kvserver", default=os.path.join(ROOT, "bazel-bin/server/kvserver"))
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="steps per integration per round")
    p.add_argument("--quick", action="store_true", help="small models, for a smoke run")
    p.add_argument("--timeout", type=float, default=3000)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    with staged_package(ROOT, args.module) as env:
        for n in args.workers:
            cmd = [sys.executable, os.path.join(ROOT, "deploy/launch.py"), "-n", str(n),
                   "-s", str(n), "--scheduler", args.scheduler, "--kvserver", args.kvserver,
                   "--timeout", str(args.timeout), "--", sys.executable,
                   os.path.abspath(__file__), "--worker", "--rounds", str(args.rounds),
                   "--steps", str(args.steps)] + (["--quick"] if args.quick else [])
            out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
            for line in out.stdout.splitlines():
                if line.startswith("[worker 0]") and "[info]" not in line:
                    print(line[len("[worker 0] "):], flush=True)
            if out.returncode != 0:
                print(out.stdout)
                sys.exit(out.returncode)


if __name__ == "__main__":
    main()
