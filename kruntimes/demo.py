"""`kruntimes demo`: the whole system, end to end, on a generated workload, without a cluster.

Runtimes are created; the Runtime controller creates their Runtime Pods; the demo
plays kubelet (`memory.cluster.Kubelet`): it marks the pods Ready and starts one
runtimed per pod; the scheduler places the Runs (journaled); each runtimed admits
the Runs of its pod against the pod's capacity, claims them (`Running`), executes
them as real processes (no shell) and writes their end (Succeeded or Failed), which
frees the capacity that wakes the Pending Runs. Midway, one busy trainer pod is
deleted: its runtimed ends its Runs `RuntimePodLost` and the controller replaces it
(if its Runs all ended on their own just before, another busy trainer pod is).

Runs and pods live in `MemoryApi` and `MemoryPods`, which answer like an API server
(resourceVersion-guarded writes, injected 409 conflicts on scheduler and runtimed
writes alike, watch delivery in write order). Everything else is the real thing:
work queue, planner, assumed cache, journal; reconcile and apply; admission guard,
lifecycle and executor.

The workload is seeded (`demo_workload`) and has every shape a platform team meets.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kruntimes import demo_watch, wire
from kruntimes.api import ingest, models
from kruntimes.demo_workload import NO_RUNTIMED, NOT_READY, Workload, generate
from kruntimes.journal import redact
from kruntimes.journal.history import cycles as history_cycles
from kruntimes.journal.history import runs as history_runs
from kruntimes.journal.store.backends import Journal
from kruntimes.journal.write.session import JournalSession
from kruntimes.memory.api import MemoryApi
from kruntimes.memory.cluster import Kubelet, MemoryController
from kruntimes.memory.pods import MemoryPods
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.projection import RunInfo


#: The reason of a Pending Run no cycle has evaluated yet: it waits in queue, it is not unschedulable.
NOT_YET_EVALUATED = "not yet evaluated (waiting in queue)"


@dataclass
class Report:
    runs: int
    pods: int
    phases: Counter[str]
    pending_reasons: Counter[tuple[str, str]]  # (namespace/runtime, reason)
    failed_reasons: Counter[tuple[str, str]]
    peak_utilisation: dict[str, dict[str, tuple[int, int]]]
    timeline: list[tuple[float, Counter[str]]]
    overcommitted: int
    results: Counter[str]
    cycles: int
    seconds: float
    injected_conflicts: int
    wakeups: dict[str, int]
    processes: int
    pod_lost: str | None
    pod_log: list[str]
    journal: str | None = None  # the journal's URL as people see it: redact.url, its password masked
    records: int = 0
    history: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    latest_placement: dict[str, Any] | None = None  # for the follow-up commands the demo prints
    seed: int = 7

    def summary(self) -> dict[str, Any]:
        """What the seed decides, without what the timing decides: the same seed gives the same summary.

        Left out, because threads, processes and the clock decide them: cycle and conflict
        counts, the timeline, and how many Runs were running on the pod deleted midway
        (they end RuntimePodLost instead of Succeeded, so the two are counted together).
        """
        lost = sum(n for (reason, _), n in self.failed_reasons.items() if reason == "RuntimePodLost")
        failed = {f"{reason}: {message}": n for (reason, message), n in sorted(self.failed_reasons.items())
                  if reason != "RuntimePodLost"}
        return {"seed": self.seed, "runs": self.runs, "pods": self.pods,
                "succeeded_or_lost_with_the_deleted_pod": self.phases.get("Succeeded", 0) + lost,
                "failed": failed, "pending": {f"{runtime}: {reason}": n
                                              for (runtime, reason), n in sorted(self.pending_reasons.items())}}

    def summary_digest(self) -> str:
        """A short digest of ``summary()``, printed so two runs can be compared at a glance."""
        text = json.dumps(self.summary(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def run(*, workers: int = 4, conflict_rate: float = 0.02, seed: int = 7, journal: str | None = None,
        scale: float = 1.0, progress: Callable[[Counter[str], int], None] | None = None,
        timeout: float = 120.0, journal_key_file: str | None = None) -> Report:
    """Run the workload to its end; with `journal` (a URL) every event and decision is journaled.

    ``journal_key_file`` keys the journal's chain (else ``$KRUNTIMES_JOURNAL_KEY_FILE``, else plain SHA-256).
    """
    workload = generate(seed, scale)
    config = SchedulerConfig(workers=workers)
    session = _open_journal(journal, config, journal_key_file)
    cache = ClusterCache(config, session.recorder if session else None)
    if session is not None:
        session.attach(cache)
    runs = MemoryApi(conflict_rate=conflict_rate, seed=seed)
    pods = MemoryPods()
    scheduler = Scheduler(cache, runs)
    runs.watchers.append(scheduler.on_run)
    pods.handlers.append(_SchedulerPods(scheduler))
    controller = MemoryController(pods, runs)
    log: deque[str] = deque(maxlen=4)
    with tempfile.TemporaryDirectory(prefix="kruntimes-demo-") as work:
        kubelet = Kubelet(pods, runs, Path(work), default_runs_capacity=config.default_runs_capacity,
                          log_line=log.append, not_ready=_first(NOT_READY), no_runtimed=_first(NO_RUNTIMED))
        started = time.perf_counter()
        watch = demo_watch.Watch(runs, pods, config.default_runs_capacity)
        try:
            kubelet.start()
            scheduler.start(workers)
            _create(workload, scheduler, runs, pods, controller, watch)
            pod_lost = _settle(scheduler, runs, pods, kubelet, controller, watch, progress, timeout)
        finally:
            watch.stop()
            scheduler.stop()
            kubelet.stop()
            runs.close()
            if session is not None:
                session.close()
        seconds = time.perf_counter() - started
    report = _report(workload, runs, scheduler, watch, seconds, pod_lost, list(log))
    report.seed = seed
    report.processes = sum(1 for r in runs.runs() if r.phase in wire.TERMINAL_PHASES and _executed(runs, r))
    if session is not None and journal:
        _from_journal(report, session, journal)
    return report


def _open_journal(journal: str | None, config: SchedulerConfig, key_file: str | None) -> JournalSession | None:
    if not journal:
        return None
    # The demo is one writer on a journal of its own: migrate it, and fail now if the database
    # is away (the live scheduler would schedule on and spool; a demo would only spool).
    Journal.open(journal).close()
    return JournalSession(journal, config, key_file=key_file)


def _create(workload: Workload, scheduler: Scheduler, runs: MemoryApi, pods: MemoryPods,
            controller: MemoryController, watch: demo_watch.Watch) -> None:
    """Create the workload: device classes, then Runtimes (the controller creates their pods), then Runs."""
    for obj in workload.device_classes:  # the scheduler's RuntimeDeviceClass informer (SPEC §7.2)
        scheduler.on_device_class(obj["metadata"]["name"], 1, obj["spec"])
    for obj in workload.runtimes:
        pods.create_runtime(obj)
    controller.sync_all()
    watch.start()
    for obj in workload.runs:
        runs.create(ingest.run_info(obj), obj)


def _from_journal(report: Report, session: JournalSession, journal: str) -> None:
    """What the report says of the journal: where, how many records, and two history answers read from it."""
    # The report is for people: it never holds the password, so no line printed from it can show one.
    report.journal = redact.url(journal)
    report.records = session.recorder.lsn - session.first_lsn + 1
    store = Journal.open(journal)
    try:
        report.history = history_cycles.examples(store)
        report.latest_placement = history_runs.latest_placement(store)
    finally:
        store.close()


class _SchedulerPods:
    """The scheduler's pod informer handler, over `MemoryPods`."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def upsert(self, obj: dict[str, Any], event: str) -> None:
        info = ingest.pod_info(obj)
        if info is not None:
            self._scheduler.on_pod(info, event=event)

    def delete(self, namespace: str, name: str) -> None:
        self._scheduler.on_pod_deleted(namespace, name)


