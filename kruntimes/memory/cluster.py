"""The Runtime controller and runtimed, in process, over `MemoryPods` and `MemoryApi`.

`kruntimes demo` runs the whole system without a cluster. The decisions are the
real ones: the controller plans with `controller.reconcile` and carries the plan out
with `controller.apply`; each runtimed is the real `runtimed.lifecycle.Lifecycle`
(admission guard, guarded claim, executor, terminal statuses), reading pods and Runs
with `runtimed.reading` as `runtimed.agent.Agent` does. What is replaced is only the
transport: `Agent`'s informers, binder and heartbeat PATCH become the in-memory
stores' watchers and writes, and `ControllerRunner`'s informers become direct reads
of the stores (they answer at once, so no controller expectations are needed).

Why not the API emulator: it lives under `tests/` and is not installed with
kruntimes, while `kruntimes demo` must run after a plain `pip install .`.

`Kubelet` plays the node: it marks the controller's new pods Ready and starts a
runtimed for each (or, to show the scheduler's availability filter, leaves some
pods not Ready and some Ready without a runtimed, so their heartbeat never starts).
"""

from __future__ import annotations

import logging
import queue
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from kruntimes.api import ingest, models
from kruntimes.controller import apply as applying
from kruntimes.controller.reading import runtime_pod, runtime_view
from kruntimes.controller.reconcile import ActiveRun, PodDefaults, RuntimeSpecView, reconcile
from kruntimes.memory.api import MemoryApi
from kruntimes.memory.pods import MemoryPods
from kruntimes.runtimed.agent import DEFAULT_HEARTBEAT_PERIOD
from kruntimes.runtimed.lifecycle import Lifecycle
from kruntimes.runtimed.reading import pod_capacity
from kruntimes.wire import rfc3339

log = logging.getLogger(__name__)

HEARTBEAT_PERIOD = DEFAULT_HEARTBEAT_PERIOD  # runtimed's own default renewal period


class MemoryControllerApi:
    """`controller.apply.ControllerApi` over the in-memory stores."""

    def __init__(self, pods: MemoryPods, runs: MemoryApi) -> None:
        self.pods, self.runs = pods, runs

    def create_pod(self, namespace: str, body: dict[str, Any]) -> str:
        return str(self.pods.create(namespace, body)["metadata"]["name"])

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self.pods.delete(namespace, name, uid)

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.pods.patch_annotations(namespace, name, (patch.get("metadata") or {}).get("annotations") or {})

    def pod_present(self, namespace: str, name: str, uid: str | None) -> bool:
        pod = self.pods.get(namespace, name)
        return pod is not None and (uid is None or pod["metadata"]["uid"] == uid)

    def read_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.runs.read_run(namespace, name)

    def write_run_status(self, run: Mapping[str, Any], status: dict[str, Any]) -> None:
        self.runs.update_status(ingest.run_info(run), status)

    def write_runtime_status(self, runtime: RuntimeSpecView, status: dict[str, Any]) -> None:
        self.pods.set_runtime_status(runtime.namespace, runtime.name, status)


class MemoryController:
    """The Runtime controller's pass (as `ControllerRunner.sync`), run on demand and on every pod deletion."""

    def __init__(self, pods: MemoryPods, runs: MemoryApi, defaults: PodDefaults = PodDefaults()) -> None:
        self.api = MemoryControllerApi(pods, runs)
        self.defaults = defaults
        self.lost: list[str] = []  # Runs this controller ended RuntimePodLost
        self._lock = threading.Lock()
        pods.handlers.append(self)

    def sync_all(self, max_passes: int = 20) -> None:
        """Reconcile every Runtime until a pass creates nothing (creates are capped per pass)."""
        for _ in range(max_passes):
            if not any([applied.created for applied in map(self.sync, self.api.pods.runtimes())]):
                return

    def sync(self, obj: dict[str, Any]) -> applying.Applied:
        with self._lock:
            runtime = runtime_view(obj)
            pods = [runtime_pod(p, runtime.uid) for p in self.api.pods.list(runtime.namespace)
                    if (p["metadata"].get("labels") or {}).get(models.RUNTIME_LABEL) == runtime.name]
            runs = [ActiveRun(namespace=r.namespace, name=r.name, uid=r.uid, pod_name=r.pod_name,
                              pod_uid=r.pod_uid, resource_version=r.resource_version)
                    for r in self.api.runs.runs()
                    if r.namespace == runtime.namespace and r.runtime == runtime.name and r.active and r.pod_name]
            now = datetime.now(timezone.utc)
            plan = reconcile(runtime, pods, runs, now, defaults=self.defaults)
            applied = applying.apply(plan, runtime, obj.get("status"), self.api, now)
            self.lost.extend(applied.failed_runs)
            return applied

    # Pod watch: a deleted pod may leave Runs lost and a replica missing.
    def upsert(self, obj: dict[str, Any], event: str) -> None:
        pass

    def delete(self, namespace: str, name: str) -> None:
        threading.Thread(target=self.sync_all, name="kruntimes-demo-controller", daemon=True).start()


