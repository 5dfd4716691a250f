"""Informer events -> projections -> the scheduler, routed by leadership.

Every event becomes the planner's projection (`api.ingest`, which never raises) and
is applied to the one `ClusterCache`, which journals it and keeps usage and the
runtime index current. What happens next depends on the term:

- leading: through the `Scheduler`'s handlers, which also enqueue the Runs the
  change wakes (and count the wake-up metric);
- standing by: straight into the cache. The standby keeps its cache warm, consumes
  no keys and counts no wake-ups; a new term enqueues every Pending Run anyway.

The leadership flag is read and the change applied under the cache lock, and the
term flips the flag under the same lock, so no event can slip between "applied
as a standby" and the new leader's `enqueue_pending`.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any, Callable

from kruntimes.api import ingest
from kruntimes.scheduler.loop import Scheduler


class Intake:
    def __init__(self, scheduler: Scheduler, clock: Callable[[], datetime]) -> None:
        self.scheduler = scheduler
        self.cache = scheduler.cache
        self.clock = clock
        self._leading = False

    @property
    def leading(self) -> bool:
        return self._leading

    def set_leading(self, leading: bool) -> None:
        with self.cache.lock:
            self._leading = leading

    def pods(self) -> PodEvents:
        return PodEvents(self)

    def runs(self) -> RunEvents:
        return RunEvents(self)

    def device_classes(self) -> DeviceClassEvents:
        return DeviceClassEvents(self)


class PodEvents:
    """Runtime Pods: a pod that lost its runtime label leaves the cache."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        info = ingest.pod_info(obj)
        meta = obj.get("metadata") or {}
        if info is None:
            self.delete(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            return
        intake = self.intake
        with intake.cache.lock:
            if intake.leading:
                intake.scheduler.on_pod(info, event=event)
            else:
                intake.cache.upsert_pod(info, now=intake.clock(), event=event)

    def delete(self, namespace: str, name: str) -> None:
        intake = self.intake
        with intake.cache.lock:
            if intake.leading:
                intake.scheduler.on_pod_deleted(namespace, name)
            else:
                intake.cache.delete_pod(namespace, name)


class RunEvents:
    def __init__(self, intake: Intake) -> None:
        self.intake = intake

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        info = ingest.run_info(obj)
        intake = self.intake
        with intake.cache.lock:
            if intake.leading:
                intake.scheduler.on_run(info, event=event)
            else:
                intake.cache.upsert_run(info, event=event)

    def delete(self, namespace: str, name: str) -> None:
        intake = self.intake
        with intake.cache.lock:
            if intake.leading:
                intake.scheduler.on_run_deleted(namespace, name)
            else:
                intake.cache.delete_run(namespace, name)


class DeviceClassEvents:
    """RuntimeDeviceClasses (SPEC §7.2): the leader's change wakes the Pending Runs with devices."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        meta = obj.get("metadata") or {}
        name, generation, spec = str(meta.get("name") or ""), meta.get("generation"), obj.get("spec") or {}
        intake = self.intake
        with intake.cache.lock:
            if intake.leading:
                intake.scheduler.on_device_class(name, generation, spec)
            else:
                intake.cache.upsert_device_class(name, generation, spec)

    def delete(self, namespace: str, name: str) -> None:
        intake = self.intake
        with intake.cache.lock:
            if intake.leading:
                intake.scheduler.on_device_class_deleted(name)
            else:
                intake.cache.delete_device_class(name)


class RuntimeStore:
    """The Runtimes as last seen. The planner reads pods and Runs only (a Runtime's pool
    is its labelled pods), so this is kept for status and future use, not for decisions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        meta = obj.get("metadata") or {}
        with self._lock:
            self._objects[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = obj

    def delete(self, namespace: str, name: str) -> None:
        with self._lock:
            self._objects.pop((namespace, name), None)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)
