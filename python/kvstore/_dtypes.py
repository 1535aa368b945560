"""dtype conversion as MXNet does it: a value pushed in another float dtype is converted to the
key's dtype, and a pull into an output of another float dtype converts into it.

Conversions are between float16, bfloat16, float32 and float64 only; any other mismatch (an
int64 value for a float32 key, say) is left to the store, which refuses it naming both
dtypes. A conversion copies, in the array's own library and on its device: NumPy, PyTorch
(CPU or CUDA) and CuPy arrays convert; NumPy has no bfloat16, so a bfloat16 side goes through
PyTorch.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

try:
    import numpy as np
except ImportError:  # The package imports without NumPy; NumPy values and row ids need it.
    np = None

from ._errors import InvalidArgumentError

FLOATS = frozenset(["float16", "bfloat16", "float32", "float64"])

_NAMES: Dict[Any, str] = {}


def dtype_name(array: Any) -> Optional[str]:
    """The dtype of `array` as the store names it ("float32", ...); None without a dtype."""
    dtype = getattr(array, "dtype", None)
    if dtype is None:
        return None
    try:
        name = _NAMES.get(dtype)
    except TypeError:  # An unhashable dtype.
        name = None
    if name is None:
        name = str(dtype)
        name = name[6:] if name.startswith("torch.") else name
        try:
            _NAMES[dtype] = name
        except TypeError:
            pass
    return name


def library(array: Any) -> str:
    """The top-level module of an array's type: "numpy", "torch", "cupy", ..."""
    return type(array).__module__.split(".")[0]


def _torch_dtype(name: str) -> Any:
    import torch
    return getattr(torch, name)


def converted(array: Any, to: str, like: Any = None) -> Any:
    """A copy of `array` in dtype `to`, in the library (and on the device) of `like` (default
    `array` itself)."""
    like = array if like is None else like
    if library(like) == "torch" or to == "bfloat16":
        import torch
        source = array if library(array) == "torch" else torch.from_numpy(
            np.ascontiguousarray(array))
        device = like.device if library(like) == "torch" else "cpu"
        return source.detach().to(device=device, dtype=_torch_dtype(to)).contiguous()
    if library(array) == "torch":
        source = array.detach().cpu()
        if dtype_name(source) == "bfloat16":
            source = source.float()
        array = source.numpy()
    if hasattr(array, "astype"):
        return array.astype(to, order="C")
    raise InvalidArgumentError(f"cannot convert a {type(array).__name__} to {to}")


def empty_like(array: Any, dtype: str) -> Any:
    """An uninitialised C-contiguous array of `array`'s shape in `dtype`, in `array`'s library
    and on its device (PyTorch for a bfloat16 NumPy output)."""
    kind = library(array)
    if kind == "torch" or dtype == "bfloat16":
        import torch
        device = array.device if kind == "torch" else "cpu"
        return torch.empty(tuple(array.shape), dtype=_torch_dtype(dtype), device=device)
    if kind == "cupy":
        import cupy
        return cupy.empty(array.shape, dtype=dtype)
    if kind == "numpy":
        return np.empty(array.shape, dtype=dtype)
    raise InvalidArgumentError(
        f"cannot pull into a {type(array).__name__} of dtype {dtype_name(array)} from a "
        f"{dtype} value: convert outputs of NumPy, PyTorch or CuPy only")


def cast_into(out: Any, source: Any) -> None:
    """Writes `source` into `out`, converting to `out`'s dtype."""
    kind = library(out)
    if kind == "torch":
        import torch
        if library(source) != "torch":
            source = torch.from_numpy(np.ascontiguousarray(source))
        with torch.no_grad():
            out.copy_(source)
        return
    if library(source) == "torch":
        source = source.detach().cpu()
        if dtype_name(source) == "bfloat16":
            source = source.float()
        source = source.numpy()
    if kind == "numpy":
        np.copyto(out, source, casting="unsafe")
    else:
        out[...] = source.astype(out.dtype)
