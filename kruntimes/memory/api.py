"""MemoryApi: the Run status subresource as an API server would serve it, in memory.

It is what `kruntimes demo` and the tests bind against: every status write is
guarded by the resourceVersion the writer read (a stale one gets `Conflict`, like
HTTP 409), a successful write bumps the version, and the new object is delivered
back to watchers like an informer would - inline, or after a delay on a delivery
thread to model informer lag. Conflicts can be injected: a seeded fraction of
writes find that "someone else" updated the Run first.

Inline delivery happens after the write has released the API lock, like a watch:
versions are queued under the lock, in write order, and delivered one at a time by
whichever writer finds no delivery in progress. A watcher that is slow (or that
writes back) therefore holds up no other writer, and still sees every Run's versions
in the order they were written (SPEC §3.1 relies on watch order, never on timing).

A Run created with its whole object (`create(run, obj)`) is served whole too, as
runtimed and the Runtime controller read Runs: `read_run` returns it with its
current resourceVersion and status, and `object_watchers` get each version of it,
in write order, on a delivery of their own: each is another client with its own
watch (runtimed, the controller), never held up behind the scheduler's handler.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import deque
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable

from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo

Watcher = Callable[[RunInfo], None]
ObjectWatcher = Callable[[dict[str, Any]], None]


class MemoryApi:
    def __init__(self, *, conflict_rate: float = 0.0, delay: tuple[float, float] = (0.0, 0.0),
                 seed: int = 0, error_rate: float = 0.0) -> None:
        self._lock = threading.RLock()
        self._outbox: deque[tuple[RunInfo, dict[str, Any] | None]] = deque()  # inline delivery, in write order
        self._delivering = False  # a thread is delivering the outbox; guarded by _lock
        self._object_outbox: deque[dict[str, Any]] = deque()  # the same versions, whole, for object_watchers
        self._delivering_objects = False
        self._runs: dict[tuple[str, str], RunInfo] = {}
        self._status: dict[tuple[str, str], dict[str, Any]] = {}
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}  # metadata and spec, when created whole
        self._rv = itertools.count(1)
        self._rng = random.Random(seed)
        self.conflict_rate = conflict_rate
        self.error_rate = error_rate
        self.delay = delay
        self.watchers: list[Watcher] = []
        self.object_watchers: list[ObjectWatcher] = []
        self.writes = 0
        self.injected_conflicts = 0
        self._pending: deque[tuple[float, RunInfo, dict[str, Any] | None]] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._deliverer: threading.Thread | None = None
        if delay[1] > 0:
            self._deliverer = threading.Thread(target=self._deliver_loop, name="memory-api-watch", daemon=True)
            self._deliverer.start()

    # -- objects -------------------------------------------------------------------------
    def create(self, run: RunInfo, obj: dict[str, Any] | None = None) -> RunInfo:
        with self._lock:
            stored = replace(run, resource_version=str(next(self._rv)))
            self._runs[run.key] = stored
            if obj is not None:
                self._objects[run.key] = {k: v for k, v in obj.items() if k != "status"}
            self._emit(stored)
        self._flush()
        return stored

    def get(self, key: tuple[str, str]) -> RunInfo | None:
        with self._lock:
            return self._runs.get(key)

    def status(self, key: tuple[str, str]) -> dict[str, Any] | None:
        with self._lock:
            return self._status.get(key)

    def observe(self, run: RunInfo) -> st.Observed | None:
        """The Binder's read: the Run as stored now (None when gone). Its writes always answer,
        so the loop only calls this in tests that make an answer go missing."""
        seen = self.get(run.key)
        return None if seen is None else st.Observed(uid=seen.uid, resource_version=seen.resource_version,
                                                     phase=seen.phase, pod_uid=seen.pod_uid)

    def read_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The whole Run as stored now (runtimed's and the controller's read); None when unknown."""
        with self._lock:
            return self._object((namespace, name))

    def _object(self, key: tuple[str, str]) -> dict[str, Any] | None:
        run, obj = self._runs.get(key), self._objects.get(key)
        if run is None or obj is None:
            return None
        status = self._status.get(key)
        meta = {**obj["metadata"], "resourceVersion": run.resource_version, "uid": run.uid}
        return {**obj, "metadata": meta, **({"status": status} if status is not None else {})}

    def annotate(self, key: tuple[str, str], annotations: dict[str, str]) -> RunInfo:
        """Someone merges annotations into the Run (`kruntimes release` does): a new version."""
        with self._lock:
            obj = self._objects[key]
            meta = obj["metadata"]
            obj["metadata"] = {**meta, "annotations": {**(meta.get("annotations") or {}), **annotations}}
            stored = self._runs[key] = replace(self._runs[key], resource_version=str(next(self._rv)))
            self._emit(stored)
        self._flush()
        return stored

    def runs(self) -> list[RunInfo]:
        with self._lock:
            return [self._runs[k] for k in sorted(self._runs)]

    def touch(self, key: tuple[str, str]) -> RunInfo:
        """Someone else updates the Run (labels, annotations): only its version changes."""
        with self._lock:
            stored = self._runs[key] = replace(self._runs[key], resource_version=str(next(self._rv)))
            self._emit(stored)
        self._flush()
        return stored

    def finish(self, key: tuple[str, str], phase: str, now: datetime, reason: str = "Completed") -> RunInfo:
        """What runtimed does when a task ends: the terminal helper, then a status write."""
        with self._lock:
            body = st.terminal_status(self._status.get(key), phase, reason, f"run {phase.lower()}", now)
            stored = self._apply(self._runs[key], body)
            self._emit(stored)
        self._flush()
        return stored

    # -- the Binder ------------------------------------------------------------------------
    def update_status(self, run: RunInfo, status: dict[str, Any]) -> None:
        with self._lock:
            current = self._runs.get(run.key)
            if current is None or current.uid != run.uid:
                raise st.Conflict(f"run {run.namespace}/{run.name} not found")
            if self.error_rate and self._rng.random() < self.error_rate:
                raise st.ApiError("injected server error")
            injected = self.conflict_rate and self._rng.random() < self.conflict_rate
            if injected:
                # A concurrent writer got there first: the version moves on.
                self.injected_conflicts += 1
                current = self._runs[run.key] = replace(current, resource_version=str(next(self._rv)))
            elif current.resource_version != run.resource_version:
                raise st.Conflict(f"run {run.namespace}/{run.name} changed (resourceVersion)")
            else:
                self.writes += 1
                current = self._apply(current, status)
            # Queued under the lock: two writers of one Run can never deliver their
            # versions out of order (a watch never does).
            self._emit(current)
        self._flush()
        if injected:
            raise st.Conflict(f"run {run.namespace}/{run.name} changed (resourceVersion)")

    def _apply(self, run: RunInfo, body: dict[str, Any]) -> RunInfo:
        self._status[run.key] = body
        assignment = body.get("assignment") or {}
        pending = next((c.get("message") for c in body.get("conditions", [])
                        if c.get("type") == st.SCHEDULED and c.get("status") == "False"), None)
        ended = st.ended(body["phase"], body.get("conditions"))
        stored = replace(run, resource_version=str(next(self._rv)), phase=body["phase"],
                         pod_name=assignment.get("podName"), pod_uid=assignment.get("podUID"),
                         released=bool(body.get("released")), pending_message=pending,
                         end_reason=ended[0] if ended else None, end_message=ended[1] if ended else None)
        self._runs[run.key] = stored
        return stored

    # -- watch delivery ----------------------------------------------------------------------
    def _emit(self, run: RunInfo) -> None:
        """Queue a new version for delivery; called under the API lock, so in write order."""
        obj = self._object(run.key) if self.object_watchers else None
        if self._deliverer is None:
            self._outbox.append((run, None))
            if obj is not None:
                self._object_outbox.append(obj)
            return
        with self._cv:
            self._pending.append((time.monotonic() + self._rng.uniform(*self.delay), run, obj))
            self._cv.notify()

    def _flush(self) -> None:
        """Deliver the outbox, outside the API lock, unless another thread is delivering it.

        That thread delivers what was queued meanwhile too, so nothing waits for a slow
        watcher but the thread running it, and a watcher's own writes are delivered after
        the version it is handling, not inside it.
        """
        while True:
            with self._lock:
                if self._delivering or not self._outbox:
                    break
                self._delivering = True
                run, _ = self._outbox.popleft()
            try:
                self._deliver(run, None)
            finally:
                with self._lock:
                    self._delivering = False
        while True:
            with self._lock:
                if self._delivering_objects or not self._object_outbox:
                    return
                self._delivering_objects = True
                obj = self._object_outbox.popleft()
            try:
                for object_watcher in self.object_watchers:
                    object_watcher(obj)
            finally:
                with self._lock:
                    self._delivering_objects = False

    def _deliver_loop(self) -> None:
        # One delivery thread, FIFO: like a watch, events arrive late but in order.
        while True:
            with self._cv:
                while not self._pending and not self._closed:
                    self._cv.wait()
                if self._closed and not self._pending:
                    return
                due, run, obj = self._pending[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                self._pending.popleft()
            self._deliver(run, obj)

    def _deliver(self, run: RunInfo, obj: dict[str, Any] | None) -> None:
        for watcher in self.watchers:
            watcher(run)
        if obj is not None:
            for object_watcher in self.object_watchers:
                object_watcher(obj)

    def idle(self) -> bool:
        with self._lock, self._cv:
            return not (self._pending or self._outbox or self._delivering or self._object_outbox
                        or self._delivering_objects)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._deliverer is not None:
            self._deliverer.join(5)
