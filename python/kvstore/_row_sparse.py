"""Row-sparse values (MXNet's ``RowSparseNDArray``) and the row-id forms ``row_sparse_pull``
takes.

A :class:`RowSparseArray` is a value of a full `shape` whose rows are zero except the rows
`indices`, held in `data` (shape ``(len(indices),) + shape[1:]``). ``init``, ``push`` and
``row_sparse_pull`` take it; a push carries only its rows.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

try:
    import numpy as np
except ImportError:  # The package imports without NumPy; NumPy values and row ids need it.
    np = None

from ._dtypes import converted, dtype_name, library
from ._errors import InvalidArgumentError

__all__ = ["RowSparseArray"]


def _zeros(shape: Tuple[int, ...], dtype: str, like: Any = None) -> Any:
    """Zeros of `dtype` in `like`'s library (NumPy by default; PyTorch for bfloat16)."""
    if (like is not None and library(like) == "torch") or dtype == "bfloat16":
        import torch
        return torch.zeros(shape, dtype=getattr(torch, dtype))
    return np.zeros(shape, dtype=dtype)


class RowSparseArray:
    """A value whose rows are zero except the listed ones, as MXNet's ``RowSparseNDArray``.

    Args:
        data: the listed rows, an array (NumPy, PyTorch on the CPU) of shape
            ``(len(indices),) + shape[1:]``.
        indices: the row ids, integers in ``[0, shape[0])``; unsorted and repeated ids are
            allowed (a repeated id stands for the sum of its rows, as a push treats it).
        shape: the full shape, rank >= 1.
    Raises InvalidArgumentError (a ValueError) naming what does not fit.

    ::

        rsp = kvstore.RowSparseArray(np.ones((2, 3)), [0, 2], (3, 3))
        rsp.todense()   # [[1 1 1] [0 0 0] [1 1 1]]
    """

    stype = "row_sparse"

    def __init__(self, data: Any, indices: Any, shape: Sequence[int]) -> None:
        try:
            full = tuple(int(d) for d in shape)
        except TypeError:
            raise InvalidArgumentError(
                f"RowSparseArray: shape is a sequence of ints, not {shape!r}") from None
        if not full or any(d < 0 for d in full):
            raise InvalidArgumentError(
                f"RowSparseArray: shape {full} must have rank >= 1 and no negative dimension")
        if not hasattr(data, "shape") or not hasattr(data, "dtype"):
            data = np.asarray(data)
        ids = _flat_ids(indices, "RowSparseArray")
        want = (len(ids),) + full[1:]
        if tuple(data.shape) != want:
            raise InvalidArgumentError(
                f"RowSparseArray: data of shape {tuple(data.shape)} for {len(ids)} rows of a "
                f"{full} value; want {want}")
        if len(ids) and (ids.min() < 0 or ids.max() >= full[0]):
            bad = int(ids[(ids < 0) | (ids >= full[0])][0])
            raise InvalidArgumentError(
                f"RowSparseArray: row id {bad} outside [0, {full[0]}) of shape {full}")
        self._data = data
        self._indices = ids
        self._shape = full

    @classmethod
    def zeros(cls, shape: Sequence[int], dtype: str = "float32") -> "RowSparseArray":
        """An all-zero value (no rows): MXNet's ``mx.nd.sparse.zeros('row_sparse', shape)``,
        the usual output of :meth:`KVStore.row_sparse_pull`."""
        full = tuple(int(d) for d in shape)
        return cls(_zeros((0,) + full[1:], str(dtype)), np.zeros(0, np.int64), full)

    @classmethod
    def from_dense(cls, array: Any) -> "RowSparseArray":
        """The rows of a dense array that hold any non-zero element (MXNet's
        ``tostype('row_sparse')``)."""
        if library(array) == "torch":
            dense = array.detach().cpu()
            flat = dense.reshape(dense.shape[0], -1) if dense.dim() > 1 else dense.reshape(-1, 1)
            rows = (flat != 0).any(dim=1).nonzero().reshape(-1)
            return cls(dense[rows].clone(), rows.numpy(), tuple(dense.shape))
        dense = np.asarray(array)
        if dense.ndim == 0:
            raise InvalidArgumentError("RowSparseArray.from_dense: a scalar has no rows")
        rows = np.flatnonzero(dense.reshape(dense.shape[0], -1).any(axis=1))
        return cls(dense[rows].copy(), rows, dense.shape)

    @classmethod
    def from_torch(cls, tensor: Any) -> "RowSparseArray":
        """The rows of a ``torch.sparse_coo_tensor``: the rows of its first dimension that hold
        an entry. With one sparse dimension (a tensor of sparse rows) the values are taken as
        the rows; with more, they are gathered into rows (entries repeated are summed)."""
        import torch
        if getattr(tensor, "layout", None) != torch.sparse_coo:
            raise InvalidArgumentError(
                f"RowSparseArray.from_torch: wants a torch.sparse_coo_tensor, not "
                f"{type(tensor).__name__} of layout {getattr(tensor, 'layout', None)}")
        t = tensor.detach().cpu().coalesce()
        shape = tuple(t.shape)
        indices, values = t.indices(), t.values()
        if t.sparse_dim() == 1:
            return cls(values, indices[0].numpy(), shape)
        rows, inverse = torch.unique(indices[0], return_inverse=True)
        data = torch.zeros((len(rows),) + shape[1:], dtype=values.dtype)
        data.index_put_((inverse,) + tuple(indices[1:]), values, accumulate=True)
        return cls(data, rows.numpy(), shape)

    @classmethod
    def from_scipy(cls, matrix: Any) -> "RowSparseArray":
        """The rows of a SciPy sparse matrix (CSR, or anything ``tocsr()`` converts) that hold a
        stored entry, as dense rows."""
        if not hasattr(matrix, "tocsr"):
            raise InvalidArgumentError(
                f"RowSparseArray.from_scipy: wants a scipy.sparse matrix, not "
                f"{type(matrix).__name__}")
        csr = matrix.tocsr()
        rows = np.flatnonzero(np.diff(csr.indptr))
        return cls(np.asarray(csr[rows].toarray()), rows, csr.shape)

    @property
    def data(self) -> Any:
        """The listed rows, shape ``(len(indices),) + shape[1:]``."""
        return self._data

    @property
    def indices(self) -> np.ndarray:
        """The row ids (int64), as given; sorted without repeats after a row_sparse_pull."""
        return self._indices

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> Any:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def todense(self) -> Any:
        """The full value as a dense array of `data`'s library; repeated ids are summed."""
        if library(self._data) == "torch":
            import torch
            dense = torch.zeros(self._shape, dtype=self._data.dtype)
            dense.index_add_(0, torch.from_numpy(self._indices), self._data)
            return dense
        dense = np.zeros(self._shape, dtype=self._data.dtype)
        np.add.at(dense, self._indices, self._data)
        return dense

    def asnumpy(self) -> np.ndarray:
        """The full value as a NumPy array (MXNet's ``asnumpy``)."""
        dense = self.todense()
        if library(dense) == "torch":
            return dense.float().numpy() if dtype_name(dense) == "bfloat16" else dense.numpy()
        return dense

    def tostype(self, stype: str) -> Any:
        """``"default"`` returns :meth:`todense`; ``"row_sparse"`` returns this value."""
        if stype == "row_sparse":
            return self
        if stype == "default":
            return self.todense()
        raise InvalidArgumentError(f"tostype: \"default\" or \"row_sparse\", not {stype!r}")

    def _assign(self, indices: np.ndarray, data: Any) -> None:
        """Holds the rows a row_sparse_pull returned, in this value's dtype and library."""
        if dtype_name(data) != dtype_name(self._data):
            data = converted(data, dtype_name(self._data), like=self._data)
        elif library(self._data) == "torch" and library(data) != "torch":
            import torch
            data = torch.from_numpy(np.ascontiguousarray(data))
        self._data = data
        self._indices = indices

    def __repr__(self) -> str:
        return (f"<kvstore.RowSparseArray shape={self._shape} rows={len(self._indices)} "
                f"dtype={dtype_name(self._data)}>")


