"""How the cluster cache numbers its changes: the Recorder protocol and change boundaries.

Every change is handed to a recorder while the cache lock is held, which assigns
its log sequence number at that moment. `settles` marks the cache's public
changes, so that a recorder taking a checkpoint does so only between whole
changes - never after a change's record and before its effect.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol, TypeVar

T = TypeVar("T")


class Recorder(Protocol):
    """Receives every state change under the cache lock and returns its LSN.

    The journal implements this; `data` holds projections and plain values, and the
    recorder decides how (and whether) to encode them.
    """

    def record(self, kind: str, data: dict[str, Any]) -> int: ...


class CountingRecorder:
    """The recorder when no journal is configured: it only numbers changes."""

    def __init__(self, start: int = 0) -> None:
        self.lsn = start

    def record(self, kind: str, data: dict[str, Any]) -> int:
        self.lsn += 1
        return self.lsn


def settles(method: Callable[..., T]) -> Callable[..., T]:
    """A public change: applied and recorded under the lock, then the recorder may
    checkpoint - after the whole change, never between its record and its effect."""

    @functools.wraps(method)
    def change(self: Any, *args: Any, **kwargs: Any) -> T:
        with self.lock:
            result = method(self, *args, **kwargs)
            settled = getattr(self.recorder, "settled", None)
            if settled is not None:
                lsn = settled()
                if lsn is not None:
                    self.lsn = lsn
            return result

    return change
