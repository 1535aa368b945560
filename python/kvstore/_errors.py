"""Exceptions raised by the kvstore package, one per absl status code of the C++ SDK.

Each class derives from :class:`KVStoreError` and from the built-in exception a Python
programmer would catch for that condition, so ``except KeyError`` and ``except
kvstore.NotFoundError`` both work. The message is the SDK's status message, which names the key,
the shapes, the peer or the file.
"""
from __future__ import annotations

from typing import Dict, Type


class KVStoreError(Exception):
    """Base class of every error a KVStore call raises."""


class InvalidArgumentError(KVStoreError, ValueError):
    """A bad argument: shape or dtype mismatch, wrong number of values, bad hyper-parameter."""


class NotFoundError(KVStoreError, KeyError):
    """A key that was never initialised, or a file that does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message.
        return str(self.args[0]) if self.args else ""


class AlreadyExistsError(KVStoreError, KeyError):
    """A key initialised twice."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FailedPreconditionError(KVStoreError, RuntimeError):
    """The call does not fit the store's state or type (e.g. a CUDA tensor without CUDA)."""


class OutOfRangeError(KVStoreError, IndexError):
    """A value outside its range."""


class UnavailableError(KVStoreError, ConnectionError):
    """A peer (scheduler or server) could not be reached; retrying may help."""


class DeadlineExceededError(KVStoreError, TimeoutError):
    """A bounded wait ran out: the message says what was waited for."""


class PermissionDeniedError(KVStoreError, PermissionError):
    """Refused by the job's credentials, or a path outside the allowed root."""


class UnauthenticatedError(KVStoreError, PermissionError):
    """The call carried no valid job credentials."""


class ResourceExhaustedError(KVStoreError, MemoryError):
    """A value over a server's size or memory limit."""


class UnimplementedError(KVStoreError, NotImplementedError):
    """Not supported by this store type."""


class InternalError(KVStoreError, RuntimeError):
    """Any other failure (internal, unknown, data loss, aborted, cancelled)."""


# absl::StatusCode values (absl/status/status.h).
_CODES: Dict[int, Type[KVStoreError]] = {
    1: InternalError,            # kCancelled
    2: InternalError,            # kUnknown
    3: InvalidArgumentError,     # kInvalidArgument
    4: DeadlineExceededError,    # kDeadlineExceeded
    5: NotFoundError,            # kNotFound
    6: AlreadyExistsError,       # kAlreadyExists
    7: PermissionDeniedError,    # kPermissionDenied
    8: ResourceExhaustedError,   # kResourceExhausted
    9: FailedPreconditionError,  # kFailedPrecondition
    10: InternalError,           # kAborted
    11: OutOfRangeError,         # kOutOfRange
    12: UnimplementedError,      # kUnimplemented
    13: InternalError,           # kInternal
    14: UnavailableError,        # kUnavailable
    15: InternalError,           # kDataLoss
    16: UnauthenticatedError,    # kUnauthenticated
}
