"""Per-request faults for the emulator, and a count of every request that reached it.

SPEC §3.2 step 6 says what the scheduler does when a write's outcome is unknown;
proving it needs a server that misbehaves on exactly one chosen request, and that
counts what arrived, so that a request the client re-sent on its own (a "hidden
re-send") fails a test instead of hiding a fault:

- ``delay``: wait before handling the request (the write lands late, perhaps after the
  client gave up) or, with ``apply_first``, handle it at once and answer late;
- ``drop``: close the connection without answering, before handling the request or,
  with ``apply_first``, after it has been applied (the client cannot know it landed);
- ``throttle``: 429 with ``Retry-After`` and a plain-text body, as API Priority and
  Fairness answers;
- ``answer``: any other status (409, 500, ...) with a ``Status`` body;
- ``duplicate``: the request is applied twice, as a proxy that re-sends a request whose
  answer it lost; the client gets the second answer (for a guarded write: 409, though
  its write landed);
- ``silence``: a watch answered 200 whose stream then stays open and says nothing, not
  even a bookmark, until the client leaves (a wedged server or a proxy holding the
  connection; issue 23 item 7). Meant for watch requests: any other request it
  matches is answered as usual.

Each fault fires once per request it matches, ``count`` times, then is used up.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Callable

Match = Callable[[str, str], bool]

#: What API Priority and Fairness answers when it rejects a request.
THROTTLED_BODY = b"Too many requests, please try again later.\n"


@dataclass(frozen=True)
class Fault:
    kind: str                      # "delay", "drop", "throttle", "answer", "duplicate" or "silence"
    when: Match | None = None      # (method, path) -> whether this request is hit; None: any
    seconds: float = 0.0           # delay
    apply_first: bool = False      # delay/drop: after the request has been applied
    code: int = 0                  # answer
    retry_after: int = 1           # throttle


def status_write(name: str | None = None) -> Match:
    """Matches a PUT to a Run's status subresource (one Run's when `name` is given)."""
    suffix = f"/runs/{name}/status" if name else "/status"
    return lambda method, path: method == "PUT" and "/runs/" in path and path.endswith(suffix)


def watch_of(plural: str) -> Match:
    """Matches a list or watch of ``plural`` (both are a GET of the collection)."""
    return lambda method, path: method == "GET" and path.endswith(f"/{plural}")


def lease_write(method: str | None = None) -> Match:
    """Matches a write (PUT or POST, or just `method`) to a coordination.k8s.io Lease."""
    methods = {method} if method else {"PUT", "POST"}
    return lambda m, path: m in methods and "/leases" in path


class Faults:
    """Pending faults and the hit count, both thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Fault] = []
        self.hits: collections.Counter[tuple[str, str]] = collections.Counter()
        self.fired: collections.Counter[str] = collections.Counter()
        self.finished: collections.Counter[str] = collections.Counter()  # faulted requests fully handled
        # Every arrival: (monotonic time, method, path, the kind of fault it met or None).
        self.arrivals: list[tuple[float, str, str, str | None]] = []

    def add(self, fault: Fault, count: int = 1) -> None:
        if count < 1:
            raise ValueError("a fault fires at least once")
        with self._lock:
            self._pending.extend([fault] * count)

    def arrived(self, method: str, path: str) -> Fault | None:
        """Count the request and take the first pending fault that matches it, if any."""
        with self._lock:
            self.hits[(method, path)] += 1
            taken = next((i for i, f in enumerate(self._pending) if f.when is None or f.when(method, path)), None)
            fault = self._pending.pop(taken) if taken is not None else None
            if fault is not None:
                self.fired[fault.kind] += 1
            self.arrivals.append((time.monotonic(), method, path, fault.kind if fault else None))
            return fault

    def finish(self, fault: Fault) -> None:
        """The request `fault` hit is over (answered, dropped, or applied after its client left)."""
        with self._lock:
            self.finished[fault.kind] += 1

    def hits_of(self, match: Match) -> int:
        """How many requests that `match` accepts reached the server."""
        with self._lock:
            return sum(n for (method, path), n in self.hits.items() if match(method, path))

    def arrivals_of(self, match: Match) -> list[tuple[float, str | None]]:
        """(arrival time, fault kind or None) of each request `match` accepts, in arrival order."""
        with self._lock:
            return [(t, kind) for t, method, path, kind in self.arrivals if match(method, path)]

    def clear(self) -> None:
        """Forget every fault that has not fired yet."""
        with self._lock:
            self._pending.clear()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)
