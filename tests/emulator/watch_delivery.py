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
    """The lag and hold of each resource, and one condition per resource on the store's lock.

    A change wakes only the watches of its own resource (``changed(resource)``); the
    store's other waiters are not woken by every write.
    """

    def __init__(self, mutex: threading.RLock) -> None:
        self._mutex = mutex
        self._lags: dict[str, float] = {}
        self._held: dict[str, list[Event]] = {}
        self._conditions: dict[str, threading.Condition] = {}
        self._publications: dict[str, int] = {}
        self.publications = 0  # grows whenever a change becomes due (any resource)

    def changed(self, plural: str) -> threading.Condition:
        """(Hold the lock.) The condition notified when a change of ``plural`` becomes due."""
        condition = self._conditions.get(plural)
        if condition is None:
            condition = self._conditions[plural] = threading.Condition(self._mutex)
        return condition

    def publications_of(self, plural: str) -> int:
        """(Hold the lock.) Grows whenever a change of ``plural`` becomes due; watches wait on it."""
        return self._publications.get(plural, 0)

    def wake_all(self) -> None:
        """(Hold the lock.) Wake every watch: it was dropped, or the emulator stops."""
        for condition in self._conditions.values():
            condition.notify_all()

    def lag(self, plural: str, seconds: float) -> None:
        with self._mutex:
            self._lags[plural] = seconds

    def hold(self, plural: str) -> None:
        with self._mutex:
            self._held.setdefault(plural, [])

    def release(self, plural: str) -> None:
        with self._mutex:
            held = self._held.pop(plural, [])
            self._due(held)

    def publish(self, events: Iterable[Event]) -> None:
        with self._mutex:
            due = []
            for event in events:
                held = self._held.get(event.resource.plural)
                (held if held is not None else due).append(event)
            self._due(due)

    def _due(self, events: list[Event]) -> None:
        now = time.monotonic()
        plurals = set()
        for event in events:
            plural = event.resource.plural
            event.visible_at = now + self._lags.get(plural, 0.0)
            plurals.add(plural)
        self.publications += 1
        for plural in plurals:
            self._publications[plural] = self._publications.get(plural, 0) + 1
            condition = self._conditions.get(plural)
            if condition is not None:
                condition.notify_all()
