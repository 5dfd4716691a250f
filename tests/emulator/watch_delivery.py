"""When a committed change reaches watches: after its write was answered, plus a per-resource lag.

A real API server feeds watches from its watch cache, which learns of a write from an
etcd watch *after* the write committed: a client usually has its write's answer before
the event, and the events of different resources travel through different caches, so
one resource's watchers may see a change long after another's did. Tests provoke that
order here:

- ``lag(plural, seconds)``: every change of that resource reaches its watches that much
  later (``Emulator.lag("pods", 0.3)``); each watch still sees its resource's changes in
  resourceVersion order, as from the API server;
- ``hold(plural)`` / ``release(plural)``: keep that resource's changes from every watch
  until released (then they come in order, with the lag).

The store hands each change to ``publish`` once the request that made it was answered
(changes the emulator's own controllers make are published at once).
"""

from __future__ import annotations

import threading
import time
from typing import Iterable

from tests.emulator.statuses import Event


class Delivery:
    """The lag and hold of each resource; shares the store's condition (``lock``)."""

    def __init__(self, lock: threading.Condition) -> None:
        self._lock = lock
        self._lags: dict[str, float] = {}
        self._held: dict[str, list[Event]] = {}
        self.publications = 0  # grows whenever a change becomes due; watches wait on it

    def lag(self, plural: str, seconds: float) -> None:
        with self._lock:
            self._lags[plural] = seconds

    def hold(self, plural: str) -> None:
        with self._lock:
            self._held.setdefault(plural, [])

    def release(self, plural: str) -> None:
        with self._lock:
            held = self._held.pop(plural, [])
            self._due(held)

    def publish(self, events: Iterable[Event]) -> None:
        with self._lock:
            due = []
            for event in events:
                held = self._held.get(event.resource.plural)
                (held if held is not None else due).append(event)
            self._due(due)

    def _due(self, events: list[Event]) -> None:
        now = time.monotonic()
        for event in events:
            event.visible_at = now + self._lags.get(event.resource.plural, 0.0)
        self.publications += 1
        self._lock.notify_all()