def is_row_sparse(value: Any) -> bool:
    """True for a RowSparseArray, a torch sparse COO tensor or a SciPy sparse matrix."""
    if isinstance(value, RowSparseArray):
        return True
    if np is not None and isinstance(value, np.ndarray):
        return False
    if getattr(value, "is_sparse", False) is True:
        return library(value) == "torch"
    return library(value) == "scipy" and hasattr(value, "tocsr")


def as_row_sparse(value: Any) -> Optional[RowSparseArray]:
    """`value` as a RowSparseArray when it is one, a torch sparse COO tensor or a SciPy sparse
    matrix; None for any other (dense) value."""
    if isinstance(value, RowSparseArray):
        return value
    kind = library(value)
    if kind == "torch" and getattr(value, "is_sparse", False):
        return RowSparseArray.from_torch(value)
    if kind == "scipy" and hasattr(value, "tocsr"):
        return RowSparseArray.from_scipy(value)
    return None


def _is_scalar_id(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, np.integer)):
        return True
    return hasattr(x, "shape") and hasattr(x, "dtype") and len(x.shape) == 0


def is_id_array(x: Any) -> bool:
    """True for one set of row ids: an array of any shape, a flat list of integers, or one
    integer."""
    if _is_scalar_id(x):
        return True
    if isinstance(x, (list, tuple)):
        return all(_is_scalar_id(i) for i in x)
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _flat_ids(ids: Any, what: str) -> np.ndarray:
    """`ids` flattened into an int64 array; integral floats are taken (MXNet's default NDArray
    dtype is float32), anything else refused naming `what`."""
    if library(ids) == "torch":
        ids = ids.detach().cpu().numpy()
    elif isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
        ids = [ids]
    elif not is_id_array(ids):
        raise InvalidArgumentError(
            f"{what}: row ids are an integer array or a list of ints, not {_form(ids)}")
    array = np.asarray(ids)
    if array.dtype == np.bool_ or not (np.issubdtype(array.dtype, np.integer) or
                                       np.issubdtype(array.dtype, np.floating) or array.size == 0):
        raise InvalidArgumentError(f"{what}: row ids of dtype {array.dtype} are not integers")
    flat = array.reshape(-1)
    if np.issubdtype(flat.dtype, np.floating):
        if not np.all(np.isfinite(flat)) or not np.all(flat == np.floor(flat)):
            raise InvalidArgumentError(f"{what}: row ids {flat[:8].tolist()}... are not integers")
    return flat.astype(np.int64)


