"""A worker of the kvstore.torch tests (test_torch.py), started by deploy/launch.py.

    torch_worker.py SCENARIO DIR

Each scenario trains small models on 2 workers and checks them against a float64-free,
independent reference: the same model trained in this process on the global batch with plain
torch.optim (every worker computes it). It prints "hash MODEL STEP HEX" after every step (the
test compares them across workers: parameters must be bitwise identical) and "ok NAME" for each
check passed; an AssertionError fails the worker.
"""
import hashlib
import os
import sys

import numpy as np
import torch

import kvstore.torch as kvt

STEPS = 8
# max |param - reference| after STEPS steps: float32 sums taken in another order. The Adam
# model is float64: Adam divides by sqrt(v), which makes a gradient that cancels to nearly zero
# sensitive to the order of a float32 sum (measured: 2e-4 apart with float32).
TOLERANCE = 1e-5
TOLERANCE_FLOAT64 = 1e-9


def log(text):
    print(text, flush=True)


def param_hash(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def check_close(name, model, reference, tolerance=TOLERANCE):
    worst = max(float((a.detach() - b.detach()).abs().max())
                for a, b in zip(model.parameters(), reference.parameters()))
    assert worst <= tolerance, f"{name}: parameters differ from the reference by {worst}"
    log(f"ok {name} (max difference {worst:.2e})")


# --- models and data ----------------------------------------------------------------------

def digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    return x, torch.tensor(d.target, dtype=torch.int64)


class CNN(torch.nn.Module):
    """A small CNN; `frozen` freezes the first convolution's bias (a parameter without a
    gradient)."""

    def __init__(self, frozen=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 6, 3, padding=1)
        self.fc1 = torch.nn.Linear(6 * 4 * 4, 32)
        self.fc2 = torch.nn.Linear(32, 10)
        if frozen:
            self.conv.bias.requires_grad_(False)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class TinyLM(torch.nn.Module):
    """A one-layer Transformer language model whose output layer reuses the embedding (a
    parameter used twice in one forward)."""

    VOCAB, WIDTH, LENGTH = 32, 32, 12

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(self.VOCAB, self.WIDTH)
        self.layer = torch.nn.TransformerEncoderLayer(self.WIDTH, 4, 64, dropout=0.0,
                                                      batch_first=True)

    def forward(self, tokens):
        h = self.layer(self.embed(tokens))
        return h @ self.embed.weight.t()  # tied: the embedding again


def tokens(n, seed):
    """Sequences where each token follows from the last (t -> 3t + 1 mod V) with 10% noise."""
    g = torch.Generator().manual_seed(seed)
    seq = torch.zeros(n, TinyLM.LENGTH + 1, dtype=torch.int64)
    seq[:, 0] = torch.randint(0, TinyLM.VOCAB, (n,), generator=g)
    for i in range(1, TinyLM.LENGTH + 1):
        nxt = (3 * seq[:, i - 1] + 1) % TinyLM.VOCAB
        noise = torch.randint(0, TinyLM.VOCAB, (n,), generator=g)
        seq[:, i] = torch.where(torch.rand(n, generator=g) < 0.1, noise, nxt)
    return seq[:, :-1], seq[:, 1:]


def lm_loss(model, x, y):
    return torch.nn.functional.cross_entropy(model(x).reshape(-1, TinyLM.VOCAB), y.reshape(-1))


def cnn_loss(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


# --- training -----------------------------------------------------------------------------

def micro_batches(x, y, step, n, passes, batch, seed):
    """The micro-batches of one step: [worker][pass] -> (x, y), the same in every process."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    order = torch.randperm(len(y), generator=g)[:n * passes * batch]
    return [[(x[order[(w * passes + p) * batch:(w * passes + p + 1) * batch]],
              y[order[(w * passes + p) * batch:(w * passes + p + 1) * batch]])
             for p in range(passes)] for w in range(n)]


def train_pair(name, make_model, make_opt, loss_fn, data, seed, passes=1, clip=None,
               tolerance=TOLERANCE, server_side=False, make_sched=None):
    """Trains `make_model()` with kvstore.torch's DistributedOptimizer (`make_opt(model)`,
    its optimizer on the servers with `server_side`) on this worker's micro-batches, and the
    same model in this process on all of them (the reference); `make_sched(optimizer)` makes
    a learning-rate scheduler stepped after each step on both."""
    rank, n = kvt.rank(), kvt.size()
    torch.manual_seed(seed + 100 * rank)  # Different initial weights: broadcast must fix them.
    model = make_model()
    torch.manual_seed(seed)
    reference = make_model()
    opt = kvt.DistributedOptimizer(make_opt(model),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, bucket_bytes=2048,
                                   server_side=server_side)
    ref_opt = make_opt(reference)
    scheds = [make_sched(opt), make_sched(ref_opt)] if make_sched else []
    # Named by the run: models of other dtypes reuse the parameter names.
    kvt.broadcast_parameters({f"{name}/{k}": v for k, v in model.state_dict().items()},
                             root_rank=0)
    if rank != 0:  # The broadcast gave every worker rank 0's initial weights.
        torch.manual_seed(seed)
        assert param_hash(model) == param_hash(make_model()), "broadcast_parameters"
    reference.load_state_dict(model.state_dict())
    kvt.broadcast_optimizer_state(opt, root_rank=0)
    x, y = data
    for step in range(STEPS):
        batches = micro_batches(x, y, step, n, passes, 16, seed)
        opt.zero_grad()
        for bx, by in batches[rank]:
            loss_fn(model, bx, by).backward()
        # Every bucket's push started during backward, as its last gradient became ready.
        assert all(b.handle is not None for b in opt._kv_buckets), "a bucket did not start"
        if clip is not None:
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        log(f"hash {name} {step} {param_hash(model)}")
        # The reference: the mean over workers of each worker's summed micro-batch losses.
        ref_opt.zero_grad()
        total = sum(loss_fn(reference, bx, by) for w in range(n) for bx, by in batches[w]) / n
        total.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(reference.parameters(), clip)
        ref_opt.step()
        for sched in scheds:
            sched.step()
    check_close(name, model, reference, tolerance)


def optimizer_scenario():
    data = digits()
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)  # noqa: E731
    adam = lambda m: torch.optim.Adam(m.parameters(), lr=1e-3)  # noqa: E731
    train_pair("cnn", CNN, sgd, cnn_loss, data, seed=1)
    train_pair("cnn-frozen-bias", lambda: CNN(frozen=True), sgd, cnn_loss, data, seed=2)
    train_pair("cnn-2-passes", CNN, sgd, cnn_loss, data, seed=3, passes=2)
    train_pair("cnn-clipped", CNN, sgd, cnn_loss, data, seed=4, clip=0.5)
    train_pair("lm-adam-tied", lambda: TinyLM().double(), adam, lm_loss, tokens(2048, 5),
               seed=5, tolerance=TOLERANCE_FLOAT64)


def two_groups(model, **kwargs):
    """Param groups as torch users make them: weights with weight decay, biases without and
    at half the learning rate."""
    weights = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [dict(params=weights, **kwargs),
            dict(params=biases, lr=kwargs["lr"] / 2, weight_decay=0.0)]


def server_scenario():
    """DistributedOptimizer(server_side=True): torch optimizers run on the servers, with their
    param groups and learning-rate schedulers, against torch.optim in one process."""
    x, y = digits()
    x64 = (x.double(), y)
    step_lr = lambda opt: torch.optim.lr_scheduler.StepLR(opt, 3, gamma=0.5)  # noqa: E731
    train_pair("server-sgd-nesterov-groups", CNN,
               lambda m: torch.optim.SGD(two_groups(m, lr=0.1, weight_decay=1e-3),
                                         momentum=0.9, nesterov=True),
               cnn_loss, (x, y), seed=21, server_side=True, make_sched=step_lr)
    train_pair("server-sgd-2-passes", lambda: CNN(frozen=True),
               lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.5),
               cnn_loss, (x, y), seed=22, passes=2, server_side=True)
    train_pair("server-adagrad", lambda: CNN().double(),
               lambda m: torch.optim.Adagrad(m.parameters(), lr=0.05, weight_decay=1e-3),
               cnn_loss, x64, seed=23, server_side=True, tolerance=TOLERANCE_FLOAT64)
    train_pair("server-rmsprop", lambda: CNN().double(),
               lambda m: torch.optim.RMSprop(m.parameters(), lr=1e-3, alpha=0.9),
               cnn_loss, x64, seed=24, server_side=True, tolerance=TOLERANCE_FLOAT64,
               make_sched=step_lr)
    lm = lambda: TinyLM().double()  # noqa: E731
    train_pair("server-lm-adam-tied", lm,
               lambda m: torch.optim.Adam(m.parameters(), lr=1e-3, weight_decay=1e-4),
               lm_loss, tokens(2048, 25), seed=25, server_side=True,
               tolerance=TOLERANCE_FLOAT64)
    train_pair("server-lm-adamw-groups", lm,
               lambda m: torch.optim.AdamW(two_groups(m, lr=2e-3, weight_decay=0.05),
                                           betas=(0.8, 0.99)),
               lm_loss, tokens(2048, 26), seed=26, server_side=True,
               tolerance=TOLERANCE_FLOAT64,
               make_sched=lambda opt: torch.optim.lr_scheduler.LambdaLR(
                   opt, lambda s: 1.0 / (1 + s)))
    refusals = {
        "dampening=0.1": lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9,
                                                   dampening=0.1),
        "amsgrad=True": lambda m: torch.optim.Adam(m.parameters(), amsgrad=True),
        "centered=True": lambda m: torch.optim.RMSprop(m.parameters(), centered=True),
        "torch.optim.Adadelta": lambda m: torch.optim.Adadelta(m.parameters()),
        "differs from group 0 in momentum": lambda m: torch.optim.SGD(
            [dict(params=[m.conv.weight], momentum=0.5), dict(params=[m.conv.bias])],
            lr=0.1, momentum=0.9),
    }
    for expected, make in refusals.items():
        try:
            kvt.DistributedOptimizer(make(CNN()), server_side=True)
            raise AssertionError(f"not refused: {expected}")
        except NotImplementedError as e:
            assert expected in str(e), e
    try:
        kvt.DistributedOptimizer(torch.optim.SGD(CNN().parameters(), lr=0.1), server_side=True,
                                 compression=kvt.Compression.fp16)
        raise AssertionError("fp16 compression on the servers was not refused")
    except ValueError as e:
        assert "Compression.none" in str(e), e
    log("ok server-side refusals")


def hook_scenario(directory):
    """DDP with gloo, then the same DDP with kvstore.torch's comm hook: same parameters."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank, n = kvt.rank(), kvt.size()
    dist.init_process_group("gloo", init_method=f"file://{directory}/gloo-rendezvous",
                            rank=rank, world_size=n)
    x, y = digits()
    results = []
    for use_hook in (False, True):
        torch.manual_seed(11)
        model = DDP(CNN())
        if use_hook:
            model.register_comm_hook(None, kvt.push_pull_hook)  # the one changed line
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for step in range(STEPS):
            batches = micro_batches(x, y, step, n, 1, 16, 11)
            opt.zero_grad()
            cnn_loss(model, *batches[rank][0]).backward()
            opt.step()
            log(f"hash ddp-{'hook' if use_hook else 'gloo'} {step} {param_hash(model.module)}")
        results.append(model.module)
    check_close("ddp hook matches ddp with gloo", results[1], results[0])
    dist.destroy_process_group()


def backend_scenario():
    """torch.distributed with the "kvstore" backend: DDP's own allreduce through the servers,
    and the collectives a script calls."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("kvstore")  # env:// from the launcher's RANK, WORLD_SIZE, MASTER_*
    rank, n = dist.get_rank(), dist.get_world_size()
    assert (rank, n) == (kvt.rank(), kvt.size())
    x, y = digits()
    torch.manual_seed(13 + rank)  # DDP's initial broadcast must make them equal
    model = DDP(CNN())
    torch.manual_seed(13)
    reference = CNN()
    reference.load_state_dict(model.module.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        batches = micro_batches(x, y, step, n, 1, 16, 13)
        opt.zero_grad()
        cnn_loss(model, *batches[rank][0]).backward()
        opt.step()
        log(f"hash ddp-kvstore-backend {step} {param_hash(model.module)}")
        ref_opt.zero_grad()
        (sum(cnn_loss(reference, *batches[w][0]) for w in range(n)) / n).backward()
        ref_opt.step()
    check_close("ddp on the kvstore backend", model.module, reference)
    # The collectives a script calls directly.
    t = torch.arange(6, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(t)
    assert t.tolist() == [float(i * n * (n + 1) // 2) for i in range(6)], t
    t = torch.full((3,), float(rank))
    dist.broadcast(t, src=n - 1)
    assert t.tolist() == [float(n - 1)] * 3, t
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(gathered, torch.tensor([rank, 10 * rank]))
    assert [g.tolist() for g in gathered] == [[r, 10 * r] for r in range(n)], gathered
    dist.barrier()
    try:
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.MAX)
        raise AssertionError("allreduce MAX did not raise")
    except (NotImplementedError, RuntimeError) as e:
        assert "MAX" in str(e) or "SUM and AVG" in str(e), e
    try:
        dist.reduce(torch.ones(2), dst=0)
        raise AssertionError("reduce did not raise")
    except NotImplementedError as e:
        assert "reduce is not supported" in str(e), e
    log("ok collectives of the kvstore backend")
    dist.destroy_process_group()


def api_scenario():
    """push_pull, push_pull_async and broadcast against values computed here."""
    rank, n = kvt.rank(), kvt.size()
    seed = int(os.environ.get("KV_TEST_SEED", "1"))
    values = [np.random.default_rng([seed, r]).standard_normal(10).astype(np.float32)
              for r in range(n)]
    total = sum(v.astype(np.float64) for v in values)
    got = kvt.push_pull(torch.from_numpy(values[rank]), "api/x")
    assert np.allclose(got.numpy(), total / n, rtol=1e-6, atol=1e-6), got
    got = kvt.push_pull(torch.from_numpy(values[rank]), "api/x", op=kvt.Sum)
    assert np.allclose(got.numpy(), total, rtol=1e-6, atol=1e-6), got
    # Worker 0's push of "api/y" stays in flight until worker 1 pushes, after the barrier.
    store = kvt.init().store
    if rank != 0:
        store.barrier()
    handle = kvt.push_pull_async(torch.from_numpy(values[rank]), "api/y", average=False)
    if rank == 0:
        try:
            kvt.push_pull_async(torch.from_numpy(values[rank]), "api/y")
            raise AssertionError("a name in flight was not refused")
        except ValueError as e:
            assert "used twice" in str(e), e
        store.barrier()
    out = handle.wait()
    assert handle.poll()
    assert np.allclose(out.numpy(), total, rtol=1e-6, atol=1e-6)
    log("ok push_pull and push_pull_async")
    t = torch.full((4,), float(rank + 1))
    kvt.broadcast([t], ["api/b"], root_rank=n - 1)
    assert t.tolist() == [float(n)] * 4, t
    obj = kvt.broadcast_object({"rank": rank, "text": "x" * (rank + 3)}, root_rank=1)
    assert obj == {"rank": 1, "text": "xxxx"}, obj
    log("ok broadcast from another root")


def die_scenario():
    """Worker 1 dies in the middle of training; worker 0 must fail with an error, not hang."""
    rank = kvt.rank()
    torch.manual_seed(3)
    model = CNN()
    opt = kvt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = digits()
    for step in range(STEPS):
        if rank == 1 and step == 2:
            log("worker 1 exits abruptly")
            os._exit(3)
        opt.zero_grad()
        cnn_loss(model, x[:16], y[:16]).backward()
        try:
            opt.step()
        except Exception as e:  # noqa: BLE001 - what the test reads
            log(f"step {step} failed: {type(e).__name__}: {e}")
            sys.exit(4)
    raise AssertionError("training went on without worker 1")


def main():
    scenario, directory = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    kvt.init()
    if scenario == "optimizer":
        optimizer_scenario()
    elif scenario == "server":
        server_scenario()
    elif scenario == "hook":
        hook_scenario(directory)
    elif scenario == "backend":
        backend_scenario()
    elif scenario == "api":
        api_scenario()
    elif scenario == "die":
        die_scenario()
    log(f"worker {kvt.rank()}: done")
    # Also as a file: torchrun's relayed output may interleave the workers' lines.
    with open(os.path.join(directory, f"done-{kvt.rank()}"), "w") as f:
        f.write(f"{scenario} rank {kvt.rank()} of {kvt.size()}, RANK {os.environ.get('RANK')}")


if __name__ == "__main__":
    main()
