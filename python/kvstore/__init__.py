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

import os
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _errors
from ._errors import (AlreadyExistsError, DeadlineExceededError, FailedPreconditionError,
                      InternalError, InvalidArgumentError, KVStoreError, NotFoundError,
                      OutOfRangeError, PermissionDeniedError, ResourceExhaustedError,
                      UnauthenticatedError, UnavailableError, UnimplementedError)
from . import _kvstore

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
    "KVStore", "create", "optimizer_names", "KVStoreError", "InvalidArgumentError",
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


def _row_id_list(row_ids: Any) -> List[int]:
    if hasattr(row_ids, "tolist"):
        row_ids = row_ids.tolist()
    if isinstance(row_ids, int):
        return [row_ids]
    return [int(i) for i in row_ids]


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

    def init(self, key: Keys, value: Values) -> None:
        """Initialises a key or a list of keys, once each, before any push or pull.

        Args:
            key: an int or str, or a list of them.
            value: an array for one key; a list of arrays, one per key, for a list.
        Every worker calls it; only rank 0's values are stored. Returns when the keys are
        initialised everywhere. Raises AlreadyExistsError (a KeyError) for a key initialised
        before, InvalidArgumentError (a ValueError) for an unsupported dtype.
        """
        keys, values = _pairs(key, value, "values")
        self._store.init(keys, values)

    def push(self, key: Keys, value: Values, priority: int = 0, *, block: bool = True) -> None:
        """Pushes values into keys; several values for one key are summed first.

        Args:
            key: an int or str, or a list of them.
            value: an array; a list of arrays (one per device, summed) for one key; for a list
                of keys, a list with an array or a list of arrays per key.
            priority: higher goes first among queued operations.
            block: True (the default) returns after the push has completed - in ``dist_sync``
                after the servers applied the round, which waits for every worker's push of
                the key - so the arrays may be changed at once. False returns once the push is
                queued: the arrays are read in place later, so leave them unchanged until
                :meth:`wait` on the keys (or :meth:`wait_all`) returns.
        The stored value is merged by the updater (assign by default, or the optimizer).
        Raises NotFoundError (a KeyError) for a key never initialised, InvalidArgumentError (a
        ValueError) naming the key and both shapes or dtypes when they differ from the stored
        value's. Releases the GIL while it waits; Ctrl-C raises KeyboardInterrupt.
        """
        keys, values = _pairs(key, value, "values")
        self._store.push(keys, values, priority, block)

    def pull(self, key: Keys, out: Values = None, priority: int = 0, *,
             block: bool = True) -> None:
        """Pulls the newest value of keys into `out`, in place.

        Args:
            key: an int or str, or a list of them.
            out: a writable C-contiguous array with the stored shape and dtype; a list of them
                (one per device) for one key; for a list of keys, a list with an output or a
                list of outputs per key.
            priority: higher goes first among queued operations.
            block: True (the default) returns once every output holds the value. False
                returns once the pull is queued; read the outputs after :meth:`wait`.
        A pull is ordered after this worker's earlier pushes of the key. Raises NotFoundError
        (a KeyError) for a key never initialised, InvalidArgumentError (a ValueError) for an
        output of another shape or dtype, or one that cannot be written in place (read-only,
        strided).
        """
        if out is None:
            raise TypeError("pull() needs out=: the arrays to write the values into")
        keys, outs = _pairs(key, out, "outputs")
        self._store.pull(keys, outs, priority, block)

    def pushpull(self, key: Keys, value: Values, out: Values = None, priority: int = 0, *,
                 block: bool = True) -> None:
        """Pushes `value` like :meth:`push`, then pulls the updated value into `out`.

        With `out` None the result is written into `value` itself (in place). `value` and
        `out` have the same structure. Errors, `priority` and `block` as for push and pull.
        """
        keys, values = _pairs(key, value, "values")
        if out is None:
            outs = values
        else:
            out_keys, outs = _pairs(key, out, "outputs")
            if out_keys != keys:
                raise InvalidArgumentError("pushpull: out must have the structure of value")
        self._store.pushpull(keys, values, outs, priority, block)

    def row_sparse_pull(self, key: Keys, out: Values = None, priority: int = 0,
                        row_ids: Any = None) -> None:
        """Pulls the rows `row_ids` of keys into dense outputs (MXNet's row_sparse_pull).

        Args:
            key: an int or str, or a list of them.
            out: a dense writable array of the stored shape (or a list, as for :meth:`pull`).
                The rows listed are written; every other row is set to zero.
            row_ids: the rows, a 1-D integer array or list (unsorted, repeated ids allowed);
                one for all outputs, or a list with one per output.
        Blocks until the rows are in place. Raises InvalidArgumentError (a ValueError) for an
        id outside ``[0, shape[0])`` and NotFoundError (a KeyError) for an unknown key.
        """
        if out is None or row_ids is None:
            raise TypeError("row_sparse_pull() needs out= and row_ids=")
        keys, outs = _pairs(key, out, "outputs")
        if isinstance(row_ids, (list, tuple)) and row_ids and not _is_scalar(row_ids[0]):
            ids = [_row_id_list(r) for r in row_ids]
            if len(ids) != len(outs):
                raise InvalidArgumentError(
                    f"row_sparse_pull: {len(outs)} outputs but {len(ids)} row_ids")
        else:
            ids = [_row_id_list(row_ids)] * len(outs)
        self._store.row_sparse_pull(keys, outs, ids, priority)

    def wait(self, key: Keys) -> None:
        """Blocks until every operation issued on `key` has completed (``block=False``).

        Raises the first error among them. Releases the GIL; Ctrl-C raises KeyboardInterrupt.
        """
        self._store.wait(_key_list(key))

    def wait_all(self) -> None:
        """Blocks until every operation issued has completed; raises the first error.

        Releases the GIL while it waits; Ctrl-C raises KeyboardInterrupt.
        """
        self._store.wait_all()

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
                "lamb", "lars", "test"), or a dict with "name" and hyper-parameters.
            **hyper: MXNet's hyper-parameters by name: learning_rate, wd, rescale_grad,
                clip_gradient, momentum, beta1, beta2, epsilon, rho, centered, clip_weights,
                schedule_decay, lamda1, beta, wd_lh, eta, lower_bound, upper_bound,
                bias_correction, multi_precision, and lr_scheduler (a dict with type
                "factor", "multifactor", "poly" or "cosine", step, steps, factor,
                stop_factor_lr, max_update, final_lr, pwr, warmup_steps, warmup_begin_lr,
                warmup_mode).
        Starts from fresh optimizer state. Returns once every server has it. Raises
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


def _is_scalar(x: Any) -> bool:
    return isinstance(x, int) or (hasattr(x, "ndim") and x.ndim == 0)


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