def _first(n: int) -> Callable[[dict[str, Any]], bool]:
    """A kubelet choice: true for the first `n` demo python pods it is asked about (in creation order).

    The kubelet asks `not_ready` about every new pod and `no_runtimed` about the Ready
    ones only, so the stale pods are the two after the three that never become Ready."""
    seen: list[str] = []

    def choose(pod: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        if (meta["namespace"], meta["labels"].get(models.RUNTIME_LABEL)) != ("demo", "python"):
            return False
        seen.append(meta["name"])
        return len(seen) <= n

    return choose


def _settle(scheduler: Scheduler, runs: MemoryApi, pods: MemoryPods, kubelet: Kubelet,
            controller: MemoryController, watch: demo_watch.Watch,
            progress: Callable[[Counter[str], int], None] | None, timeout: float) -> str | None:
    """Wait until nothing is active and nothing moves; midway, delete one busy trainer pod.

    Midway is the first look after a third of the Runs ended at which a trainer Run is
    Running: between one trainer Run ending and the next admitted none may be (a loaded
    machine makes that gap long), and the demo promises a pod lost under a running Run.
    Its Runs may all end on their own just before the pod goes (the first end written
    wins); then, once none of them is active, another busy trainer pod is deleted.
    """
    deadline = time.monotonic() + timeout
    total = len(runs.runs())
    lost: str | None = None  # the trainer pod deleted last
    confirmed = midway = False
    quiet = last_writes = 0
    while time.monotonic() < deadline:
        phases = Counter(r.phase for r in runs.runs())
        if progress is not None:
            progress(phases, total)
        midway = midway or phases["Succeeded"] + phases["Failed"] >= total // 3
        if midway and not confirmed:
            outcome = _lost_a_run(runs, lost) if lost is not None else None
            confirmed = outcome is True
            if outcome is None:  # none deleted yet, or every Run of it ended on its own before it went
                lost = _delete_busy_pod(runs, pods) or lost
        # Settled: nothing active, nothing queued or being planned, nothing written for a
        # while. Keys waiting out a conflict backoff are left: their Runs have ended.
        active = phases["Scheduled"] + phases["Running"]
        queue = scheduler.queue
        writes = runs.writes + pods.writes
        idle = (len(queue) == 0 and queue.processing_count() == 0 and runs.idle() and pods.idle()
                and not kubelet.busy() and writes == last_writes)
        last_writes = writes
        quiet = quiet + 1 if active == 0 and idle else 0
        if quiet >= 5:
            break
        time.sleep(0.1)
    if progress is not None:
        progress(Counter(r.phase for r in runs.runs()), total)
    if midway and lost is None:
        return "none (no trainer Run was running)"
    return lost


def _delete_busy_pod(runs: MemoryApi, pods: MemoryPods) -> str | None:
    """Delete (grace period 0) the trainer pod with the most Running Runs, as a node failure would.

    None, deleting nothing, while no trainer Run is Running."""
    busy = Counter(r.pod_name for r in runs.runs() if r.phase == "Running" and r.runtime == "trainer")
    if not busy:
        return None
    name = busy.most_common(1)[0][0]
    pods.delete("demo", name)
    return f"demo/{name}"


def _lost_a_run(runs: MemoryApi, pod: str) -> bool | None:
    """Whether a Run of the deleted `pod` ("demo/<name>") ended RuntimePodLost: False while
    some of its Runs are still active, None once none is and none was lost."""
    namespace, name = pod.split("/", 1)
    on_it = [r for r in runs.runs() if r.namespace == namespace and r.pod_name == name]
    if any(r.active for r in on_it):
        return False
    return True if any(r.phase == "Failed" and _failure(runs, r)[0] == "RuntimePodLost" for r in on_it) else None


def _executed(runs: MemoryApi, run: RunInfo) -> bool:
    body = runs.status(run.key) or {}
    return any(c.get("type") == "Admitted" and c.get("status") == "True" for c in body.get("conditions", []))


def _report(w: Workload, runs: MemoryApi, scheduler: Scheduler, watch: demo_watch.Watch, seconds: float,
            pod_lost: str | None, pod_log: list[str]) -> Report:
    final = runs.runs()
    phases = Counter(r.phase for r in final)
    pending = Counter((f"{r.namespace}/{r.runtime}", r.pending_message or NOT_YET_EVALUATED)
                      for r in final if r.phase == "Pending")
    failed = Counter(_failure(runs, r) for r in final if r.phase == "Failed")
    wakeups = {s.labels["source"]: int(s.value) for m in scheduler.metrics.wakeups.collect()
               for s in m.samples if s.name.endswith("_total")}
    return Report(runs=len(final), pods=sum(r["spec"]["replicas"] for r in w.runtimes), phases=phases, pending_reasons=pending, failed_reasons=failed,
                  peak_utilisation=watch.peak, timeline=watch.timeline, overcommitted=watch.overcommitted,
                  results=scheduler.results, cycles=sum(scheduler.results.values()), seconds=seconds,
                  injected_conflicts=runs.injected_conflicts, wakeups=wakeups, processes=0, pod_lost=pod_lost,
                  pod_log=pod_log)


def _failure(runs: MemoryApi, run: RunInfo) -> tuple[str, str]:
    """(reason, first line of the message) of a Failed Run's Completed condition."""
    body = runs.status(run.key) or {}
    for c in body.get("conditions", []):
        if c.get("type") == "Completed":
            return str(c.get("reason")), str(c.get("message")).split("\n")[0].split("; last output")[0]
    return "Failed", "failed"
