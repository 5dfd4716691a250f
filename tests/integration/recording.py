"""A recorder that keeps the cache's mutation records, to prove nothing was applied twice or lost."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from kruntimes.scheduler.recording import CountingRecorder


class MutationLog(CountingRecorder):
    """Numbers every change like the default recorder and remembers each mutation as
    (kind, event, namespace, name, resourceVersion)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.mutations: list[tuple[str, str, str, str, str]] = []

    def record(self, kind: str, data: dict[str, Any]) -> int:
        if kind == "mutation":
            obj = data["object"]
            with self._lock:
                self.mutations.append((data["kind"], data["event"], obj.namespace, obj.name, obj.resource_version))
        return super().record(kind, data)

    def applied_twice(self) -> list[tuple[str, str, str, str]]:
        """Upserts of the same object version delivered more than once."""
        with self._lock:
            counts = Counter((k, ns, name, rv) for k, event, ns, name, rv in self.mutations if event != "DELETED")
        return sorted(key for key, n in counts.items() if n > 1)

    def events_of(self, kind: str, name: str) -> list[str]:
        with self._lock:
            return [event for k, event, _, n, _ in self.mutations if (k, n) == (kind, name)]


class HeldNames:
    """An informer handler that keeps the names of the objects it holds (upserted, not deleted)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: set[str] = set()

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        with self.lock:
            self.names.add(obj["metadata"]["name"])

    def delete(self, namespace: str, name: str) -> None:
        with self.lock:
            self.names.discard(name)
