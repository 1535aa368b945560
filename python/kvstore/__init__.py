"""kvstore: the KVStore parameter server from Python, with the API of MXNet's ``mx.kv``.

::

    import numpy as np
    import kvstore

    kv = kvstore.create("local")
    kv.init(3, np.ones((2, 3)) * 2)
    a = np.zeros((2, 3))
    kv.pull(3, out=a)          # a is now all 2
    kv.push(3, [np.ones((2, 3))] * 4)   # values of several devices are summed
    kv.pull(3, out=a)          # a is now all 4

Values are NumPy arrays, PyTorch tensors (CPU, or CUDA where the build has CUDA) or anything
with ``__dlpack__``; they are read and written in place through DLPack, never copied by the
package (a read-only or strided value to push is copied once into a contiguous array).

Keys are ints or strs (not both in one store), or lists of them. ``push`` and ``pull`` block
by default until the operation has completed, so an output holds the pulled value when
``pull`` returns and a pushed array may be changed as soon as ``push`` returns; pass
``block=False`` to overlap communication with computation and call :meth:`KVStore.wait` before
touching the arrays (docs/python.md). Blocking calls release the GIL, and Ctrl-C interrupts
them with ``KeyboardInterrupt``.

Distributed stores (``"dist_sync"``, ``"dist_async"``) join the job described by MXNet's
``DMLC_*`` environment variables, as set by ``deploy/launch.py``.
"""
from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _errors
from ._errors import (AlreadyExistsError, DeadlineExceededError, FailedPreconditionError,
                      InternalError, InvalidArgumentError, KVStoreError, NotFoundError,
                      OutOfRangeError, PermissionDeniedError, ResourceExhaustedError,
                      UnauthenticatedError, UnavailableError, UnimplementedError)
from . import _kvstore
from . import _dtypes
from ._row_sparse import RowSparseArray, as_row_sparse, is_row_sparse, row_ids_per_output

_kvstore._set_error_classes(dict(_errors._CODES))


def _cuda_ready(array: Any) -> None:
    """Waits until the work the producer queued on a CUDA array is done: the SDK reads and
    writes CUDA memory on its own streams, which DLPack's stream argument cannot name."""
    library = type(array).__module__.split(".")[0]
    if library == "torch":
        import torch
        torch.cuda.current_stream(array.device).synchronize()
    elif library == "cupy":
        import cupy
        cupy.cuda.get_current_stream().synchronize()
    elif hasattr(array, "block_until_ready"):  # JAX
        array.block_until_ready()


_kvstore._set_cuda_ready_hook(_cuda_ready)

__version__ = "0.1.0"

__all__ = [
    "KVStore", "create", "optimizer_names", "RowSparseArray", "KVStoreError",
    "InvalidArgumentError",
    "NotFoundError", "AlreadyExistsError", "FailedPreconditionError", "OutOfRangeError",
    "UnavailableError", "DeadlineExceededError", "PermissionDeniedError",
    "UnauthenticatedError", "ResourceExhaustedError", "UnimplementedError", "InternalError",
    "SCHEDULER", "SERVERS", "WORKERS", "SERVERS_AND_WORKERS", "ALL_NODES",
]

#: Node groups for :meth:`KVStore.num_dead_node` (ps-lite's numbering).
SCHEDULER = 1
SERVERS = 2
WORKERS = 4
SERVERS_AND_WORKERS = 6
ALL_NODES = 7

Key = Union[int, str]
#: A NumPy array, a PyTorch tensor, or any object with ``__dlpack__``.
Array = Any
Keys = Union[Key, Sequence[Key]]
#: One array; a list of arrays (one per device, or one per key); or a list of such lists.
Values = Union[Array, Sequence[Any]]

_OPTIMIZER_PARAMS = frozenset([
    "learning_rate", "wd", "rescale_grad", "clip_gradient", "momentum", "beta1", "beta2",
    "epsilon", "rho", "centered", "clip_weights", "schedule_decay", "lamda1", "beta", "wd_lh",
    "eta", "lower_bound", "upper_bound", "bias_correction", "multi_precision", "lr_scheduler",
    "nesterov", "lr_mult", "wd_mult", "key_prefix", "keep_state",
])
_SCHEDULE_PARAMS = frozenset([
    "type", "step", "steps", "factor", "stop_factor_lr", "max_update", "final_lr", "pwr",
    "warmup_steps", "warmup_begin_lr", "warmup_mode",
])


def optimizer_names() -> List[str]:
    """Returns the names :meth:`KVStore.set_optimizer` accepts (common/optimizer_config.h)."""
    return list(_kvstore.optimizer_names())


