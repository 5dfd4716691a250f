"""MemoryPods: Runtime Pods and Runtimes as an API server would keep them, in memory.

It is the pod half of what `kruntimes demo` runs against (Runs are `MemoryApi`): the
Runtime controller creates pods with `generateName`, patches their annotations and
deletes them by UID; the demo's kubelet marks them Ready; each runtimed renews its
heartbeat by patching an annotation. Every change gets a new resourceVersion and is
delivered to the watchers after the store's lock is released, in write order (a
watch never reorders one object's versions), as `upsert(obj, event)` or
`delete(namespace, name)`, the handler shape of the cluster informers.

Deletion is immediate (no grace period): the demo plays a kubelet that has already
stopped the containers.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections import deque
from datetime import datetime, timezone
from typing import Any, Protocol

from kruntimes.wire import rfc3339


class PodHandler(Protocol):
    def upsert(self, obj: dict[str, Any], event: str) -> None: ...

    def delete(self, namespace: str, name: str) -> None: ...


class MemoryPods:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._runtimes: dict[tuple[str, str], dict[str, Any]] = {}
        self._rv = itertools.count(1)
        self._uids = itertools.count(1)
        self._outbox: deque[tuple[str, dict[str, Any] | tuple[str, str]]] = deque()
        self._delivering = False
        self.handlers: list[PodHandler] = []
        self.writes = 0

    # -- Runtimes (the controller reads them; their status is written back) -------------
    def create_runtime(self, obj: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            stored = copy.deepcopy(obj)
            meta = stored["metadata"]
            meta.update(uid=f"runtime-{next(self._uids)}", resourceVersion=str(next(self._rv)), generation=1)
            self._runtimes[(meta["namespace"], meta["name"])] = stored
            return copy.deepcopy(stored)

    def runtimes(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(self._runtimes[k]) for k in sorted(self._runtimes)]

    def set_runtime_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        with self._lock:
            self._runtimes[(namespace, name)]["status"] = copy.deepcopy(status)

    # -- pods ---------------------------------------------------------------------------
    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a pod; `metadata.generateName` gets a unique suffix, as the server gives it."""
        with self._lock:
            pod = copy.deepcopy(body)
            meta = pod.setdefault("metadata", {})
            uid = next(self._uids)
            if not meta.get("name"):
                meta["name"] = f"{meta.get('generateName', 'pod-')}{uid:05x}"
            key = (namespace, meta["name"])
            if key in self._pods:
                raise ValueError(f"pod {namespace}/{meta['name']} already exists")
            meta.update(namespace=namespace, uid=f"pod-{uid}", resourceVersion=str(next(self._rv)),
                        creationTimestamp=rfc3339(datetime.now(timezone.utc).replace(microsecond=0)))
            pod.setdefault("status", {"phase": "Pending"})
            self._pods[key] = pod
            self._queue("ADDED", pod)
        self._flush()
        return copy.deepcopy(pod)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            pod = self._pods.get((namespace, name))
            return copy.deepcopy(pod) if pod is not None else None

    def list(self, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(self._pods[k]) for k in sorted(self._pods) if namespace in (None, k[0])]

    def patch_annotations(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        """A merge patch of `metadata.annotations` (None removes a key); KeyError when the pod is gone."""
        with self._lock:
            pod = self._pods[(namespace, name)]
            merged = dict(pod["metadata"].get("annotations") or {})
            for key, value in annotations.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            pod["metadata"]["annotations"] = merged
            self._bump(pod)
        self._flush()

    def set_ready(self, namespace: str, name: str, ready: bool) -> None:
        """The kubelet's status write: phase Running and the Ready condition."""
        with self._lock:
            pod = self._pods[(namespace, name)]
            pod["status"] = {"phase": "Running",
                             "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
            self._bump(pod)
        self._flush()

    def delete(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete the pod (only if it has `uid`, when given); False when there was none to delete."""
        with self._lock:
            pod = self._pods.get((namespace, name))
            if pod is None or (uid is not None and pod["metadata"]["uid"] != uid):
                return False
            del self._pods[(namespace, name)]
            self.writes += 1
            self._outbox.append(("DELETED", (namespace, name)))
        self._flush()
        return True

    # -- watch delivery -------------------------------------------------------------------
    def _bump(self, pod: dict[str, Any]) -> None:
        pod["metadata"]["resourceVersion"] = str(next(self._rv))
        self._queue("MODIFIED", pod)

    def _queue(self, event: str, pod: dict[str, Any]) -> None:
        self.writes += 1
        self._outbox.append((event, copy.deepcopy(pod)))

    def _flush(self) -> None:
        # As MemoryApi: delivered outside the lock, one at a time, by whichever writer finds
        # no delivery in progress; a handler's own writes are delivered after the event it handles.
        while True:
            with self._lock:
                if self._delivering or not self._outbox:
                    return
                self._delivering = True
                event, item = self._outbox.popleft()
            try:
                for handler in self.handlers:
                    if event == "DELETED":
                        assert isinstance(item, tuple)
                        handler.delete(*item)
                    else:
                        assert isinstance(item, dict)
                        handler.upsert(item, event)
            finally:
                with self._lock:
                    self._delivering = False

    def idle(self) -> bool:
        with self._lock:
            return not self._outbox and not self._delivering
