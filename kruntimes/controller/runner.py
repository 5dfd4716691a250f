"""The Runtime controller's loop over the real client: watch, queue, reconcile, apply (SPEC §4.2).

Three informers (the scheduler's: paged lists, resumable watches, relist on 410)
keep plain-dict caches of Runtimes, Runtime Pods (label `kruntimes.io/runtime`) and
Runs. Every event only enqueues the key of the Runtime it concerns (a pod by its
label, a Run by `spec.runtime`); one worker takes keys from the scheduler's work
queue (coalescing, per-key backoff), builds the reconcile inputs from the caches,
computes the plan and applies it. A pass with errors is retried with backoff; every
Runtime is re-enqueued each `resync_period`, which is what notices a pod that
vanished while its watch was down.

Expectations (as kube's controllers keep them): pods this controller created but
its cache has not shown yet count as existing for `expectation_ttl` seconds, so a
lagging watch never makes it create the same pods twice; pods it deleted but its
cache still shows count as terminating (what the cache will show) for as long, so a
lagging watch never makes it delete again - a second pod, on a scale down.

Leader election, when wanted, wraps `start_work`/`stop_work`: the informers run on
standbys too (warm caches); only the leader's worker writes.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

import kubernetes.client

from kruntimes import wire
from kruntimes.api import models
from kruntimes.cluster import events, sources
from kruntimes.cluster.informer import BOOKMARK_INTERVAL, Informer
from kruntimes.cluster.informer_metrics import InformerMetrics
from kruntimes.cluster.leader import LeaderElector
from kruntimes.cluster.settings import LeaseSettings
from kruntimes.controller import apply as applying
from kruntimes.controller import telling
from kruntimes.controller.metrics import ERROR, OK, ControllerMetrics
from kruntimes.controller.kube import KubernetesControllerApi
from kruntimes.controller.reading import active_run, runtime_pod, runtime_view
from kruntimes.controller.reconcile import PodDefaults, RuntimePod, reconcile
from kruntimes.scheduler.queue import WorkQueue

log = logging.getLogger(__name__)

Key = tuple[str, str]


class _Cache:
    """One informer's objects by (namespace, name); each change enqueues its Runtime's key."""

    def __init__(self, runner: ControllerRunner, runtime_of: Callable[[dict[str, Any]], str | None]) -> None:
        self._runner = runner
        self._runtime_of = runtime_of
        self.objects: dict[Key, dict[str, Any]] = {}

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        with self._runner.lock:
            old = self.objects.get(key)
            self.objects[key] = obj
        for runtime in {self._runtime_of(obj), self._runtime_of(old) if old else None} - {None}:
            self._runner.queue.add((key[0], str(runtime)))

    def delete(self, namespace: str, name: str) -> None:
        with self._runner.lock:
            old = self.objects.pop((namespace, name), None)
        runtime = self._runtime_of(old) if old else None
        if runtime:
            self._runner.queue.add((namespace, runtime))

    def values(self) -> list[dict[str, Any]]:
        with self._runner.lock:
            return list(self.objects.values())


def _runtime_label(obj: dict[str, Any]) -> str | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(models.RUNTIME_LABEL)
    return value if isinstance(value, str) and value else None


def _run_runtime(obj: dict[str, Any]) -> str | None:
    value = (obj.get("spec") or {}).get("runtime")
    return value if isinstance(value, str) and value else None


#: The reporting controller of the Runtime controller's Events.


class ControllerRunner:
    """Watches one namespace (or all) and keeps every Runtime's pods, capacity, lost Runs and status."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str | None, *,
                 defaults: PodDefaults = PodDefaults(), resync_period: float = 30.0,
                 expectation_ttl: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 lease: LeaseSettings | None = None, bookmark_interval: float = BOOKMARK_INTERVAL,
                 informer_metrics: InformerMetrics | None = None, instance: str = "",
                 metrics: ControllerMetrics | None = None) -> None:
        self.lock = threading.Lock()
        self.metrics = metrics
        # Events on Runtimes and Runs (`telling`): sent from their own thread, never waited for.
        self.events = events.EventRecorder(api, instance=instance or (lease.identity if lease else "controller"),
                                           controller=wire.CONTROLLER_EVENTS_REPORTER)
        self.queue: WorkQueue[Key] = WorkQueue(base_delay=0.1, max_delay=30.0)
        self.elector = None if lease is None else LeaderElector(
            api, lease, on_started=lambda record: self.start_work(), on_stopped=lambda reason: self.stop_work())
        self.api = KubernetesControllerApi(api, fence=self._may_write)
        self.defaults = defaults
        self.resync_period = resync_period
        self._ttl, self._clock = expectation_ttl, clock
        self._expected: dict[Key, dict[str, float]] = {}  # runtime -> created pod name -> when
        self._deleted: dict[Key, dict[str, float]] = {}  # runtime -> deleted pod UID -> when
        self.runtimes = _Cache(self, lambda o: (o.get("metadata") or {}).get("name"))
        self.pods = _Cache(self, _runtime_label)
        self.runs = _Cache(self, _run_runtime)
        self.informers = [Informer(source, cache, bookmark_interval=bookmark_interval, metrics=informer_metrics)
                          for source, cache in ((sources.runtimes(api, namespace), self.runtimes),
                                                (sources.runtime_pods(api, namespace), self.pods),
                                                (sources.runs(api, namespace), self.runs))]
        self._stop = threading.Event()      # ends the work (a lost or released lease)
        self._shutdown = threading.Event()  # ends everything
        self._campaign: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self.passes = 0

    # -- lifecycle -------------------------------------------------------------------

    def start(self, sync_timeout: float = 60.0) -> ControllerRunner:
        """Start the informers, wait for their first lists, then work (or campaign for the lease)."""
        self.events.start()
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            informer.wait_synced(sync_timeout)
        if self.elector is None:
            self.start_work()
        else:
            self._campaign = threading.Thread(target=self.elector.run, args=(self._shutdown,),
                                              name="kruntimes-controller-elector", daemon=True)
            self._campaign.start()
        return self

    def healthy(self) -> bool:
        """For /healthz: every informer thread is alive (a dead one would leave the caches stale)."""
        return all(informer.alive for informer in self.informers)

    def ready(self) -> bool:
        """For /readyz: every cache has its first list (on standbys too, so rollouts and drains work)."""
        return all(informer.synced for informer in self.informers)

    def _may_write(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def start_work(self) -> None:
        """Begin writing (the leader's part): the worker and the periodic resync; every Runtime is queued."""
        self._stop.clear()
        for obj in self.runtimes.values():
            meta = obj.get("metadata") or {}
            self.queue.add((str(meta.get("namespace") or "default"), str(meta.get("name"))))
        if self.metrics is not None:
            self.metrics.leader.set(1)
        self._threads = [threading.Thread(target=self._work, name="kruntimes-controller-worker", daemon=True),
                         threading.Thread(target=self._resync, name="kruntimes-controller-resync", daemon=True)]
        for thread in self._threads:
            thread.start()

    def stop_work(self) -> None:
        if self.metrics is not None:
            self.metrics.leader.set(0)
        self._stop.set()
        self.queue.poke()
        for thread in self._threads:
            thread.join(10)

    def stop(self) -> None:
        self._shutdown.set()
        if self._campaign is not None:
            self._campaign.join(10)  # the elector stops the work and releases the lease
        self.stop_work()
        self.queue.shut_down()
        for informer in self.informers:
            informer.stop()
        self.events.stop()

    # -- the loop --------------------------------------------------------------------

    def _resync(self) -> None:
        while not self._stop.wait(self.resync_period):
            for obj in self.runtimes.values():
                meta = obj.get("metadata") or {}
                self.queue.add((str(meta.get("namespace") or "default"), str(meta.get("name"))))

    def _work(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            try:
                applied = self.sync(key)
                if applied is not None and applied.errors:
                    log.warning("reconciling Runtime %s/%s: %s", *key, "; ".join(applied.errors))
                    self.queue.add_rate_limited(key)
                else:
                    self.queue.forget(key)
            except Exception:  # noqa: BLE001 - one bad Runtime must not stop the worker
                log.exception("reconciling Runtime %s/%s failed", *key)
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)

    def sync(self, key: Key) -> applying.Applied | None:
        """One pass for one Runtime: inputs from the caches, plan, apply."""
        namespace, name = key
        with self.lock:
            obj = self.runtimes.objects.get(key)
            pod_objs = [p for (ns, _), p in self.pods.objects.items() if ns == namespace and _runtime_label(p) == name]
            run_objs = [r for (ns, _), r in self.runs.objects.items() if ns == namespace and _run_runtime(r) == name]
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self._expected.pop(key, None)
            self._deleted.pop(key, None)
            return None  # deleted: the garbage collector removes its pods (owner references)
        runtime = runtime_view(obj)
        pods = self._as_deleted(key, [runtime_pod(p, runtime.uid) for p in pod_objs])
        runs = [r for r in (active_run(o) for o in run_objs) if r is not None]
        now = datetime.now(timezone.utc)
        plan = reconcile(runtime, pods, runs, now, unobserved_creates=self._unobserved(key, {p.name for p in pods}),
                         defaults=self.defaults)
        applied = applying.apply(plan, runtime, obj.get("status"), self.api, now)
        if self.metrics is not None:
            self.metrics.passes.labels(ERROR if applied.errors else OK).inc()
            self.metrics.pods.labels("created").inc(len(applied.created))
            self.metrics.pods.labels("deleted").inc(len(applied.deleted))
            self.metrics.lost.inc(len(applied.lost))
        for t in telling.tell(runtime, applied, obj.get("status")):
            about = (events.runtime if t.kind == "Runtime" else events.run)(t.namespace, t.name, t.uid)
            self.events.emit(about, t.reason, t.note, type=t.type)
        expected = self._expected.setdefault(key, {})
        for created in applied.created:
            expected[created] = self._clock()
        uids = {p.name: p.uid for p in plan.delete}
        deleted = self._deleted.setdefault(key, {})
        for name in applied.deleted:
            deleted[uids[name]] = self._clock()
        self.passes += 1
        return applied

    def _as_deleted(self, key: Key, pods: list[RuntimePod]) -> list[RuntimePod]:
        """`pods` with those this controller deleted shown terminating, as the cache soon will
        (their UIDs are forgotten once the cache no longer shows them, or after `expectation_ttl`)."""
        deleted = self._deleted.get(key, {})
        now, shown = self._clock(), {p.uid for p in pods}
        for uid in [u for u, at in deleted.items() if u not in shown or now - at > self._ttl]:
            del deleted[uid]
        return [dataclasses.replace(p, terminating=True) if p.uid in deleted else p for p in pods]

    def _unobserved(self, key: Key, seen: set[str]) -> int:
        expected = self._expected.get(key, {})
        now = self._clock()
        for pod_name in [n for n, at in expected.items() if n in seen or now - at > self._ttl]:
            del expected[pod_name]
        return len(expected)
