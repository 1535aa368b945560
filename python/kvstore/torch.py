"""kvstore.torch: PyTorch training on KVStore the way it is done with Horovod or BytePS.

::

    import torch
    import kvstore.torch as kvt

    kvt.init()                                   # joins the job of deploy/launch.py
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * kvt.size())
    optimizer = kvt.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    kvt.broadcast_parameters(model.state_dict(), root_rank=0)
    kvt.broadcast_optimizer_state(optimizer, root_rank=0)
    for x, y in data:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()          # gradients start their push as they are ready
        optimizer.step()                         # waits for the averaged gradients, then steps

A DDP script keeps its ``DistributedDataParallel`` and adds one line,
``ddp_model.register_comm_hook(None, kvstore.torch.push_pull_hook)``: DDP's buckets then go
through the servers instead of the process group's allreduce.

Every worker's gradients are summed by the servers (``dist_sync``: a round completes once every
worker pushed) and read back by every worker, so all workers receive the same bytes and their
parameters stay bitwise identical. docs/pytorch.md says what maps to what and what differs from
Horovod and BytePS.

Threading: the functions and the optimizer are used from the training thread (autograd's hooks
run there on the CPU); a :class:`Handle` may be waited for from any thread.
"""
from __future__ import annotations

import atexit
import contextlib
import itertools
import pickle
import threading
import time
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.distributed

from . import KVStore, InvalidArgumentError, FailedPreconditionError, create as _create

__all__ = [
    "init", "shutdown", "rank", "size", "local_rank", "Context", "Average", "Sum",
    "Compression", "push_pull", "push_pull_async", "Handle", "broadcast",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "DistributedOptimizer", "push_pull_hook", "ProcessGroupKVStore", "Embedding",
    "EmbeddingBag",
]

#: Reduction operations, as Horovod's ``hvd.Average`` and ``hvd.Sum``.
Average = "average"
Sum = "sum"

_KEY_PREFIX = "torch/"
_DTYPES = {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64}


class Compression:
    """Gradient compression for the wire, as Horovod's ``hvd.Compression``: ``none`` sends
    gradients as they are, ``fp16`` sends float32/float64 gradients as float16 (halving the
    bytes; the servers sum float16 values)."""

    class none:  # noqa: N801 - Horovod's name.
        @staticmethod
        def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
            return tensor, None

        @staticmethod
        def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
            return tensor

    class fp16:  # noqa: N801
        @staticmethod
        def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
            if tensor.dtype in (torch.float32, torch.float64):
                return tensor.to(torch.float16), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
            return tensor if ctx is None else tensor.to(ctx)


class Handle:
    """An operation in flight (:func:`push_pull_async`): :meth:`poll` says whether it has
    completed, :meth:`wait` blocks until it has and returns its result."""

    def __init__(self, ctx: "Context", keys: List[str], finish: Callable[[], Any]) -> None:
        self._ctx = ctx
        self._keys = keys
        self._finish = finish
        self._done = threading.Event()
        self._error: Optional[BaseException] = None
        self._result: Any = None
        self._callbacks: List[Callable[["Handle"], None]] = []
        self._lock = threading.Lock()
        ctx._pending.add(self)
        ctx._waiters.submit(self._run)

    def _run(self) -> None:
        try:
            self._ctx.store.wait(self._keys)
            self._result = self._finish()
        except BaseException as e:  # noqa: BLE001 - handed to wait().
            self._error = e
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)
        self._ctx._pending.discard(self)
        self._ctx = None  # A finished handle does not keep the store.

    def poll(self) -> bool:
        """True once the operation has completed (with or without an error)."""
        return self._done.is_set()

    def wait(self) -> Any:
        """Blocks until the operation has completed; returns its result or raises its error."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result

    def add_done_callback(self, callback: Callable[["Handle"], None]) -> None:
        """Calls `callback(handle)` once the operation has completed (at once if it has), on
        the thread that completes it."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)