def _is_key(key: Any) -> bool:
    return isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool))


def _check_key(key: Any) -> Key:
    if not _is_key(key):
        raise InvalidArgumentError(
            f"a key is an int or a str, not {type(key).__name__} ({key!r})")
    return key


def _pairs(keys: Keys, values: Values, what: str) -> Tuple[List[Key], List[Array]]:
    """Flattens MXNet's call forms into one (key, value) pair per key and device."""
    if isinstance(keys, (list, tuple)):
        if not isinstance(values, (list, tuple)) or len(values) != len(keys):
            count = len(values) if isinstance(values, (list, tuple)) else "one"
            raise InvalidArgumentError(
                f"{len(keys)} keys need a list of {len(keys)} {what}, got {count}")
        flat_keys: List[Key] = []
        flat_values: List[Array] = []
        for key, value in zip(keys, values):
            k, v = _pairs(_check_key(key), value, what)
            flat_keys += k
            flat_values += v
        return flat_keys, flat_values
    key = _check_key(keys)
    if isinstance(values, (list, tuple)):
        if not values:
            raise InvalidArgumentError(f"key {key!r}: an empty list of {what}")
        return [key] * len(values), list(values)
    return [key], [values]


def _key_list(keys: Keys) -> List[Key]:
    if isinstance(keys, (list, tuple)):
        return [_check_key(k) for k in keys]
    return [_check_key(keys)]