def _form(x: Any) -> str:
    """A short description of the form of `x`, for errors."""
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_form(i) for i in list(x)[:3])
        more = ", ..." if len(x) > 3 else ""
        return f"{type(x).__name__} [{inner}{more}]"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:80]


def row_ids_per_output(key: Any, out: Any, row_ids: Any) -> List[np.ndarray]:
    """One int64 id array per output of MXNet's (key, out) structure, from `row_ids` in any of
    MXNet's forms: one id array (of any shape) for every output; for one key, a list with one
    id array per output (or a single one); for a list of keys, a list with, per key, an id array
    or a list of them. Outputs sharing one id set get the same array object."""
    if isinstance(key, (list, tuple)):
        outs = out if isinstance(out, (list, tuple)) else [out]
        if is_id_array(row_ids):
            ids = _flat_ids(row_ids, f"row_sparse_pull: keys {list(key)!r}")
            total = sum(len(o) if isinstance(o, (list, tuple)) else 1 for o in outs)
            return [ids] * total
        if not isinstance(row_ids, (list, tuple)) or len(row_ids) != len(key):
            raise InvalidArgumentError(
                f"row_sparse_pull: keys {list(key)!r}: {len(key)} keys need row ids as one id "
                f"array or a list of "
                f"{len(key)} (an id array or a list of them per key), not {_form(row_ids)}")
        result: List[np.ndarray] = []
        for k, o, r in zip(key, outs, row_ids):
            result += row_ids_per_output(k, o, r)
        return result
    n = len(out) if isinstance(out, (list, tuple)) else 1
    what = f"row_sparse_pull: key {key!r}"
    if is_id_array(row_ids):
        return [_flat_ids(row_ids, what)] * n
    if isinstance(row_ids, (list, tuple)) and row_ids and all(is_id_array(r) for r in row_ids):
        if len(row_ids) == n:
            return [_flat_ids(r, what) for r in row_ids]
        if len(row_ids) == 1:
            return [_flat_ids(row_ids[0], what)] * n
        raise InvalidArgumentError(
            f"{what}: {n} outputs but {len(row_ids)} row id arrays (give one, or one per output)")
    raise InvalidArgumentError(
        f"{what}: row ids are an integer array (any shape), a list of ints, or a list of id "
        f"arrays, one per output; got {_form(row_ids)}")
