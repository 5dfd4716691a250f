"""`kruntimes demo`: the whole system, end to end, on a generated workload, without a cluster.

Runtimes are created; the Runtime controller creates their Runtime Pods; the demo
plays kubelet (`memory.cluster.Kubelet`): it marks the pods Ready and starts one
runtimed per pod; the scheduler places the Runs (journaled); each runtimed admits
the Runs of its pod against the pod's capacity, claims them (`Running`), executes
them as real processes (no shell) and writes their end (Succeeded or Failed), which
frees the capacity that wakes the Pending Runs. Midway, one busy trainer pod is
deleted: its runtimed ends its Runs `RuntimePodLost` and the controller replaces it.

Runs and pods live in `MemoryApi` and `MemoryPods`, which answer like an API server
(resourceVersion-guarded writes, injected 409 conflicts on scheduler and runtimed
writes alike, watch delivery in write order). Everything else is the real thing:
work queue, planner, assumed cache, journal; reconcile and apply; admission guard,
lifecycle and executor.

The workload is seeded and has every shape a platform team meets: several Runtimes
and a second namespace, pods that never become Ready or whose runtimed never starts
(stale), affinity cohorts, anti-affinity spreading, over-subscribed GPUs and
licences, Runs asking for more than any pod has, invalid Runs, and tasks that fail;
and a GPU Runtime whose pods publish five devices each and whose Runs claim them by
RuntimeDeviceClass, CEL selector and constraint (SPEC §7): one A100, two GPUs on one
NUMA node, an A100 if one is free and else any GPU, or a 10Gi slice of a shared GPU.
Most tasks are `true` or `sleep`, so real processes stay cheap on a small machine;
about eighty start a Python interpreter.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from kruntimes import demo_watch, wire
from kruntimes.api import ingest, models
from kruntimes.controller.reading import runtime_view
from kruntimes.controller.reconcile import PodDefaults, pod_body
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

TOPOLOGY = models.RUNTIME_POD_TOPOLOGY
PY = sys.executable
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)  # the time of `Workload.pods`' heartbeats

#: (namespace, runtime, replicas, capacity); python's first 3 pods never become Ready
#: and its next 2 never start runtimed (their heartbeat stays missing: stale).
RUNTIMES = (
    ("demo", "python", 100, {"runs": "40"}),
    ("demo", "trainer", 60, {"runs": "8", "example.com/gpu": "2"}),
    ("demo", "batch", 50, {"runs": "40", "example.com/license": "1"}),
    ("team-b", "python", 10, {"runs": "24"}),
)
NOT_READY, NO_RUNTIMED = 3, 2

#: The GPU Runtime (SPEC §7.1): each pod publishes four GPUs, two A100 and two T4, one of each per NUMA
#: node, and one A100 shared in slices of its 40Gi of memory (a multi-allocatable device).
GPU_DRIVER = "gpu.example.com"
GPU_RUNTIME = ("demo", "cuda", 8, {"runs": "4"})
GPU_DEVICES: dict[str, Any] = {
    "driver": GPU_DRIVER, "env": {"GPU_MODEL": "model"},
    "devices": [*({"name": f"gpu-{i}", "attributes": {"model": {"string": model}, "numa": {"int": numa}}}
                  for i, (model, numa) in enumerate((("a100", 0), ("t4", 0), ("a100", 1), ("t4", 1)))),
                {"name": "shared", "attributes": {"model": {"string": "a100-shared"}, "numa": {"int": 1}},
                 "allowMultipleAllocations": True, "capacity": {f"{GPU_DRIVER}/memory": {"value": "40Gi"}}}]}
GPU_CLASS: dict[str, Any] = {
    "apiVersion": models.API_VERSION, "kind": "RuntimeDeviceClass", "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]}}
_A100 = {"cel": {"expression": f'device.attributes["{GPU_DRIVER}"].model == "a100"'}}
#: What the GPU Runs claim, in turn (SPEC §7.3).
GPU_CLAIMS: tuple[dict[str, Any], ...] = (
    {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "selectors": [_A100]}}]},
    {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 2}}],
     "constraints": [{"requests": ["gpu"], "matchAttribute": f"{GPU_DRIVER}/numa"}]},
    {"requests": [{"name": "gpu", "firstAvailable": [{"name": "a100", "deviceClassName": "gpu", "selectors": [_A100]},
                                                      {"name": "any", "deviceClassName": "gpu"}]}]},
    {"requests": [{"name": "slice", "exactly": {"deviceClassName": "gpu", "capacity": {
        "requests": {f"{GPU_DRIVER}/memory": "10Gi"}}}}]},
)


@dataclass
class Workload:
    runtimes: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    device_classes: list[dict[str, Any]] = field(default_factory=list)  # cluster-scoped RuntimeDeviceClasses

    @property
    def pods(self) -> list[dict[str, Any]]:
        """The Runtime Pods as the controller creates them and the demo's kubelet starts them, at `NOW`.

        A static picture for tests and benchmarks that need the demo's pods without running
        it: names `<runtime>-<i>` instead of generated ones, heartbeats 5 s old, and the
        python Runtime's first pods not Ready or stale as the demo's kubelet leaves them."""
        pods: list[dict[str, Any]] = []
        for obj in self.runtimes:
            runtime = runtime_view({**obj, "metadata": {**obj["metadata"], "uid": f"uid-{obj['metadata']['name']}"}})
            assert runtime.capacity is not None
            chosen = (runtime.namespace, runtime.name) == ("demo", "python")
            for i in range(runtime.replicas):
                body = pod_body(runtime, runtime.capacity, PodDefaults())
                meta = body["metadata"]
                meta.update(name=f"{runtime.name}-{i:03d}", uid=f"{runtime.namespace}-{runtime.name}-{i}")
                stale = chosen and NOT_READY <= i < NOT_READY + NO_RUNTIMED
                beat = NOW - timedelta(seconds=600 if stale else 5)
                meta["annotations"][models.HEARTBEAT_ANNOTATION] = beat.isoformat().replace("+00:00", "Z")
                ready = not (chosen and i < NOT_READY)
                body["status"] = {"phase": "Running",
                                  "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
                pods.append(body)
        return pods


def _runtime(ns: str, name: str, replicas: int, capacity: dict[str, str],
             devices: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"apiVersion": models.API_VERSION, "kind": "Runtime", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "capacity": {"resources": capacity},
                     "template": {"spec": {"containers": [{"name": "runtimed", "command": ["kruntimes", "runtimed"]}]}}}}
    if devices is not None:
        body["spec"]["devices"] = devices
    return body


def _term(labels: dict[str, str]) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": TOPOLOGY}


def _run(ns: str, name: str, runtime: str, args: list[str], *, labels: dict[str, str] | None = None,
         requests: dict[str, Any] | None = None, affinity: dict[str, Any] | None = None,
         devices: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtime": runtime, "mode": {"task": {"args": args}}}
    if devices is not None:
        spec["devices"] = devices
    if requests is not None:
        spec["resources"] = {"requests": requests}
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": models.API_VERSION, "kind": "Run",
            "metadata": {"name": name, "namespace": ns, "uid": f"{ns}-{name}", "labels": labels or {}},
            "spec": spec}


def _count(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def generate(seed: int = 7, scale: float = 1.0) -> Workload:
    """The Runtimes and Runs; `scale` shrinks every count (tests use a tenth)."""
    rng = random.Random(seed)
    w = Workload(runtimes=[_runtime(ns, name, _count(replicas, scale) if name != "python" or ns != "demo"
                                    else max(NOT_READY + NO_RUNTIMED + 5, _count(replicas, scale)), capacity)
                           for ns, name, replicas, capacity in RUNTIMES])
    ns, name, replicas, capacity = GPU_RUNTIME
    w.runtimes.append(_runtime(ns, name, _count(replicas, scale), capacity, GPU_DEVICES))
    w.device_classes.append(GPU_CLASS)
    # python: instant tasks, 60 affinity cohorts of 5, 120 Runs spread one per pod.
    for i in range(_count(2700, scale)):
        w.runs.append(_run("demo", f"py-{i:04d}", "python", ["true"], labels={"app": "etl"}))
    for c in range(_count(60, scale)):
        cohort = {"cohort": f"c{c:02d}"}
        for m in range(5):
            w.runs.append(_run("demo", f"cohort-{c:02d}-{m}", "python", ["true"], labels=cohort,
                               affinity={"runAffinity": {"required": [_term(cohort)]}}))
    for i in range(_count(120, scale)):
        spread = {"spread": "web"}
        w.runs.append(_run("demo", f"web-{i:03d}", "python", ["sleep", "0.3"], labels=spread,
                           affinity={"runAntiAffinity": {"required": [_term(spread)]},
                                     "runAffinity": {"preferred": [{"weight": 50, "term": _term({"app": "etl"})}]}}))
    # trainer: GPUs are over-subscribed (120 GPUs, 188 one-GPU Runs, 12 two-GPU Runs, 3 that never fit).
    for i in range(_count(200, scale)):
        gpus = 2 if i % 17 == 0 else 1
        args = [PY, "-c", "import time; print('epoch 1 done'); time.sleep(0.5)"] if i % 4 == 0 else ["sleep", "0.8"]
        w.runs.append(_run("demo", f"train-{i:03d}", "trainer", args,
                           requests={"runs": "1", "example.com/gpu": str(gpus)}))
    for i in range(3):
        w.runs.append(_run("demo", f"train-huge-{i}", "trainer", ["true"], requests={"example.com/gpu": "4"}))
    # gpu: 48 Runs claim devices (SPEC §7), more than the 32 GPUs at once; each tells what it got.
    for i in range(_count(48, scale)):
        args = ([PY, "-c", "import os; print('devices', os.environ['KRUNTIMES_DEVICES'])"] if i % 8 == 0
                else ["sleep", "0.3"])
        w.runs.append(_run("demo", f"gpu-{i:02d}", name, args, devices=GPU_CLAIMS[i % len(GPU_CLAIMS)]))
    # batch: 1,500 tasks, 60 of which need one of 50 licences; 30 fail, saying why.
    for i in range(_count(1500, scale)):
        requests = {"example.com/license": "1"} if i % 25 == 0 else None
        args = ["sleep", "0.5" if requests else "0.1"]
        if i % 50 == 7:
            args = [PY, "-c", "import sys; print('input file batch.csv not found'); sys.exit(3)"]
        w.runs.append(_run("demo", f"batch-{i:04d}", "batch", args, requests=requests))
    # team-b: its own namespace and pods; never placed on demo's pods.
    for i in range(_count(220, scale)):
        w.runs.append(_run("team-b", f"nb-{i:03d}", "python", ["sleep", "0.2"],
                           requests={"runs": str(rng.choice([1, 1, 2]))}))
    # A few mistakes a user makes; each must end Failed with an actionable reason.
    bad = [{"requests": {"runs": "500m"}}, {"requests": {"bad name!": "1"}},
           {"affinity": {"runAffinity": {"preferred": [{"weight": 0, "term": _term({"a": "b"})}]}}},
           {"affinity": {"runAffinity": {"required": [{"labelSelector": {"matchExpressions": [
               {"key": "a", "operator": "Near", "values": ["b"]}]}, "topologyKey": TOPOLOGY}]}}}]
    for i in range(20):
        w.runs.append(_run("demo", f"typo-{i:02d}", "python", ["true"], **bad[i % len(bad)]))
    rng.shuffle(w.runs)
    return w


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
    if journal:
        # The demo is one writer on a journal of its own: migrate it, and fail now if the database
        # is away (the live scheduler would schedule on and spool; a demo would only spool).
        Journal.open(journal).close()
    session = JournalSession(journal, config, key_file=journal_key_file) if journal else None
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
            for obj in workload.device_classes:  # the scheduler's RuntimeDeviceClass informer (SPEC §7.2)
                scheduler.on_device_class(obj["metadata"]["name"], 1, obj["spec"])
            for obj in workload.runtimes:
                pods.create_runtime(obj)
            controller.sync_all()
            watch.start()
            for obj in workload.runs:
                runs.create(ingest.run_info(obj), obj)
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
    if session is not None:
        # The report is for people: it never holds the password, so no line printed from it can show one.
        report.journal = redact.url(journal)
        report.records = session.recorder.lsn - session.first_lsn + 1
        store = Journal.open(journal)
        try:
            report.history = history_cycles.examples(store)
            report.latest_placement = history_runs.latest_placement(store)
        finally:
            store.close()
    return report


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
    """Wait until nothing is active and nothing moves; midway, delete one busy trainer pod."""
    deadline = time.monotonic() + timeout
    total = len(runs.runs())
    lost: str | None = None
    quiet = last_writes = 0
    while time.monotonic() < deadline:
        phases = Counter(r.phase for r in runs.runs())
        if progress is not None:
            progress(phases, total)
        if lost is None and phases["Succeeded"] + phases["Failed"] >= total // 3:
            lost = _delete_busy_pod(runs, pods)
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
    return lost


def _delete_busy_pod(runs: MemoryApi, pods: MemoryPods) -> str:
    """Delete (grace period 0) the trainer pod with the most Running Runs, as a node failure would."""
    busy = Counter(r.pod_name for r in runs.runs() if r.phase == "Running" and r.runtime == "trainer")
    name = busy.most_common(1)[0][0] if busy else ""
    if name:
        pods.delete("demo", name)
    return f"demo/{name}" if name else "none (no trainer Run was running)"


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