class PodRuntimed:
    """One runtimed: its pod's `Lifecycle`, fed by the stores' events as `Agent` feeds it from informers.

    Each has its own event thread, as each real runtimed has its own watch and process:
    one pod's claims and process starts never wait behind another pod's.
    """

    def __init__(self, pod: Mapping[str, Any], pods: MemoryPods, runs: MemoryApi, work_root: Path, *,
                 default_runs_capacity: int, log_line: Callable[[str], None]) -> None:
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self._pods, self._default = pods, default_runs_capacity
        self.lifecycle = Lifecycle(self.name, self.uid, pod_capacity(pod, default_runs_capacity), runs, runs,
                                   work_root / self.name, log_line=log_line)
        self._events: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._handling = False
        self._thread = threading.Thread(target=self._handle, name=f"runtimed-{self.name}", daemon=True)

    def observe(self, obj: dict[str, Any]) -> None:
        """A Run of this pod changed (watch order is kept: one queue, one thread)."""
        self._events.put(obj)

    def busy(self) -> bool:
        return self._handling or not self._events.empty() or bool(self.lifecycle.executor.active())

    def stop(self) -> None:
        self._events.put(None)
        if self._thread.is_alive():
            self._thread.join(5)
        self.lifecycle.shutdown()

    def _handle(self) -> None:
        while (obj := self._events.get()) is not None:
            self._handling = True
            try:
                self.lifecycle.observe(obj)
            except Exception:  # noqa: BLE001 - as an informer handler: log, keep watching
                log.exception("runtimed %s: handling a Run event failed", self.name)
            finally:
                self._handling = False

    def start(self, listed: list[dict[str, Any]]) -> None:
        """As `Agent.run`: recover from the listed Runs, then the first heartbeat, then live events."""
        self.lifecycle.recover(listed)
        self.heartbeat()
        self._thread.start()

    def heartbeat(self) -> None:
        try:
            self._pods.patch_annotations(self.namespace, self.name,
                                         {models.HEARTBEAT_ANNOTATION: rfc3339(datetime.now(timezone.utc))})
        except KeyError:
            pass  # the pod is gone; its delete event stops this runtimed

    def pod_changed(self, obj: dict[str, Any]) -> None:
        if obj["metadata"].get("uid") != self.uid:
            return
        if obj["metadata"].get("deletionTimestamp"):
            self.lifecycle.pod_leaving()
        self.lifecycle.set_capacity(pod_capacity(obj, self._default))

    def pod_deleted(self) -> None:
        """As `Agent` when its pod is gone: its Runs end `RuntimePodLost`, and it stops."""
        self.lifecycle.pod_leaving()
        self._events.put(None)
        threading.Thread(target=self.lifecycle.shutdown, name=f"runtimed-{self.name}-stop", daemon=True).start()


class Kubelet:
    """Plays the nodes: marks new Runtime Pods Ready, starts their runtimed and routes events to it."""

    def __init__(self, pods: MemoryPods, runs: MemoryApi, work_root: Path, *, default_runs_capacity: int,
                 log_line: Callable[[str], None], not_ready: Callable[[dict[str, Any]], bool] = lambda p: False,
                 no_runtimed: Callable[[dict[str, Any]], bool] = lambda p: False,
                 heartbeat_period: float = HEARTBEAT_PERIOD) -> None:
        self._pods, self._runs, self._work_root = pods, runs, work_root
        self._default, self._log_line = default_runs_capacity, log_line
        self._not_ready, self._no_runtimed = not_ready, no_runtimed
        self._period = heartbeat_period
        self._lock = threading.Lock()
        self.runtimeds: dict[tuple[str, str], PodRuntimed] = {}
        self._stopping = threading.Event()
        self._heartbeats = threading.Thread(target=self._renew, name="kruntimes-demo-heartbeats", daemon=True)
        pods.handlers.append(self)
        runs.object_watchers.append(self.run_changed)

    def start(self) -> Kubelet:
        self._heartbeats.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._heartbeats.join(5)
        for runtimed in self._all():
            runtimed.stop()

    def _all(self) -> list[PodRuntimed]:
        with self._lock:
            return list(self.runtimeds.values())

    def busy(self) -> bool:
        """Some runtimed has a Run event to handle or a Run executing."""
        return any(r.busy() for r in self._all())

    # -- pod watch --------------------------------------------------------------------
    def upsert(self, obj: dict[str, Any], event: str) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if event == "ADDED":
            ready = not self._not_ready(obj)
            self._pods.set_ready(*key, ready)
            if ready and not self._no_runtimed(obj):
                runtimed = PodRuntimed(obj, self._pods, self._runs, self._work_root,
                                       default_runs_capacity=self._default, log_line=self._log_line)
                with self._lock:
                    self.runtimeds[key] = runtimed
                listed = [o for o in (self._runs.read_run(r.namespace, r.name) for r in self._runs.runs()
                                      if r.pod_name == key[1] and r.namespace == key[0]) if o is not None]
                runtimed.start(listed)
            return
        with self._lock:
            runtimed = self.runtimeds.get(key)
        if runtimed is not None:
            runtimed.pod_changed(obj)

    def delete(self, namespace: str, name: str) -> None:
        with self._lock:
            runtimed = self.runtimeds.pop((namespace, name), None)
        if runtimed is not None:
            runtimed.pod_deleted()

    # -- Run watch, as runtimed's field selector `status.assignment.podName=<pod>` ------
    def run_changed(self, obj: dict[str, Any]) -> None:
        pod = ((obj.get("status") or {}).get("assignment") or {}).get("podName")
        if not pod:
            return
        with self._lock:
            runtimed = self.runtimeds.get((obj["metadata"]["namespace"], pod))
        if runtimed is not None:
            runtimed.observe(obj)

    def _renew(self) -> None:
        while not self._stopping.wait(self._period):
            for runtimed in self._all():
                runtimed.heartbeat()