class KVStore:
    """A key-value store shared by devices and workers, as MXNet's ``mx.kv.KVStore``.

    Make one with :func:`create`. Every method raises a :class:`KVStoreError` subclass with
    the SDK's message on failure: ``KeyError`` (:class:`NotFoundError`) for a key never
    initialised, ``ValueError`` (:class:`InvalidArgumentError`) for a bad shape, dtype, key or
    argument, ``RuntimeError`` (:class:`FailedPreconditionError`) for a call the store type
    does not allow, ``ConnectionError`` / ``TimeoutError`` for an unreachable or slow peer.
    A store may be used from several threads.
    """

    def __init__(self, name: str = "local") -> None:
        """Creates a store of type `name`; prefer :func:`create`."""
        self._store = _kvstore._Store(name)
        self._updater: Optional[Callable[[Key, Array, Array], None]] = None
        # Each key's stored (dtype name, shape), read from the SDK once per key.
        self._specs: Dict[Key, Tuple[str, Tuple[int, ...]]] = {}
        # Outputs of another dtype than their key's: (temporary in the key's dtype, output),
        # converted into the output once the pull has completed.
        self._casts: Dict[Key, List[Tuple[Array, Array]]] = {}
        self._casts_lock = threading.Lock()
        # Each table's row width (init_table).
        self._table_dims: Dict[Key, int] = {}
        _LIVE.add(self)

    def close(self) -> None:
        """Ends the store now: a distributed worker waits for its operations and leaves the job
        as at the end of the program. Later calls raise FailedPreconditionError. Stores still
        open when the interpreter exits are closed then (before Python's own shutdown, while
        the threads a store's end waits for can still run)."""
        self._store.close()
        _LIVE.discard(self)

    def __repr__(self) -> str:
        return (f"<kvstore.KVStore type={self.type!r} rank={self.rank} "
                f"num_workers={self.num_workers}>")

    @property
    def type(self) -> str:
        """The type the store was created with, e.g. ``"local"`` or ``"dist_sync"``."""
        return self._store.type

    @property
    def rank(self) -> int:
        """This worker's rank in ``[0, num_workers)``; 0 for in-process stores."""
        return self._store.rank

    @property
    def num_workers(self) -> int:
        """The number of workers in the job; 1 for in-process stores."""
        return self._store.num_workers

    def _spec(self, key: Key) -> Optional[Tuple[str, Tuple[int, ...]]]:
        """The stored (dtype name, shape) of `key`; None before it is initialised."""
        spec = self._specs.get(key)
        if spec is None:
            try:
                dtype, shape = self._store.spec(key)
            except (NotFoundError, InvalidArgumentError):
                return None
            spec = self._specs[key] = (dtype, tuple(shape))
        return spec

    def _stored_dtype(self, key: Key) -> Optional[str]:
        spec = self._spec(key)
        return None if spec is None else spec[0]

    def _sendable(self, key: Key, value: Array) -> Array:
        """`value`, converted to the key's dtype when it is another float dtype."""
        have = _dtypes.dtype_name(value)
        if have not in _dtypes.FLOATS:
            return value
        want = self._stored_dtype(key)
        if want != have and want in _dtypes.FLOATS:
            return _dtypes.converted(value, want)
        return value

    def _split_values(self, op: str, keys: List[Key], values: List[Array]):
        """Dense (key, value) pairs and row-sparse ones, each value in its key's dtype."""
        sendable = self._sendable
        flags = [is_row_sparse(v) for v in values]
        if not any(flags):  # The common case: dense values only.
            return keys, [sendable(k, v) for k, v in zip(keys, values)], [], []
        dense_keys: List[Key] = []
        dense: List[Array] = []
        sparse_keys: List[Key] = []
        sparse: List[Tuple[Array, List[int], List[int]]] = []
        kinds: Dict[Key, bool] = {}
        for key, value, is_sparse in zip(keys, values, flags):
            if kinds.setdefault(key, is_sparse) != is_sparse:
                raise InvalidArgumentError(
                    f"{op}: key {key!r}: its values mix dense and row-sparse arrays; give one "
                    f"kind per key")
            if not is_sparse:
                dense_keys.append(key)
                dense.append(sendable(key, value))
            else:
                rsp = as_row_sparse(value)
                sparse_keys.append(key)
                sparse.append((sendable(key, rsp.data), rsp.indices.tolist(), list(rsp.shape)))
        return dense_keys, dense, sparse_keys, sparse

    def _writable(self, op: str, keys: List[Key], outs: List[Array]):
        """The arrays the store writes for `outs` - each output itself, or a temporary in the
        key's dtype for an output of another float dtype - and those conversions as
        (key, temporary, output), for _pull_into."""
        casts: List[Tuple[Key, Array, Array]] = []
        replaced: Dict[int, Array] = {}
        floats, dtype_name, stored_dtype = _dtypes.FLOATS, _dtypes.dtype_name, self._stored_dtype
        for i, (key, out) in enumerate(zip(keys, outs)):
            if is_row_sparse(out):
                raise InvalidArgumentError(
                    f"{op}: key {key!r}: the output is row-sparse, which {op} does not fill; "
                    f"use row_sparse_pull(key, out=..., row_ids=...) to pull its rows")
            have = dtype_name(out)
            if have in floats:
                want = stored_dtype(key)
                if want != have and want in floats:
                    replaced[i] = _dtypes.empty_like(out, want)
                    casts.append((key, replaced[i], out))
        if not casts:
            return outs, casts
        return [replaced.get(i, out) for i, out in enumerate(outs)], casts

    def _pull_into(self, keys: List[Key], casts: List[Tuple[Key, Array, Array]], block: bool,
                   call: Callable[[], None]) -> None:
        """Runs `call`, a pull of `keys` into temporaries for `casts`: converts them into their
        outputs once the pull has completed (now when `block`, else at wait). On an error
        nothing is converted."""
        if not casts and not self._casts:  # Nothing to convert, now or pending.
            call()
            return
        if casts:
            with self._casts_lock:
                for key, temporary, out in casts:
                    self._casts.setdefault(key, []).append((temporary, out))
        try:
            call()
        except BaseException:
            if casts:
                mine = {id(t) for _, t, _ in casts}
                with self._casts_lock:
                    for key in {k for k, _, _ in casts}:
                        left = [p for p in self._casts.get(key, []) if id(p[0]) not in mine]
                        if left:
                            self._casts[key] = left
                        else:
                            self._casts.pop(key, None)
            raise
        if block:
            self._finish(keys)

    def _finish(self, keys: Optional[List[Key]], failed: bool = False) -> None:
        """Converts the completed pulls of `keys` (None: every key) into their outputs of
        another dtype; drops them when the operations `failed`."""
        if not self._casts:
            return
        with self._casts_lock:
            if keys is None:
                done = list(self._casts.values())
                self._casts.clear()
            else:
                done = [self._casts.pop(k) for k in set(keys) if k in self._casts]
        if failed:
            return
        for pairs in done:
            for temporary, out in pairs:
                _dtypes.cast_into(out, temporary)

    def init(self, key: Keys, value: Values) -> None:
        """Initialises a key or a list of keys, once each, before any push or pull.

        Args:
            key: an int or str, or a list of them.
            value: an array (or a :class:`RowSparseArray`, a torch sparse COO tensor, a SciPy
                sparse matrix) for one key; a list of them, one per key, for a list.
        Every worker calls it; only rank 0's values are stored. Returns when the keys are
        initialised everywhere. Raises AlreadyExistsError (a KeyError) for a key initialised
        before, InvalidArgumentError (a ValueError) for an unsupported dtype.
        """
        keys, values = _pairs(key, value, "values")
        dense_keys: List[Key] = []
        dense: List[Array] = []
        for k, v in zip(keys, values):
            rsp = as_row_sparse(v) if is_row_sparse(v) else None
            if rsp is None:
                dense_keys.append(k)
                dense.append(v)
            else:
                self._store.init_row_sparse(k, rsp.data, rsp.indices.tolist(), list(rsp.shape))
        if dense_keys:
            self._store.init(dense_keys, dense)

    def push(self, key: Keys, value: Values, priority: int = 0, *, block: bool = True) -> None:
        """Pushes values into keys; several values for one key are summed first.

        Args:
            key: an int or str, or a list of them.
            value: an array; a list of arrays (one per device, summed) for one key; for a list
                of keys, a list with an array or a list of arrays per key. A
                :class:`RowSparseArray` (or torch sparse COO tensor, SciPy sparse matrix)
                pushes only its rows. A value of another float dtype than the key's is
                converted to it (a copy), as MXNet does.
            priority: higher goes first among queued operations.
            block: True (the default) returns after the push has completed - in ``dist_sync``
                after the servers applied the round, which waits for every worker's push of
                the key - so the arrays may be changed at once. False returns once the push is
                queued: the arrays are read in place later, so leave them unchanged until
                :meth:`wait` on the keys (or :meth:`wait_all`) returns.
        The stored value is merged by the updater (assign by default, or the optimizer).
        Raises NotFoundError (a KeyError) for a key never initialised, InvalidArgumentError (a
        ValueError) naming the key and both shapes or dtypes when they differ from the stored
        value's (other than float dtypes, which are converted). Releases the GIL while it
        waits; Ctrl-C raises KeyboardInterrupt.
        """
        keys, values = _pairs(key, value, "values")
        dense_keys, dense, sparse_keys, sparse = self._split_values("push", keys, values)
        if dense_keys:
            self._store.push(dense_keys, dense, priority, block)
        if sparse_keys:
            self._store.push_row_sparse(sparse_keys, sparse, priority, block)

    def pull(self, key: Keys, out: Values = None, priority: int = 0, *,
             block: bool = True) -> None:
        """Pulls the newest value of keys into `out`, in place.

        Args:
            key: an int or str, or a list of them.
            out: a writable C-contiguous array with the stored shape; a list of them (one per
                device) for one key; for a list of keys, a list with an output or a list of
                outputs per key. An output of another float dtype than the key's receives the
                value converted (MXNet's multi-precision outputs).
            priority: higher goes first among queued operations.
            block: True (the default) returns once every output holds the value. False
                returns once the pull is queued; read the outputs after :meth:`wait`.
        A pull is ordered after this worker's earlier pushes of the key. Raises NotFoundError
        (a KeyError) for a key never initialised, InvalidArgumentError (a ValueError) for an
        output of another shape, a row-sparse output ("use row_sparse_pull"), or one that
        cannot be written in place (read-only, strided).
        """
        if out is None:
            raise TypeError("pull() needs out=: the arrays to write the values into")
        keys, outs = _pairs(key, out, "outputs")
        targets, casts = self._writable("pull", keys, outs)
        self._pull_into(keys, casts, block,
                        lambda: self._store.pull(keys, targets, priority, block))

    def pushpull(self, key: Keys, value: Values, out: Values = None, priority: int = 0, *,
                 block: bool = True) -> None:
        """Pushes `value` like :meth:`push`, then pulls the updated value into `out`.

        With `out` None the result is written into `value` itself (in place). Otherwise `out`
        has an output or a list of outputs per key, as for :meth:`pull`, whatever number of
        values was pushed (MXNet 1.6's forms). Errors, `priority` and `block` as for push and
        pull.
        """
        keys, values = _pairs(key, value, "values")
        if out is None:
            out_keys, outs = keys, values
        else:
            out_keys, outs = _pairs(key, out, "outputs")
        targets, casts = self._writable("pushpull", out_keys, outs)
        if out_keys != keys or any(is_row_sparse(v) for v in values):
            # Several outputs per key, or rows pushed: a push and then a pull, which the store
            # orders after it.
            self.push(key, value, priority, block=block)
            self._pull_into(out_keys, casts, block,
                            lambda: self._store.pull(out_keys, targets, priority, block))
            return
        sendable = [self._sendable(k, v) for k, v in zip(keys, values)]
        self._pull_into(keys, casts, block, lambda: self._store.pushpull(
            keys, sendable, targets, priority, block))

    def broadcast(self, key: Keys, value: Values, out: Values = None, priority: int = 0) -> None:
        """Initialises keys from `value` and pulls them into every output (MXNet 1.6's
        ``broadcast``): in a distributed store every worker calls it and rank 0's values are
        stored, so every worker's outputs receive rank 0's values.

        Args:
            key: an int or str, or a list of them.
            value: one array per key (a list of them for a list of keys).
            out: an output or a list of outputs (one per device) per key, as for :meth:`pull`;
                None writes into `value` itself (MXNet 2's form).
        As MXNet's, it initialises the keys, so a key is broadcast once: AlreadyExistsError
        (a KeyError) for a key initialised before. Blocks until the outputs hold the values.
        """
        keys, _ = _pairs(key, value, "values")
        if len(set(keys)) != len(keys):
            repeated = next(k for k in keys if keys.count(k) > 1)
            raise InvalidArgumentError(
                f"broadcast: key {repeated!r}: one value per key (its outputs may be several)")
        self.init(key, value)
        self.pull(key, value if out is None else out, priority)

    def row_sparse_pull(self, key: Keys, out: Values = None, priority: int = 0,
                        row_ids: Any = None) -> None:
        """Pulls the rows `row_ids` of keys into row-sparse outputs (MXNet's row_sparse_pull).

        Args:
            key: an int or str, or a list of them.
            out: a :class:`RowSparseArray` of the stored shape (``RowSparseArray.zeros(shape)``)
                or a list of them, as for :meth:`pull`. Each receives the rows listed, sorted
                without repeats (``out.indices``), and their values (``out.data``), in its own
                dtype (converted from the key's float dtype).
            row_ids: the rows, in any of MXNet's forms: an integer array of any shape
                (flattened) or a list of ints, for every output; for one key, a list with one
                id array per output; for a list of keys, a list with an id array or a list of
                them per key. Ids may be unsorted and repeated. With one id array for several
                outputs the rows are pulled once and copied to the others.
        Blocks until the rows are in place. Raises InvalidArgumentError (a ValueError) for a
        dense output ("use pull"), a row-id form it cannot read, an id outside
        ``[0, shape[0])``, an output of another shape; NotFoundError (a KeyError) for an
        unknown key. Nothing is written then.
        """
        if out is None or row_ids is None:
            raise TypeError("row_sparse_pull() needs out= and row_ids=")
        ids = row_ids_per_output(key, out, row_ids)
        keys, outs = _pairs(key, out, "outputs")
        for k, o in zip(keys, outs):
            if not isinstance(o, RowSparseArray):
                raise InvalidArgumentError(
                    f"row_sparse_pull: key {k!r}: the output is a dense {type(o).__name__}; "
                    f"row_sparse_pull fills kvstore.RowSparseArray outputs "
                    f"(RowSparseArray.zeros(shape)): use pull for a dense output")
            spec = self._spec(k)
            if spec is not None and tuple(o.shape) != spec[1]:
                raise InvalidArgumentError(
                    f"row_sparse_pull: key {k!r}: the output's shape {tuple(o.shape)} is not "
                    f"the stored shape {spec[1]}")
        # One pull per (key, id set); outputs sharing both get copies of its rows.
        first: Dict[Tuple[Key, int], int] = {}
        pull_keys: List[Key] = []
        pull_ids: List[List[int]] = []
        source: List[int] = []
        for k, i in zip(keys, ids):
            slot = first.setdefault((k, id(i)), len(pull_keys))
            if slot == len(pull_keys):
                pull_keys.append(k)
                pull_ids.append(i.tolist())
            source.append(slot)
        rows = self._store.row_sparse_pull(pull_keys, pull_ids, priority)
        used = set()
        for o, slot in zip(outs, source):
            indices, data = rows[slot]
            if slot in used:
                indices, data = indices.copy(), (data.clone() if hasattr(data, "clone")
                                                 else data.copy())
            used.add(slot)
            o._assign(indices, data)

    def init_table(self, key: Key, dim: int, *, initializer: str = "zeros",
                   init_range: Tuple[float, float] = (-0.05, 0.05), mean: float = 0.0,
                   std: float = 0.01, seed: int = 0, optimizer: str = "sgd", lr: float = 0.01,
                   wd: float = 0.0, rescale_grad: float = 1.0, clip_gradient: float = -1.0,
                   beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8,
                   admit_after: int = 1, evict_unseen_rounds: int = 0,
                   evict_unseen_seconds: float = 0.0, max_rows: int = 0, max_bytes: int = 0,
                   evict_over_budget: bool = True) -> None:
        """Makes `key` a table (docs/tables.md): float32 rows of width `dim` keyed by any int64
        id, created on first use. Every worker calls it with the same arguments; it returns
        once the table exists on every server.

        Args:
            initializer: what a row not stored reads as: ``"zeros"``, ``"uniform"``
                (`init_range`) or ``"normal"`` (`mean`, `std`), drawn from `seed` and the id
                alone, so every run and every replica makes the same row.
            optimizer: the row optimizer, whose state lives with the row: ``"sgd"``,
                ``"adagrad"`` or ``"adam"``, with `lr`, `wd`, `rescale_grad`, `clip_gradient`
                (negative: none), `beta1`, `beta2`, `epsilon`. Only the rows pushed move.
            admit_after: an id gets a row once pushed this many times (once per round);
                until then pulls read the initializer's row and pushes only count.
            evict_unseen_rounds: a row not pushed for this many rounds is removed (0: never).
            evict_unseen_seconds: a row not pushed for this long is removed (0: never).
            max_rows: the most rows a server keeps of the table (0: no limit); beyond it the
                least recently used are evicted, or, with `evict_over_budget` False, the push
                is refused with ResourceExhaustedError.
            max_bytes: the most bytes a server's rows of the table may take (0: no limit),
                applied as max_rows is.
        Raises AlreadyExistsError for a key already a table or a value, InvalidArgumentError
        naming a bad argument.
        """
        k = _check_key(key)
        if initializer == "uniform":
            a, b = init_range
        elif initializer == "normal":
            a, b = mean, std
        else:
            a, b = 0.0, 0.0
        self._store.init_table(k, dict(
            dim=int(dim), initializer=initializer, init_a=float(a), init_b=float(b),
            seed=int(seed), optimizer=optimizer, lr=float(lr), wd=float(wd),
            rescale_grad=float(rescale_grad), clip_gradient=float(clip_gradient),
            beta1=float(beta1), beta2=float(beta2), epsilon=float(epsilon),
            admit_after=int(admit_after), evict_unseen_rounds=int(evict_unseen_rounds),
            evict_unseen_seconds=float(evict_unseen_seconds), max_rows=int(max_rows),
            max_bytes=int(max_bytes), evict_over_budget=bool(evict_over_budget)))
        self._table_dims[k] = int(dim)

    def _table_ids(self, op: str, key: Key, ids: Any) -> Any:
        """`ids` as a flat int64 array (a tensor for a tensor); InvalidArgumentError naming the
        key for ids that are not integers (floats are never truncated into ids)."""
        if key not in self._table_dims:
            raise NotFoundError(f"{op}: key {key!r} is no table (init_table makes one)")
        if hasattr(ids, "detach"):  # A PyTorch tensor.
            import torch
            if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
                raise InvalidArgumentError(
                    f"{op}: key {key!r}: ids must be integers (int64), not {ids.dtype}")
            return ids.detach().reshape(-1).to(torch.int64).cpu().contiguous()
        import numpy as np
        array = np.asarray(ids)
        if array.size and array.dtype.kind not in "iu":
            raise InvalidArgumentError(
                f"{op}: key {key!r}: ids must be integers (int64), not {array.dtype}")
        if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
            raise InvalidArgumentError(f"{op}: key {key!r}: ids must fit int64")
        return array.astype(np.int64, copy=False).reshape(-1)

    def pull_rows(self, key: Key, ids: Any, out: Any = None) -> Any:
        """Returns the rows of `ids` of table `key` as an ``(len(ids), dim)`` float32 array.

        `ids` may be in any order and repeat, as an int array of any shape (flattened), a
        PyTorch tensor or a list. Rows not stored read as the initializer's. `out`, when given,
        is a float32 CPU array of that shape written in place; otherwise a NumPy array (a
        PyTorch tensor for tensor ids) is made. Blocks until the rows are there.
        """
        k = _check_key(key)
        flat = self._table_ids("pull_rows", k, ids)
        if out is None:
            shape = (int(flat.shape[0]), self._table_dims[k])
            if hasattr(flat, "detach"):
                import torch
                out = torch.empty(shape, dtype=torch.float32)
            else:
                import numpy as np
                out = np.empty(shape, dtype=np.float32)
        self._store.pull_rows(k, flat, out)
        return out

    def push_rows(self, key: Key, ids: Any, grads: Any) -> None:
        """Pushes `grads`, the gradients of the rows of `ids` (``(len(ids), dim)`` float32), into
        table `key`; duplicate ids are summed. In dist_sync every worker pushes once per round
        (an empty push when it has no ids) and the servers apply the round's sum with the row
        optimizer; dist_async and in-process stores apply each push. Blocks until applied.
        """
        k = _check_key(key)
        flat = self._table_ids("push_rows", k, ids)
        if hasattr(grads, "detach"):
            grads = grads.detach().to("cpu").contiguous()
        self._store.push_rows(k, flat, grads)

    def wait(self, key: Keys) -> None:
        """Blocks until every operation issued on `key` has completed (``block=False``).

        Raises the first error among them. Releases the GIL; Ctrl-C raises KeyboardInterrupt.
        """
        keys = _key_list(key)
        try:
            self._store.wait(keys)
        except BaseException:
            self._finish(keys, failed=True)
            raise
        self._finish(keys)

    def wait_all(self) -> None:
        """Blocks until every operation issued has completed; raises the first error.

        Releases the GIL while it waits; Ctrl-C raises KeyboardInterrupt.
        """
        try:
            self._store.wait_all()
        except BaseException:
            self._finish(None, failed=True)
            raise
        self._finish(None)

    def barrier(self) -> None:
        """Blocks until every worker of the job has called it (MXNet's ``_barrier``).

        Returns at once for in-process stores. It does not wait for this worker's pending
        operations. Releases the GIL; Ctrl-C raises KeyboardInterrupt.
        """
        self._store.barrier()

    _barrier = barrier

    def set_updater(self, updater: Callable[[Key, Array, Array], None]) -> None:
        """Sets ``updater(key, input, stored)``, which merges each push into the stored value.

        `input` and `stored` are NumPy arrays (PyTorch tensors for bfloat16 or CUDA values)
        over the store's buffers: the updater changes `stored` in place, e.g.
        ``stored += input * 2``. It runs on the pushing thread, once per key per push, and
        must not call the store. An exception it raises is raised by that push. In-process
        stores only (FailedPreconditionError for distributed stores, whose servers run
        :meth:`set_optimizer`).
        """
        self._store.set_updater(updater)
        self._updater = updater

    _set_updater = set_updater

    def set_optimizer(self, optimizer: Union[str, Mapping[str, Any]], **hyper: Any) -> None:
        """Makes the updater run an optimizer: locally, or on every server of the job.

        Args:
            optimizer: a name from :func:`optimizer_names` ("sgd", "nag", "adam", "adamw",
                "adagrad", "rmsprop", "adadelta", "adamax", "nadam", "ftrl", "signum",
                "lamb", "lars", "test", and PyTorch's forms "torch_sgd", "torch_adam",
                "torch_adamw"), or a dict with "name" and hyper-parameters.
            **hyper: MXNet's hyper-parameters by name: learning_rate, wd, rescale_grad,
                clip_gradient, momentum, beta1, beta2, epsilon, rho, centered, clip_weights,
                schedule_decay, lamda1, beta, wd_lh, eta, lower_bound, upper_bound,
                bias_correction, nesterov (torch_sgd), multi_precision, and lr_scheduler (a
                dict with type "factor", "multifactor", "poly" or "cosine", step, steps,
                factor, stop_factor_lr, max_update, final_lr, pwr, warmup_steps,
                warmup_begin_lr, warmup_mode). Besides: lr_mult and wd_mult (dicts from a
                key's text to a multiplier of its learning rate and wd, MXNet's
                set_lr_mult/set_wd_mult), key_prefix (the optimizer updates only the str keys
                beginning with it; other keys store what they receive), keep_state (carry the
                running optimizer's state over: a learning-rate change mid-training).
        Starts from fresh optimizer state unless keep_state. Returns once every server has it. Raises
        InvalidArgumentError (a ValueError) for an unknown name, a hyper-parameter the
        optimizer does not take or a value out of range; nothing changes then.
        """
        if isinstance(optimizer, Mapping):
            params = dict(optimizer)
            name = params.pop("name", None)
            if name is None:
                raise InvalidArgumentError("set_optimizer: the dict needs a \"name\"")
            params.update(hyper)
        else:
            name, params = optimizer, dict(hyper)
        if not isinstance(name, str):
            raise InvalidArgumentError(
                f"set_optimizer: the optimizer is a name (str) or a dict, not {type(name).__name__}")
        unknown = sorted(set(params) - _OPTIMIZER_PARAMS)
        if unknown:
            raise InvalidArgumentError(
                f"set_optimizer: unknown hyper-parameter(s) {', '.join(unknown)} for {name}; "
                f"known: {', '.join(sorted(_OPTIMIZER_PARAMS))}")
        schedule = params.get("lr_scheduler")
        if schedule is not None:
            if not isinstance(schedule, Mapping):
                raise InvalidArgumentError("set_optimizer: lr_scheduler is a dict")
            unknown = sorted(set(schedule) - _SCHEDULE_PARAMS)
            if unknown:
                raise InvalidArgumentError(
                    f"set_optimizer: unknown lr_scheduler field(s) {', '.join(unknown)}")
            params["lr_scheduler"] = dict(schedule)
        self._store.set_optimizer(name, params)

    def set_gradient_compression(self, compression_params: Mapping[str, Any]) -> None:
        """Turns on gradient compression for later pushes, e.g. ``{"type": "2bit", "threshold":
        0.5}`` (MXNet's 2-bit quantisation with error feedback; "1bit" too; "none" turns it
        off). The threshold defaults to 0.5. Raises InvalidArgumentError (a ValueError) for
        an unknown type, an unknown field or a bad threshold.
        """
        params = dict(compression_params)
        kind = params.pop("type", None)
        if not isinstance(kind, str):
            raise InvalidArgumentError(
                "set_gradient_compression: \"type\" (\"2bit\", \"1bit\" or \"none\") is required")
        threshold = params.pop("threshold", None)
        if params:
            raise InvalidArgumentError(
                f"set_gradient_compression: unknown field(s) {', '.join(sorted(params))}")
        self._store.set_gradient_compression(
            kind, None if threshold is None else float(threshold))

    def save_optimizer_states(self, fname: Union[str, os.PathLike],
                              dump_optimizer: bool = False) -> None:
        """Writes the optimizer's state (moments, update counts, master weights) to `fname`.

        Works in distributed mode too: the state is gathered from every server, between
        dist_sync rounds. `dump_optimizer` is accepted for MXNet's signature; the file always
        names the optimizer it belongs to. Errors name the file.
        """
        del dump_optimizer
        self._store.save_optimizer_states(os.fspath(fname))

    def load_optimizer_states(self, fname: Union[str, os.PathLike]) -> None:
        """Reads a file written by :meth:`save_optimizer_states` into the current optimizer
        (call :meth:`set_optimizer` with the same optimizer first). Errors name the file and
        what is wrong; nothing changes then.
        """
        self._store.load_optimizer_states(os.fspath(fname))

    def checkpoint(self, dirname: str) -> None:
        """Makes every server write its shard below its ``--checkpoint_root``/`dirname`
        (``kvserver --restore`` resumes from it). Distributed stores only: in-process stores
        raise FailedPreconditionError (a RuntimeError). Call it between rounds.
        """
        self._store.checkpoint(os.fspath(dirname))

    def send_command_to_servers(self, head: int, body: str) -> None:
        """Runs controller command (head, body) on every server; returns after all ran it.

        Head 0 with a body such as ``"sgd lr=0.1 momentum=0.9"`` selects the servers' updater.
        In-process stores have no servers: it does nothing, as MXNet's.
        """
        self._store.send_command_to_servers(int(head), str(body))

    _send_command_to_servers = send_command_to_servers

    def num_dead_node(self, group: int = ALL_NODES, timeout: float = 60) -> int:
        """Returns how many nodes of `group` sent no heartbeat within `timeout` seconds.

        `group` is :data:`SCHEDULER`, :data:`SERVERS`, :data:`WORKERS`,
        :data:`SERVERS_AND_WORKERS` or :data:`ALL_NODES`. 0 for in-process stores.
        """
        return self._store.num_dead_node(int(group), float(timeout))

    _get_num_dead_node = num_dead_node


#: Every store not yet closed, closed at exit (newest first).
_LIVE: "weakref.WeakSet[KVStore]" = weakref.WeakSet()


@atexit.register
def _close_live_stores() -> None:
    for store in list(_LIVE):
        try:
            store.close()
        except KVStoreError:
            pass


def create(name: str = "local") -> KVStore:
    """Creates a KVStore (MXNet's ``mx.kv.create``).

    Args:
        name: "local" or "device" (in this process; MXNet's "local_update_cpu",
            "local_allreduce_cpu", "local_allreduce_device" too), or "dist_sync",
            "dist_async", "dist_sync_device", which join the job of the launch environment
            (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_WORKER_ID, KV_SECRET_FILE, ...) and
            block until every node has registered.
    Raises InvalidArgumentError (a ValueError) naming the supported types for any other name.
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"create: the type is a str, not {type(name).__name__}")
    return KVStore(name)