class _Waiters:
    """Threads that wait for handles, started as handles need them and reused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: List[Callable[[], None]] = []
        self._idle = 0
        self._wake = threading.Condition(self._lock)

    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            self._tasks.append(task)
            if self._idle > 0:
                self._wake.notify()
                return
        threading.Thread(target=self._loop, name="kvstore.torch wait", daemon=True).start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._tasks:
                    self._idle += 1
                    woken = self._wake.wait(timeout=10)
                    self._idle -= 1
                    if not woken and not self._tasks:
                        return
                task = self._tasks.pop(0)
            task()
            del task  # What it holds (a store) goes now, not at the next task.


class Context:
    """One store and the keys PyTorch's tensors use in it. :func:`init` makes the process's
    default one; pass another to the functions as ``ctx=`` to use several.

    Args:
        store: a :class:`kvstore.KVStore` to use (its updater must stay the default ASSIGN for
            the keys this context makes: they carry sums); by default one is created -
            ``"dist_sync"`` when the launch environment names a scheduler
            (``DMLC_PS_ROOT_PORT``), ``"local"`` (one worker) otherwise.
    """

    def __init__(self, store: Optional[KVStore] = None) -> None:
        if store is None:
            import os
            distributed = "DMLC_PS_ROOT_PORT" in os.environ or "KV_SCHEDULER_PORT" in os.environ
            store = _create("dist_sync" if distributed else "local")
        self.store = store
        self._shapes: Dict[str, Tuple[Tuple[int, ...], torch.dtype]] = {}
        self._inflight: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._waiters = _Waiters()
        self._counters: Dict[str, itertools.count] = {}
        self._pending: "weakref.WeakSet[Handle]" = weakref.WeakSet()
        # The optimizer of the newest DistributedOptimizer(server_side=True) on this store.
        self._server_optimizer: Optional["_ServerOptimizer"] = None

    def drain(self, timeout: float = 60) -> bool:
        """Waits up to `timeout` seconds for every handle in flight to complete; False when
        some have not."""
        deadline = time.monotonic() + timeout
        for handle in list(self._pending):
            if not handle._done.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    @property
    def rank(self) -> int:
        return self.store.rank

    @property
    def size(self) -> int:
        return self.store.num_workers

    def next_name(self, kind: str) -> str:
        """A fresh name for an object of `kind`: the same sequence on every worker, as long as
        every worker makes its objects in the same order."""
        with self._lock:
            counter = self._counters.setdefault(kind, itertools.count())
            return f"{kind}{next(counter)}"

    def ensure_keys(self, names: Sequence[str], like: Sequence[torch.Tensor],
                    initial: bool = False) -> List[str]:
        """The keys of `names`, initialised (to zeros, or with `like` itself when `initial`:
        rank 0's values are stored; in one call) where they are new. A name seen before with
        another shape or dtype is refused, naming it and both."""
        keys, fresh, values = [], [], []
        with self._lock:
            for name, tensor in zip(names, like):
                if tensor.dtype not in _DTYPES:
                    raise InvalidArgumentError(
                        f"kvstore.torch: {name!r}: dtype {tensor.dtype} is not one the store "
                        f"holds (float32, float16, bfloat16, float64, int32, int64)")
                spec = (tuple(tensor.shape), tensor.dtype)
                seen = self._shapes.get(name)
                if seen is None:
                    self._shapes[name] = spec
                    fresh.append(_KEY_PREFIX + name)
                    values.append(tensor.detach().contiguous() if initial
                                  else torch.zeros(spec[0], dtype=spec[1]))
                elif seen != spec:
                    raise InvalidArgumentError(
                        f"kvstore.torch: {name!r} was used with shape {list(seen[0])} and dtype "
                        f"{seen[1]}, now with shape {list(spec[0])} and dtype {spec[1]}")
                keys.append(_KEY_PREFIX + name)
        if fresh:
            self.store.init(fresh, values)
        return keys

    def start(self, names: Sequence[str]) -> None:
        """Marks `names` in flight; refuses a name already in flight (a name used twice)."""
        with self._lock:
            busy = [n for n in names if n in self._inflight]
            if busy or len(set(names)) != len(names):
                twice = busy[0] if busy else next(n for n in names if names.count(n) > 1)
                raise InvalidArgumentError(
                    f"kvstore.torch: the name {twice!r} is used twice: an operation of that "
                    f"name is still in flight (give each tensor a name of its own)")
            for n in names:
                self._inflight[n] = 1

    def done(self, names: Sequence[str]) -> None:
        with self._lock:
            for n in names:
                self._inflight.pop(n, None)


_default: Optional[Context] = None


def init(store: Optional[KVStore] = None) -> Context:
    """Joins the job (Horovod's ``hvd.init()``): makes the process's default
    :class:`Context`. Calling it again returns the same context."""
    global _default
    if _default is None:
        _default = Context(store)
    return _default


def shutdown() -> None:
    """Waits (up to a minute) for the default context's operations in flight, then forgets it;
    its store goes when nothing else holds it (and is closed at exit). Runs at exit, while
    the interpreter can still run the threads that complete those operations."""
    global _default
    if _default is not None:
        _default.drain()
    _default = None


atexit.register(shutdown)


def _ctx(ctx: Optional[Context]) -> Context:
    if ctx is not None:
        return ctx
    if _default is None:
        raise FailedPreconditionError("kvstore.torch: call kvstore.torch.init() first")
    return _default


def rank(ctx: Optional[Context] = None) -> int:
    """This worker's rank in ``[0, size())``."""
    return _ctx(ctx).rank


def size(ctx: Optional[Context] = None) -> int:
    """The number of workers."""
    return _ctx(ctx).size


def local_rank(ctx: Optional[Context] = None) -> int:
    """This worker's rank among the workers of its machine: ``LOCAL_RANK`` when a launcher set
    it (torchrun), else 0."""
    import os
    return int(os.environ.get("LOCAL_RANK", "0"))


def _scale(tensor: torch.Tensor, op: str, n: int) -> None:
    """Divides a sum over `n` workers by `n` for op Average (an op checked by _check_op)."""
    if op == Average and n > 1:
        if tensor.is_floating_point():
            tensor.div_(n)
        else:
            tensor.floor_divide_(n)


def push_pull_async(tensor: torch.Tensor, name: str, average: Optional[bool] = None,
                    op: Optional[str] = None, priority: int = 0, *, inplace: bool = False,
                    ctx: Optional[Context] = None) -> Handle:
    """Starts summing (or averaging) `tensor` over the workers; returns a :class:`Handle` whose
    ``wait()`` gives the result: a new tensor, or `tensor` itself with ``inplace=True`` (a
    contiguous CPU tensor, left unchanged until then). `name` picks the key (the same on every
    worker); a name in flight is refused. Every worker must push_pull the same names in the
    same number of calls."""
    c = _ctx(ctx)
    op = _op(average, op)
    _check_op(op)
    if inplace and not tensor.is_contiguous():
        raise InvalidArgumentError(f"push_pull {name!r}: inplace=True needs a contiguous tensor")
    data = tensor.detach() if inplace else tensor.detach().contiguous().clone()
    [key] = c.ensure_keys([name], [data])
    c.start([name])
    try:
        c.store.pushpull(key, data, priority=priority, block=False)
    except BaseException:
        c.done([name])
        raise

    def finish() -> torch.Tensor:
        c.done([name])
        _scale(data, op, c.size)
        return data
    return Handle(c, [key], finish)


def push_pull(tensor: torch.Tensor, name: str, average: Optional[bool] = None,
              op: Optional[str] = None, priority: int = 0, *,
              ctx: Optional[Context] = None) -> torch.Tensor:
    """The sum (or average, the default) of `tensor` over the workers, as a new tensor
    (Horovod's ``allreduce``, BytePS's ``push_pull``)."""
    return push_pull_async(tensor, name, average, op, priority, ctx=ctx).wait()


def _op(average: Optional[bool], op: Optional[str]) -> str:
    if average is not None and op is not None:
        raise InvalidArgumentError("kvstore.torch: give average= or op=, not both")
    if op is not None:
        return op
    return Sum if average is False else Average


def _check_op(op: str) -> None:
    if op not in (Average, Sum):
        raise InvalidArgumentError(
            f"kvstore.torch: op is kvstore.torch.Average or kvstore.torch.Sum, not {op!r}")


def broadcast(tensors: Sequence[torch.Tensor], names: Sequence[str], root_rank: int = 0, *,
              ctx: Optional[Context] = None) -> None:
    """Overwrites every worker's `tensors` with root_rank's, in place, in one call. Each worker
    contributes root_rank's value or zeros to a sum, which is exact, so any rank may be the
    root and a name may be broadcast again."""
    c = _ctx(ctx)
    if not 0 <= root_rank < c.size:
        raise InvalidArgumentError(
            f"kvstore.torch: root_rank {root_rank} is outside [0, {c.size})")
    if not tensors:
        return
    contributions = []
    for t in tensors:
        value = t.detach()
        if value.dtype == torch.bool:
            value = value.to(torch.int32)
        contributions.append(value.contiguous().clone() if c.rank == root_rank
                             else torch.zeros(value.shape, dtype=value.dtype))
    keys = c.ensure_keys(list(names), contributions)
    c.start(list(names))
    try:
        c.store.pushpull(keys, contributions)
    finally:
        c.done(list(names))
    with torch.no_grad():
        for t, value in zip(tensors, contributions):
            t.copy_(value.to(t.dtype))


def broadcast_parameters(params: Any, root_rank: int = 0, *,
                         ctx: Optional[Context] = None) -> None:
    """Horovod's ``broadcast_parameters``: `params` is a ``state_dict()`` or an iterable of
    ``(name, tensor)`` (``named_parameters()``); every worker's tensors become root_rank's."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
    names, tensors = [], []
    for name, t in items:
        if not isinstance(t, torch.Tensor):
            raise InvalidArgumentError(
                f"broadcast_parameters: {name!r} is a {type(t).__name__}, not a tensor")
        names.append(f"params/{name}")
        tensors.append(t)
    broadcast(tensors, names, root_rank, ctx=ctx)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None, *,
                     ctx: Optional[Context] = None) -> Any:
    """Returns root_rank's `obj` on every worker (pickled; Horovod's ``broadcast_object``)."""
    c = _ctx(ctx)
    name = name or c.next_name("object")
    payload = pickle.dumps(obj) if c.rank == root_rank else b""
    length = torch.tensor([len(payload)], dtype=torch.int64)
    broadcast([length], [f"objects/{name}/length"], root_rank, ctx=c)
    n = int(length.item())
    words = torch.zeros((n + 7) // 8, dtype=torch.int64)
    if c.rank == root_rank:
        padded = payload + b"\0" * (len(words) * 8 - n)
        words = torch.frombuffer(bytearray(padded), dtype=torch.int64).clone()
    if len(words):
        broadcast([words], [f"objects/{name}/{n}"], root_rank, ctx=c)
    if c.rank == root_rank:
        return obj
    return pickle.loads(words.numpy().tobytes()[:n])


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int = 0, *,
                              ctx: Optional[Context] = None) -> None:
    """Horovod's ``broadcast_optimizer_state``: every worker's optimizer takes root_rank's
    ``state_dict()`` (hyper-parameters and state, e.g. momentum buffers)."""
    state = broadcast_object(optimizer.state_dict(), root_rank, ctx=ctx)
    if _ctx(ctx).rank != root_rank:
        optimizer.load_state_dict(state)


class _Bucket:
    """Parameters whose gradients travel together under one key."""

    def __init__(self, index: int, params: List[torch.nn.Parameter], name: str) -> None:
        self.index = index
        self.params = params
        self.name = name
        self.ready = 0
        self.handle: Optional[Handle] = None
        self.flat: Optional[torch.Tensor] = None
        # On the servers: the pulled weights, one buffer reused by every step.
        self.out: Optional[torch.Tensor] = None
        self.compress_ctx: Any = None


class _ServerOptimizer:
    """The servers' form of a torch optimizer (``DistributedOptimizer(server_side=True)``):
    which server optimizer runs torch's formula, with which hyper-parameters, for the keys of
    one optimizer's buckets.

    Each param group's learning rate and weight decay become per-key multipliers of a base of
    1 (lr_mult, wd_mult: exact), so groups may differ in those two; every other hyper-parameter
    must be the same in every group. The configuration is read from ``param_groups`` again at
    every step: a change (a learning-rate scheduler's) is sent to the servers with keep_state,
    between two barriers, before any worker pushes that step's gradients."""

    # torch class -> (server optimizer, {torch argument: server hyper-parameter}, the
    # arguments that must keep these values). lr and weight_decay go per key.
    _FORMS = {
        "SGD": ("torch_sgd", {"momentum": "momentum", "nesterov": "nesterov"},
                {"dampening": 0, "maximize": False}),
        "Adam": ("torch_adam", {"betas": ("beta1", "beta2"), "eps": "epsilon"},
                 {"amsgrad": False, "maximize": False}),
        "AdamW": ("torch_adamw", {"betas": ("beta1", "beta2"), "eps": "epsilon"},
                  {"amsgrad": False, "maximize": False}),
        "Adagrad": ("adagrad", {"eps": "epsilon"},
                    {"lr_decay": 0, "initial_accumulator_value": 0, "maximize": False}),
        "RMSprop": ("rmsprop", {"alpha": "rho", "eps": "epsilon"},
                    {"momentum": 0, "centered": False, "maximize": False}),
    }
    # Arguments of how torch computes, not what: no server counterpart needed.
    _IGNORED = {"lr", "weight_decay", "params", "foreach", "capturable", "differentiable",
                "fused", "initial_lr"}

    def __init__(self, optimizer: torch.optim.Optimizer, op: str, size: int,
                 key_prefix: str) -> None:
        # The torch.optim class the optimizer is (or derives from).
        kind = next((c.__name__ for c in type(optimizer).__mro__
                     if c.__name__ in self._FORMS and c.__module__.startswith("torch.optim")),
                    type(optimizer).__name__)
        if kind not in self._FORMS:
            raise NotImplementedError(
                f"DistributedOptimizer(server_side=True): torch.optim.{kind} has no form on "
                f"the servers (SGD, Adam, AdamW, Adagrad and RMSprop have); use "
                f"server_side=False")
        self.name, self._mapped, self._fixed = self._FORMS[kind]
        self._kind = kind
        self._optimizer = optimizer
        self.rescale = 1.0 / size if op == Average else 1.0
        self.key_prefix = key_prefix
        self.group_keys: List[List[str]] = [[] for _ in optimizer.param_groups]
        self.sent: Optional[Dict[str, Any]] = None
        self.retired = False  # A later server-side optimizer replaced this one on the store.
        self.config()  # Refuses what cannot be mapped now, not at the first step.

    def config(self) -> Dict[str, Any]:
        """The server optimizer's configuration for the param groups as they are now."""
        shared: Optional[Dict[str, Any]] = None
        lr_mult: Dict[str, float] = {}
        wd_mult: Dict[str, float] = {}
        for index, group in enumerate(self._optimizer.param_groups):
            values: Dict[str, Any] = {}
            for arg, value in group.items():
                if arg in self._IGNORED:
                    continue
                if arg in self._fixed:
                    if bool(value) != bool(self._fixed[arg]):
                        raise NotImplementedError(
                            f"DistributedOptimizer(server_side=True): torch.optim.{self._kind}"
                            f" with {arg}={value!r} has no form on the servers (only "
                            f"{arg}={self._fixed[arg]!r}); use server_side=False")
                    continue
                if arg not in self._mapped:
                    raise NotImplementedError(
                        f"DistributedOptimizer(server_side=True): torch.optim.{self._kind}'s "
                        f"argument {arg!r} has no form on the servers; use server_side=False")
                target = self._mapped[arg]
                if isinstance(target, tuple):
                    values.update({t: float(v) for t, v in zip(target, value)})
                else:
                    values[target] = value if isinstance(value, bool) else float(value)
            if values.get("nesterov") is False:
                del values["nesterov"]
            if shared is None:
                shared = values
            elif values != shared:
                differing = sorted(k for k in set(values) | set(shared)
                                   if values.get(k) != shared.get(k))
                raise NotImplementedError(
                    f"DistributedOptimizer(server_side=True): param group {index} differs from "
                    f"group 0 in {', '.join(differing)}; on the servers groups may differ in "
                    f"lr and weight_decay only")
            for key in self.group_keys[index]:
                lr_mult[key] = float(group["lr"])
                wd_mult[key] = float(group.get("weight_decay", 0.0))
        return dict(shared or {}, learning_rate=1.0, wd=1.0, rescale_grad=self.rescale,
                    lr_mult=lr_mult, wd_mult=wd_mult, key_prefix=self.key_prefix)

    def send_if_changed(self, ctx: "Context") -> None:
        """Sends the configuration when it is new or changed: every worker calls this at the
        same point of the same step (before pushing it). Rank 0 sends it between barriers, so
        no push of this step reaches a server before it (keep_state after the first time)."""
        config = self.config()
        if config == self.sent:
            return
        store = ctx.store
        store.barrier()
        if ctx.rank == 0:
            store.set_optimizer(self.name, keep_state=self.sent is not None, **config)
        store.barrier()
        self.sent = config


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods a :func:`DistributedOptimizer` adds to the wrapped optimizer's class."""

    def _kv_setup(self, ctx: Context, named_parameters, compression, backward_passes_per_step,
                  op, bucket_bytes, server_side) -> None:
        _check_op(op)
        if server_side and compression is not Compression.none:
            raise InvalidArgumentError(
                "DistributedOptimizer(server_side=True) sends gradients in the parameters' "
                "dtype: compression must be Compression.none")
        if backward_passes_per_step < 1:
            raise InvalidArgumentError(
                f"DistributedOptimizer: backward_passes_per_step is >= 1, not "
                f"{backward_passes_per_step}")
        self._kv = ctx
        self._kv_compression = compression
        self._kv_passes = backward_passes_per_step
        self._kv_op = op
        params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names_of = {}
            for name, p in named:
                if name in names_of.values():
                    raise InvalidArgumentError(
                        f"DistributedOptimizer: the parameter name {name!r} is used twice")
                names_of[id(p)] = name
            missing = [i for i, p in enumerate(params) if id(p) not in names_of]
            if missing:
                raise InvalidArgumentError(
                    f"DistributedOptimizer: named_parameters does not name {len(missing)} of "
                    f"the optimizer's parameters (the first is parameter {missing[0]} of its "
                    f"param_groups)")
        else:
            names_of = {id(p): f"param.{i}" for i, p in enumerate(params)}
        seen = set()
        trained = []
        for p in params:
            if id(p) in seen:
                raise InvalidArgumentError(
                    f"DistributedOptimizer: parameter {names_of[id(p)]!r} is in the optimizer "
                    f"twice")
            seen.add(id(p))
            if p.requires_grad:
                trained.append(p)
        # Buckets in the order backward reaches the parameters (the reverse of the model's),
        # each of one dtype (and, on the servers, one param group) and about bucket_bytes; the
        # last (the model's first layers, needed first by the next forward) gets the highest
        # priority.
        prefix = ctx.next_name("optimizer")
        group_of = {id(p): i for i, g in enumerate(self.param_groups) for p in g["params"]}
        self._kv_server: Optional[_ServerOptimizer] = None
        if server_side:
            self._kv_server = _ServerOptimizer(self, op, ctx.size, f"{_KEY_PREFIX}{prefix}/")
        self._kv_buckets: List[_Bucket] = []
        current: List[torch.nn.Parameter] = []
        current_bytes = 0
        for p in reversed(trained):
            nbytes = p.numel() * p.element_size()
            if current and (current_bytes + nbytes > bucket_bytes or
                            current[0].dtype != p.dtype or
                            (server_side and group_of[id(current[0])] != group_of[id(p)])):
                self._kv_buckets.append(_Bucket(len(self._kv_buckets), current, ""))
                current, current_bytes = [], 0
            current.append(p)
            current_bytes += nbytes
        if current:
            self._kv_buckets.append(_Bucket(len(self._kv_buckets), current, ""))
        self._kv_bucket_of: Dict[int, _Bucket] = {}
        likes = []
        for b in self._kv_buckets:
            b.name = f"{prefix}/bucket{b.index}"
            numel = sum(p.numel() for p in b.params)
            flat, _ = compression.compress(torch.zeros(numel, dtype=b.params[0].dtype))
            likes.append(flat)
            for p in b.params:
                self._kv_bucket_of[id(p)] = b
            if server_side:
                self._kv_server.group_keys[group_of[id(b.params[0])]].append(
                    _KEY_PREFIX + b.name)
        if server_side:
            # One optimizer runs on a store's servers: the newest. Keys are made at the first
            # step, with the weights.
            if ctx._server_optimizer is not None:
                ctx._server_optimizer.retired = True
            ctx._server_optimizer = self._kv_server
        else:
            ctx.ensure_keys([b.name for b in self._kv_buckets], likes)
        self._kv_step_begun = False
        self._kv_names = names_of
        self._kv_counts: Dict[int, int] = {id(p): 0 for p in trained}
        self._kv_skip = False
        self._kv_hooks = []
        self._kv_grad_accs = []  # Held: a hook lives as long as its accumulator node.
        for p in trained:
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            self._kv_hooks.append(accumulator.register_hook(self._kv_hook_for(p)))
            self._kv_grad_accs.append(accumulator)

    def _kv_hook_for(self, p: torch.nn.Parameter) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            pid = id(p)
            self._kv_counts[pid] += 1
            if self._kv_counts[pid] > self._kv_passes:
                raise FailedPreconditionError(
                    f"DistributedOptimizer: parameter {self._kv_names[pid]!r} got a gradient "
                    f"{self._kv_counts[pid]} times since the last step, with "
                    f"backward_passes_per_step={self._kv_passes}: call step() or "
                    f"synchronize() after each {self._kv_passes} backward pass(es)")
            if self._kv_counts[pid] == self._kv_passes:
                bucket = self._kv_bucket_of[pid]
                bucket.ready += 1
                if bucket.ready == len(bucket.params):
                    self._kv_launch(bucket)
        return hook

    def _kv_begin_server_step(self) -> None:
        """On the servers, before the first push of a step: the buckets' keys, made once with
        rank 0's weights, and the optimizer's configuration when it is new or changed."""
        if self._kv_step_begun:
            return
        if self._kv_server.retired:
            raise FailedPreconditionError(
                "DistributedOptimizer(server_side=True): a later server-side "
                "DistributedOptimizer on this store replaced this one's optimizer on the "
                "servers (one runs per store)")
        self._kv_step_begun = True
        c = self._kv
        if self._kv_server.sent is None:
            weights = [torch.cat([p.detach().reshape(-1) for p in b.params])
                       for b in self._kv_buckets]
            c.ensure_keys([b.name for b in self._kv_buckets], weights, initial=True)
        self._kv_server.send_if_changed(c)

    def _kv_launch(self, bucket: _Bucket) -> None:
        """Starts the push_pull of a bucket's gradients (zeros for a parameter without one);
        on the servers, the pull brings back the updated weights (into ``bucket.out``)."""
        if self._kv_server is not None:
            self._kv_begin_server_step()
        grads = [p.grad.detach().reshape(-1) if p.grad is not None
                 else torch.zeros(p.numel(), dtype=p.dtype) for p in bucket.params]
        flat, bucket.compress_ctx = self._kv_compression.compress(torch.cat(grads))
        flat = flat.contiguous()
        if flat.data_ptr() == grads[0].data_ptr() and len(grads) == 1:
            flat = flat.clone()
        bucket.flat = flat
        if self._kv_server is not None and bucket.out is None:
            bucket.out = torch.empty_like(flat)
        c = self._kv
        c.start([bucket.name])
        key = _KEY_PREFIX + bucket.name
        try:
            c.store.pushpull(key, flat, out=bucket.out, priority=bucket.index, block=False)
        except BaseException:
            c.done([bucket.name])
            raise

        def finish() -> None:
            c.done([bucket.name])
        bucket.handle = Handle(c, [key], finish)

    def synchronize(self) -> None:
        """Waits until every gradient has been averaged over the workers and written into its
        parameter's ``.grad`` (starting the buckets that backward did not complete: a parameter
        without a gradient this step contributes zeros). Call it before changing gradients
        (clipping), then step inside :meth:`skip_synchronize`. On the servers
        (``server_side=True``) it waits for the updated weights instead and writes them into
        the parameters; ``.grad`` keeps this worker's own gradients."""
        for bucket in self._kv_buckets:
            if bucket.handle is None:
                self._kv_launch(bucket)
        n = self._kv.size
        for bucket in self._kv_buckets:
            bucket.handle.wait()
        if self._kv_server is not None:
            self._kv_install_weights()
            return
        for bucket in self._kv_buckets:
            flat = self._kv_compression.decompress(bucket.flat, bucket.compress_ctx)
            _scale(flat, self._kv_op, n)
            offset = 0
            with torch.no_grad():
                for p in bucket.params:
                    part = flat[offset:offset + p.numel()].view_as(p)
                    offset += p.numel()
                    if p.grad is None:
                        p.grad = part.to(p.dtype).clone()
                    else:
                        p.grad.copy_(part)
        self._kv_reset()

    def _kv_reset(self) -> None:
        for bucket in self._kv_buckets:
            bucket.handle = None
            bucket.flat = None
            bucket.ready = 0
        for pid in self._kv_counts:
            self._kv_counts[pid] = 0
        self._kv_step_begun = False

    def _kv_install_weights(self) -> None:
        """On the servers: the pulled weights become the parameters' values."""
        with torch.no_grad():
            for bucket in self._kv_buckets:
                offset = 0
                for p in bucket.params:
                    p.copy_(bucket.out[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
        self._kv_reset()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within it, :meth:`step` does not synchronize (Horovod's form for clipping:
        ``synchronize()``, clip, then ``step()`` inside this)."""
        if self._kv_server is not None:
            raise FailedPreconditionError(
                "DistributedOptimizer(server_side=True): the servers apply each gradient as it "
                "was pushed during backward, so nothing can change it between synchronize() "
                "and step(); clip before backward ends, or use server_side=False")
        self._kv_skip = True
        try:
            yield
        finally:
            self._kv_skip = False

    def step(self, closure=None):
        if self._kv_server is not None:
            if closure is not None:
                raise InvalidArgumentError(
                    "DistributedOptimizer(server_side=True): step() takes no closure (the "
                    "servers update the weights from the gradients pushed during backward)")
            self.synchronize()
            return None
        if not self._kv_skip:
            self.synchronize()
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none: bool = False):
        if any(b.handle is not None for b in self._kv_buckets):
            raise FailedPreconditionError(
                "DistributedOptimizer: zero_grad() was called while gradients are being "
                "averaged (after backward, before step() or synchronize()); call step() or "
                "synchronize() first")
        return super(self.__class__, self).zero_grad(set_to_none=set_to_none)


def DistributedOptimizer(optimizer: torch.optim.Optimizer,  # noqa: N802 - Horovod's name.
                         named_parameters: Optional[Iterable[Tuple[str, Any]]] = None,
                         compression: Any = Compression.none,
                         backward_passes_per_step: int = 1,
                         op: str = Average,
                         bucket_bytes: int = 4 << 20,
                         server_side: bool = False, *,
                         ctx: Optional[Context] = None) -> torch.optim.Optimizer:
    """Wraps `optimizer` so that each step uses the gradients averaged (or summed, op=Sum)
    over the workers, as Horovod's and BytePS's ``DistributedOptimizer``.

    Each parameter's gradient is taken when autograd has accumulated it (a hook on its
    gradient accumulator); parameters are grouped into buckets of about `bucket_bytes` in
    the order backward reaches them, and a bucket's push starts as soon as its last gradient
    is ready, while backward goes on. The buckets of the model's first layers - needed first
    by the next forward - get the highest priority. ``step()`` waits for what is outstanding,
    writes the averages into ``.grad`` and runs the wrapped optimizer's step.

    Args:
        optimizer: a ``torch.optim`` optimizer; the result is an instance of its class.
        named_parameters: ``model.named_parameters()``, for names in errors and keys.
        compression: ``Compression.none`` or ``Compression.fp16``.
        backward_passes_per_step: backward passes accumulated locally before a push.
        op: ``Average`` (default) or ``Sum``.
        bucket_bytes: the size of a bucket.
        server_side: run the optimizer on the servers (MXNet's update_on_kvstore): each
            bucket's gradients are pushed during backward and its updated weights pulled back;
            ``step()`` waits for them and writes them into the parameters. SGD (momentum,
            nesterov, weight_decay), Adam, AdamW, Adagrad and RMSprop map to the servers'
            optimizers with torch's formulas; their param groups may differ in lr and
            weight_decay; a learning-rate scheduler's changes reach the servers at the next
            step, keeping the optimizer's state. Anything else raises NotImplementedError
            naming it. One per store.
    """
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               {k: v for k, v in _DistributedOptimizer.__dict__.items()
                if k not in ("__dict__", "__weakref__", "__module__", "__doc__")})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._kv_setup(_ctx(ctx), named_parameters, compression, backward_passes_per_step, op,
                      bucket_bytes, server_side)
    return wrapped


def push_pull_hook(state: Any, bucket: Any) -> torch.futures.Future:
    """A DDP communication hook: ``ddp.register_comm_hook(None, kvstore.torch.push_pull_hook)``
    averages each of DDP's gradient buckets through the servers instead of the process group
    (``state`` may be a :class:`Context`, or None for the default one)."""
    c = state if isinstance(state, Context) else _ctx(None)
    tensor = bucket.buffer()
    name = f"ddp/bucket{bucket.index()}/{tensor.numel()}/{str(tensor.dtype)[6:]}"
    handle = push_pull_async(tensor, name, inplace=True, ctx=c)
    future: torch.futures.Future = torch.futures.Future()

    def done(h: Handle) -> None:
        try:
            future.set_result(h.wait())
        except BaseException as e:  # noqa: BLE001 - handed to DDP.
            future.set_exception(e)
    handle.add_done_callback(done)
    return future



class _Slots:
    """Keys for a collective of one kind, dtype and size: call i uses slot i % SLOTS, waiting
    for that slot's previous call first. Collectives are issued in the same order on every
    worker, so every worker picks the same slot for the same call."""

    SLOTS = 8

    def __init__(self) -> None:
        self._next: Dict[str, int] = {}
        self._last: Dict[str, Handle] = {}
        self._lock = threading.Lock()

    def take(self, signature: str) -> str:
        with self._lock:
            n = self._next.get(signature, 0)
            self._next[signature] = n + 1
            name = f"{signature}/{n % self.SLOTS}"
            previous = self._last.pop(name, None)
        if previous is not None:
            try:
                previous.wait()
            except BaseException:  # noqa: BLE001 - reported by its own Work.
                pass
        return name

    def note(self, name: str, handle: Handle) -> None:
        with self._lock:
            self._last[name] = handle


def _work(handle: Handle, result: Callable[[], Any]) -> Any:
    """A c10d Work completed with `result()` when `handle` completes."""
    from torch._C._distributed_c10d import _create_work_from_future
    future: torch.futures.Future = torch.futures.Future()

    def done(h: Handle) -> None:
        try:
            h.wait()
            future.set_result(result())
        except BaseException as e:  # noqa: BLE001 - handed to the Work's waiter.
            future.set_exception(e)
    handle.add_done_callback(done)
    return _create_work_from_future(future)


def _completed_work(value: Any) -> Any:
    from torch._C._distributed_c10d import _create_work_from_future
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(value)
    return _create_work_from_future(future)


class ProcessGroupKVStore(torch.distributed.ProcessGroup):
    """The ``"kvstore"`` backend of ``torch.distributed``: allreduce (SUM, AVG), broadcast,
    allgather and barrier through the servers; every other collective raises naming itself.
    ``dist.init_process_group("kvstore")`` makes one (registered when kvstore.torch is
    imported); its rank and size must be the kvstore worker's (deploy/launch.py and torchrun
    set RANK and WORLD_SIZE to them)."""

    def __init__(self, rank: int, size: int, ctx: Optional[Context] = None) -> None:
        super().__init__(rank, size)
        self._kv = ctx if ctx is not None else init()
        if (rank, size) != (self._kv.rank, self._kv.size):
            raise FailedPreconditionError(
                f"init_process_group(\"kvstore\"): rank {rank} of {size} is not this kvstore "
                f"worker's rank {self._kv.rank} of {self._kv.size}: start the workers with "
                f"deploy/launch.py or torchrun, which set RANK and WORLD_SIZE to them")
        self._slots = _Slots()

    def getBackendName(self) -> str:  # noqa: N802 - c10d's name.
        return "kvstore"

    @staticmethod
    def _one(tensors: List[torch.Tensor], what: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise NotImplementedError(
                f"kvstore backend: {what} of {len(tensors)} tensors per process; one is supported")
        return tensors[0]

    def _push_pull(self, kind: str, tensor: torch.Tensor, op: str) -> Tuple[Handle, str]:
        name = self._slots.take(f"pg/{kind}/{str(tensor.dtype)[6:]}/{tensor.numel()}")
        handle = push_pull_async(tensor.reshape(-1), name, op=op, inplace=True, ctx=self._kv)
        self._slots.note(name, handle)
        return handle, name

    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        t = self._one(tensors, "allreduce")
        reduce_op = torch.distributed.ReduceOp.SUM if opts is None else opts.reduceOp
        if reduce_op == torch.distributed.ReduceOp.SUM:
            op = Sum
        elif reduce_op == getattr(torch.distributed.ReduceOp, "AVG", None):
            op = Average
        else:
            raise NotImplementedError(
                f"kvstore backend: allreduce with {reduce_op}; SUM and AVG are supported")
        buffer = t if t.is_contiguous() else t.contiguous()
        handle, _ = self._push_pull("allreduce", buffer, op)

        def result() -> List[torch.Tensor]:
            if buffer is not t:
                with torch.no_grad():
                    t.copy_(buffer)
            return tensors
        return _work(handle, result)

    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        t = self._one(tensors, "broadcast")
        root = 0 if opts is None else opts.rootRank
        value = t.detach()
        contribution = (value.contiguous().clone() if self._kv.rank == root
                        else torch.zeros(value.shape, dtype=value.dtype))
        handle, _ = self._push_pull("broadcast", contribution, Sum)

        def result() -> List[torch.Tensor]:
            with torch.no_grad():
                t.copy_(contribution)
            return tensors
        return _work(handle, result)

    def allgather(self, output_tensors: List[List[torch.Tensor]],
                  input_tensors: List[torch.Tensor], opts: Any = None) -> Any:
        t = self._one(input_tensors, "allgather")
        outs = self._one(output_tensors, "allgather")  # type: ignore[arg-type]
        n = self._kv.size
        if len(outs) != n:
            raise InvalidArgumentError(
                f"kvstore backend: allgather into {len(outs)} outputs for {n} processes")
        gathered = torch.zeros((n, t.numel()), dtype=t.dtype)
        gathered[self._kv.rank] = t.detach().reshape(-1)
        handle, _ = self._push_pull("allgather", gathered, Sum)

        def result() -> List[List[torch.Tensor]]:
            with torch.no_grad():
                for i, o in enumerate(outs):
                    o.copy_(gathered[i].view_as(o))
            return output_tensors
        return _work(handle, result)

    def barrier(self, opts: Any = None) -> Any:
        self._kv.store.barrier()
        return _completed_work(None)


def _unsupported(collective: str) -> Callable[..., Any]:
    def refuse(self: ProcessGroupKVStore, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"kvstore backend: {collective} is not supported (allreduce with SUM or AVG, "
            f"broadcast, allgather and barrier are)")
    refuse.__name__ = collective
    return refuse


for _collective in ("reduce", "gather", "scatter", "reduce_scatter", "_reduce_scatter_base",
                    "_allgather_base", "alltoall", "alltoall_base", "send", "recv",
                    "recv_anysource", "allgather_coalesced", "allreduce_coalesced",
                    "monitored_barrier"):
    setattr(ProcessGroupKVStore, _collective, _unsupported(_collective))


def _create_process_group(store: Any, rank: int, size: int, timeout: Any) -> ProcessGroupKVStore:
    del store, timeout  # The servers carry the data; the SDK has its own deadlines.
    return ProcessGroupKVStore(rank, size)


if "KVSTORE" not in getattr(torch.distributed.Backend, "_plugins", {}):
    torch.distributed.Backend.register_backend("kvstore", _create_process_group)


# DDP checks a hook's annotations as objects (this module's are strings).
push_pull_hook.__annotations__ = {"state": object,
                                  "bucket": torch.distributed.GradBucket,
                                  "return": torch.futures.Future[torch.Tensor]}


class _TableRows(torch.autograd.Function):
    """The rows of `unique` ids of a table, pulled in forward; their gradient pushed in
    backward (one push per forward, as a dist_sync round wants of every worker)."""

    @staticmethod
    def forward(ctx, anchor: torch.Tensor, store: KVStore, key: str,  # type: ignore[override]
                unique: torch.Tensor) -> torch.Tensor:
        ctx.table = (store, key, unique)
        return store.pull_rows(key, unique)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        store, key, unique = ctx.table
        store.push_rows(key, unique, grad.detach().to(torch.float32).cpu().contiguous())
        return None, None, None, None


class _TableModule(torch.nn.Module):
    def __init__(self, name: str, embedding_dim: int, ctx: Optional[Context],
                 table: Dict[str, Any]) -> None:
        super().__init__()
        self._ctx = _ctx(ctx)
        self.key = _KEY_PREFIX + "table/" + name
        self.embedding_dim = int(embedding_dim)
        table = dict(table)
        table.setdefault("rescale_grad", 1.0 / self._ctx.size)
        self._ctx.store.init_table(self.key, self.embedding_dim, **table)
        # Autograd calls a Function's backward only when an input requires grad.
        self._anchor = torch.zeros(0, requires_grad=True)

    def _rows(self, ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The rows of the unique ids of `ids` (on the ids' device) and each id's index
        among them."""
        if ids.dtype not in (torch.int64, torch.int32):
            raise InvalidArgumentError(
                f"kvstore.torch: table {self.key!r}: ids must be int64 or int32, not {ids.dtype}")
        unique, inverse = torch.unique(ids.reshape(-1).to(torch.int64).cpu(),
                                       return_inverse=True)
        rows = _TableRows.apply(self._anchor, self._ctx.store, self.key, unique)
        return rows.to(ids.device), inverse.to(ids.device).reshape(ids.shape)


class Embedding(_TableModule):
    """``torch.nn.Embedding`` over a table held by the servers (docs/tables.md): ids are any
    int64 (no vocabulary size), a row is created on an id's first use and may be evicted. The
    forward pulls the rows of the batch's unique ids; the backward pushes their gradients,
    which the servers' row optimizer applies (sum over the workers in dist_sync, scaled by
    ``rescale_grad``, by default ``1 / size()``: the average, as Horovod's).

    Args:
        name: the table's name, the same on every worker.
        embedding_dim: the row width.
        ctx: the :class:`Context` (default: :func:`init`'s).
        **table: :meth:`kvstore.KVStore.init_table`'s arguments (initializer, optimizer, lr,
            admit_after, evict_unseen_rounds, max_rows, ...).

    Every worker runs one forward and one backward per step (dist_sync waits for each
    worker's push); the backward blocks until the push is applied.
    """

    def __init__(self, name: str, embedding_dim: int, *, ctx: Optional[Context] = None,
                 **table: Any) -> None:
        super().__init__(name, embedding_dim, ctx, table)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows, inverse = self._rows(ids)
        return torch.nn.functional.embedding(inverse, rows)


class EmbeddingBag(_TableModule):
    """``torch.nn.EmbeddingBag`` over a table held by the servers: as :class:`Embedding`,
    with the rows of each bag reduced by `mode` (``"sum"``, ``"mean"`` or ``"max"``). The
    input is a 2-D tensor of ids (one bag per row), or 1-D ids with `offsets`."""

    def __init__(self, name: str, embedding_dim: int, *, mode: str = "mean",
                 ctx: Optional[Context] = None, **table: Any) -> None:
        super().__init__(name, embedding_dim, ctx, table)
        if mode not in ("sum", "mean", "max"):
            raise InvalidArgumentError(f"kvstore.torch: EmbeddingBag mode {mode!r} is not "
                                       f"sum, mean or max")
        self.mode = mode

    def forward(self, ids: torch.Tensor, offsets: Optional[torch.Tensor] = None,
                per_sample_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        rows, inverse = self._rows(ids)
        return torch.nn.functional.embedding_bag(inverse, rows, offsets, mode=self.mode,
                                                 per_sample_weights=per_sample_weights)
