"""`kruntimes demo`: an end-to-end run of the real scheduler on a generated workload.

No cluster: Runs live in `MemoryApi`, which acknowledges status writes like an API
server (resourceVersion-guarded, with injected 409 conflicts) and delivers the
updated objects back like an informer. Everything else is the real thing: the
work queue, N workers, the planner, the assumed cache and the wake-ups.

The workload is seeded and has every shape a platform team meets: several
Runtimes and a second namespace, pods that are not ready or whose runtimed is
stale, affinity cohorts that bootstrap, anti-affinity spreading, an
over-subscribed resource (GPUs and licences), invalid Runs, and tasks finishing
mid-run so that released capacity wakes Pending Runs.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from kruntimes.api import capacity as capacity_annotations
from kruntimes.api import ingest, models
from kruntimes.journal import history
from kruntimes.journal.backends import Journal
from kruntimes.journal.session import JournalSession
from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.projection import RunInfo

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
TOPOLOGY = models.RUNTIME_POD_TOPOLOGY

#: (namespace, runtime, pods, capacity annotations, not ready, stale)
RUNTIMES = (
    ("demo", "python", 100, {"runs": "40"}, 3, 2),
    ("demo", "trainer", 60, {"runs": "8", "example.com/gpu": "2"}, 0, 0),
    ("demo", "batch", 50, {"runs": "40", "example.com/license": "1"}, 0, 0),
    ("team-b", "python", 10, {"runs": "24"}, 0, 0),
)


@dataclass
class Workload:
    pods: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    finish_later: list[tuple[str, str]] = field(default_factory=list)


def _pod(ns: str, runtime: str, i: int, capacity: dict[str, str], ready: bool, fresh: bool) -> dict[str, Any]:
    annotations = capacity_annotations.annotations(capacity)  # the Runtime controller's form (SPEC §2.1)
    beat = NOW - timedelta(seconds=5 if fresh else 600)
    annotations[models.HEARTBEAT_ANNOTATION] = beat.isoformat().replace("+00:00", "Z")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{runtime}-{i:03d}", "namespace": ns, "uid": f"{ns}-{runtime}-{i}",
                         "labels": {models.RUNTIME_LABEL: runtime}, "annotations": annotations},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _term(labels: dict[str, str]) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": TOPOLOGY}


def _run(ns: str, name: str, runtime: str, *, labels: dict[str, str] | None = None,
         requests: dict[str, Any] | None = None, affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtime": runtime, "mode": {"task": {"args": ["python", "job.py"]}}}
    if requests is not None:
        spec["resources"] = {"requests": requests}
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": models.API_VERSION, "kind": "Run",
            "metadata": {"name": name, "namespace": ns, "uid": f"{ns}-{name}", "labels": labels or {}},
            "spec": spec}


def generate(seed: int = 7) -> Workload:
    rng = random.Random(seed)
    w = Workload()
    for ns, runtime, count, capacity, not_ready, stale in RUNTIMES:
        for i in range(count):
            w.pods.append(_pod(ns, runtime, i, capacity, ready=i >= not_ready,
                               fresh=not (not_ready <= i < not_ready + stale)))
    # python: plain tasks, 60 affinity cohorts of 5, 120 Runs spread one per pod.
    for i in range(2700):
        w.runs.append(_run("demo", f"py-{i:04d}", "python", labels={"app": "etl"}))
    for c in range(60):
        cohort = {"cohort": f"c{c:02d}"}
        for m in range(5):
            w.runs.append(_run("demo", f"cohort-{c:02d}-{m}", "python", labels=cohort,
                               affinity={"runAffinity": {"required": [_term(cohort)]}}))
    for i in range(120):
        spread = {"spread": "web"}
        w.runs.append(_run("demo", f"web-{i:03d}", "python", labels=spread,
                           affinity={"runAntiAffinity": {"required": [_term(spread)]},
                                     "runAffinity": {"preferred": [{"weight": 50, "term": _term({"app": "etl"})}]}}))
    # trainer: GPUs are over-subscribed (120 GPUs, 300 one-GPU Runs, 40 two-GPU Runs).
    for i in range(340):
        gpus = 2 if i % 17 == 0 else 1
        w.runs.append(_run("demo", f"train-{i:03d}", "trainer",
                           requests={"runs": "1", "example.com/gpu": str(gpus)}))
        if i % 5 == 0:
            w.finish_later.append(("demo", f"train-{i:03d}"))
    # batch: 1,500 tasks, 150 of which need one of 50 licences.
    for i in range(1500):
        requests = {"example.com/license": "1"} if i % 10 == 0 else None
        w.runs.append(_run("demo", f"batch-{i:04d}", "batch", requests=requests))
    # team-b: its own namespace and pods; never placed on demo's pods.
    for i in range(220):
        w.runs.append(_run("team-b", f"nb-{i:03d}", "python", requests={"runs": str(rng.choice([1, 1, 2]))}))
    # A few mistakes a user makes; each must end Failed with an actionable reason.
    bad = [{"requests": {"runs": "500m"}}, {"requests": {"bad name!": "1"}},
           {"affinity": {"runAffinity": {"preferred": [{"weight": 0, "term": _term({"a": "b"})}]}}},
           {"affinity": {"runAffinity": {"required": [{"labelSelector": {"matchExpressions": [
               {"key": "a", "operator": "Near", "values": ["b"]}]}, "topologyKey": TOPOLOGY}]}}}]
    for i in range(20):
        kwargs = bad[i % len(bad)]
        w.runs.append(_run("demo", f"typo-{i:02d}", "python", **kwargs))
    rng.shuffle(w.runs)
    return w


@dataclass
class Report:
    runs: int
    pods: int
    phases: Counter[str]
    pending_reasons: Counter[str]
    failed_reasons: Counter[str]
    utilisation: dict[str, dict[str, tuple[int, int]]]
    results: Counter[str]
    cycles: int
    seconds: float
    injected_conflicts: int
    wakeups: dict[str, int]
    journal: str | None = None
    records: int = 0
    history: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)


def run(*, workers: int = 4, conflict_rate: float = 0.02, seed: int = 7, journal: str | None = None,
        progress: Callable[[int, int], None] | None = None) -> Report:
    """Schedule the generated workload; with `journal` (a URL) every event and decision is journaled."""
    workload = generate(seed)
    config = SchedulerConfig(workers=workers)
    session = JournalSession(journal, config) if journal else None
    cache = ClusterCache(config, session.recorder if session else None)
    if session is not None:
        session.attach(cache)
    api = MemoryApi(conflict_rate=conflict_rate, seed=seed)
    scheduler = Scheduler(cache, api, clock=lambda: NOW)
    api.watchers.append(scheduler.on_run)
    for pod in workload.pods:
        info = ingest.pod_info(pod)
        assert info is not None
        scheduler.on_pod(info, event="ADDED")
    started = time.perf_counter()
    scheduler.start(workers)
    try:
        for obj in workload.runs:
            api.create(ingest.run_info(obj))
        _settle(scheduler, api, len(workload.runs), progress)
        # Tasks finish: their capacity is released and wakes the Pending Runs of their runtime.
        for key in workload.finish_later:
            current = api.get(key)
            if current is not None and current.active:
                api.finish(key, "Succeeded", NOW)
        _settle(scheduler, api, len(workload.runs), progress)
    finally:
        scheduler.stop()
        api.close()
        if session is not None:
            session.close()
    seconds = time.perf_counter() - started
    report = _report(workload, cache, api, scheduler, seconds)
    if session is not None:
        report.journal = journal
        report.records = session.recorder.lsn - session.first_lsn + 1
        store = Journal.open(journal)
        try:
            report.history = history.examples(store)
        finally:
            store.close()
    return report


def _decided(api: MemoryApi) -> int:
    return sum(1 for r in api.runs() if r.phase != "Pending" or r.pending_message)


def _settle(scheduler: Scheduler, api: MemoryApi, total: int,
            progress: Callable[[int, int], None] | None, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    q = scheduler.queue
    while time.monotonic() < deadline:
        if progress is not None:
            progress(_decided(api), total)
        if q.idle() and api.idle():
            time.sleep(0.05)  # let a last event land, then confirm
            if q.idle():
                break
        time.sleep(0.1)
    if progress is not None:
        progress(_decided(api), total)


def _report(w: Workload, cache: ClusterCache, api: MemoryApi, scheduler: Scheduler, seconds: float) -> Report:
    runs = api.runs()
    phases = Counter(r.phase for r in runs)
    pending = Counter(r.pending_message or "not yet evaluated" for r in runs if r.phase == "Pending")
    failed = Counter(_failure(api, r) for r in runs if r.phase == "Failed")
    utilisation: dict[str, dict[str, tuple[int, int]]] = {}
    for pod in cache.pods():
        view = cache.pod_view(pod.namespace, pod.name)
        if view is None or not pod.ready:
            continue
        per = utilisation.setdefault(f"{pod.namespace}/{pod.runtime}", {})
        for resource, cap in view.capacity.items():
            used, total = per.get(resource, (0, 0))
            per[resource] = (used + view.used.get(resource, 0), total + cap)
    wakeups = {s.labels["source"]: int(s.value) for m in scheduler.metrics.wakeups.collect()
               for s in m.samples if s.name.endswith("_total")}
    return Report(runs=len(runs), pods=len(w.pods), phases=phases, pending_reasons=pending,
                  failed_reasons=failed, utilisation=utilisation, results=scheduler.results,
                  cycles=sum(scheduler.results.values()), seconds=seconds,
                  injected_conflicts=api.injected_conflicts, wakeups=wakeups)


def _failure(api: MemoryApi, run: RunInfo) -> str:
    body = api.status(run.key) or {}
    for c in body.get("conditions", []):
        if c.get("type") == "Completed":
            return str(c.get("message"))
    return "failed"
