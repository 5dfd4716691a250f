"""How the Event recorder's writes reach the API server (``kruntimes.cluster.events`` decides them).

``Senders``: threads taking writes from one bounded queue, several in flight at once,
so a scheduler's Events keep pace with its binds. ``DirectEvents``: the two calls of
``EventsV1Api`` the recorder makes, sent through ``direct``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from kruntimes.cluster import direct

#: Writes waiting for a free sender, per sender; past that the deciding thread waits,
#: and occurrences wait in (or are dropped from) the recorder's bounded queue.
SENDER_BACKLOG = 64


class Senders:
    """Threads that take writes from one queue, several in flight at once."""

    def __init__(self, count: int, name: str) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=SENDER_BACKLOG * count)
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, write: Callable[[], None]) -> None:
        self._queue.put(write)

    def stop(self, deadline: float) -> None:
        """Send what is waiting, until ``deadline`` (monotonic) at most."""
        for _ in self._threads:
            try:
                self._queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
            except queue.Full:
                break
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        while True:
            write = self._queue.get()
            if write is None:
                return
            write()


class DirectEvents:
    """The two calls of `EventsV1Api` the recorder makes, sent directly (`direct`: a fraction of the
    client's CPU, and the created Event is not decoded into the client's model); same errors."""

    def __init__(self, sender: direct.Direct) -> None:
        self._sender = sender

    def close(self) -> None:
        self._sender.close()

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], *, _request_timeout: float) -> None:
        self._sender.call("POST", direct.path("apis", "events.k8s.io", "v1", "namespaces", namespace, "events"),
                          body, _request_timeout)

    def patch_namespaced_event(self, name: str, namespace: str, body: dict[str, Any], *, _request_timeout: float,
                               _content_type: str) -> None:
        self._sender.call("PATCH", direct.path("apis", "events.k8s.io", "v1", "namespaces", namespace, "events",
                                               name), body, _request_timeout, _content_type)
