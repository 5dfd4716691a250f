"""Builders for the scheduling core's tests: projections, a cache, one planned cycle, a loop harness.

Everything here is plain and deterministic: a fixed `NOW`, uids derived from names,
inline watch delivery and a hand-advanced queue clock, so a test reads as the rule
it checks. Nothing here imports the API layer (and so the Kubernetes client), which
keeps the determinism subprocesses fast.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping

from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.cycle import IN_FLIGHT
from kruntimes.scheduler.loop import Scheduler
from kruntimes.scheduler.metrics import SchedulerMetrics
from kruntimes.scheduler.outcome import CycleOutcome
from kruntimes.scheduler.projection import (NO_AFFINITY, Affinity, PodInfo, Requirement, RunInfo, Selector, Term,
                                            WeightedTerm)
from kruntimes.scheduler.queue import WorkQueue

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
_FRESH = object()


def pod(name: str, *, ns: str = "ns", runtime: str = "rt", uid: str | None = None, ready: bool = True,
        terminating: bool = False, heartbeat: Any = _FRESH, capacity: Mapping[str, int] | None = None,
        capacity_problem: str | None = None) -> PodInfo:
    """A Runtime Pod; by default ready, fresh (heartbeat == NOW) and declaring `runs: 4`."""
    return PodInfo(namespace=ns, name=name, uid=uid or f"uid-{ns}-{name}", runtime=runtime, ready=ready,
                   terminating=terminating, heartbeat=NOW if heartbeat is _FRESH else heartbeat,
                   capacity=tuple(sorted((capacity if capacity is not None else {"runs": 4}).items())),
                   capacity_problem=capacity_problem)


def run(name: str, *, ns: str = "ns", runtime: str = "rt", uid: str | None = None,
        labels: Mapping[str, str] | None = None, requests: Mapping[str, Any] | None = None,
        affinity: Affinity = NO_AFFINITY, workspace: str | None = None, phase: str = "Pending",
        on: str | None = None, pod_uid: str | None = None, released: bool = False,
        problems: Iterable[str] = (), raw_requests: tuple[tuple[str, Any], ...] | None = None) -> RunInfo:
    """A Run; `on=` assigns it to a pod (by name; give `pod_uid` to assign by UID too)."""
    if raw_requests is None:
        raw_requests = tuple(sorted((requests if requests is not None else {"runs": 1}).items()))
    return RunInfo(namespace=ns, name=name, uid=uid or f"uid-{ns}-{name}", runtime=runtime, resource_version="1",
                   labels=tuple(sorted((labels or {}).items())), requests=raw_requests, affinity=affinity,
                   workspace=workspace, phase=phase, pod_name=on, pod_uid=pod_uid, released=released,
                   problems=tuple(problems))


def active(name: str, on: str, *, ns: str = "ns", phase: str = "Running", **kw: Any) -> RunInfo:
    """An active Run assigned (by name and the default pod UID) to pod `on`."""
    kw.setdefault("pod_uid", f"uid-{ns}-{on}")
    return run(name, ns=ns, phase=phase, on=on, **kw)


def sel(**labels: str) -> Selector:
    return Selector(match_labels=tuple(sorted(labels.items())))


def expr(key: str, op: str, *values: str) -> Requirement:
    return Requirement(key=key, operator=op, values=tuple(values))


def term(selector: Selector | None) -> Term:
    return Term(selector)


def weighted(weight: int, selector: Selector | None) -> WeightedTerm:
    return WeightedTerm(weight, Term(selector))


def affinity(*, required: Iterable[Selector | None] = (), anti: Iterable[Selector | None] = (),
             preferred: Iterable[tuple[int, Selector | None]] = (),
             preferred_anti: Iterable[tuple[int, Selector | None]] = ()) -> Affinity:
    return Affinity(required=tuple(Term(s) for s in required), required_anti=tuple(Term(s) for s in anti),
                    preferred=tuple(WeightedTerm(w, Term(s)) for w, s in preferred),
                    preferred_anti=tuple(WeightedTerm(w, Term(s)) for w, s in preferred_anti))


def cache_of(pods: Iterable[PodInfo] = (), runs: Iterable[RunInfo] = (),
             config: SchedulerConfig | None = None) -> ClusterCache:
    cache = ClusterCache(config or SchedulerConfig())
    for p in pods:
        cache.upsert_pod(p, now=NOW)
    for r in runs:
        cache.upsert_run(r)
    return cache


def assume(cache: ClusterCache, r: RunInfo, pod_name: str) -> None:
    """Put `r` (Pending) into the cache and assume it onto `pod_name`."""
    cache.upsert_run(r)
    assert cache.reserve(r, pod_name), f"test setup: {r.name} does not fit {pod_name}"


def plan(cache: ClusterCache, r: RunInfo, *, now: datetime = NOW, config: SchedulerConfig | None = None,
         registry: Mapping[str, Any] | None = None) -> CycleOutcome:
    """Plan one cycle for `r` (added to the cache first if it is not there)."""
    if cache.run(r.key) is None:
        cache.upsert_run(r)
    config = config or cache.config
    with cache.lock:
        return Planner(config, registry).plan(cache.snapshot(r, now, config))


def verdicts(outcome: CycleOutcome) -> dict[str, str | None]:
    """Pod name -> the rejection reason, or None when feasible."""
    return {p: (r[1] if r else None) for p, r in zip(outcome.pods, outcome.rejections)}


def scores_of(outcome: CycleOutcome, plugin: str) -> tuple[dict[str, Any], dict[str, int]]:
    """(raw, normalised) score of `plugin` per feasible pod."""
    s = next(s for s in outcome.scores if s.plugin == plugin)
    return dict(zip(outcome.feasible, s.raw)), dict(zip(outcome.feasible, s.normalized))


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class Harness:
    """A single-threaded scheduler over a MemoryApi with inline delivery and a hand-driven queue.

    `deliver=False` detaches the informer: binds land in the API but the cache only
    sees them on `sync()`, which models informer lag exactly.
    """

    def __init__(self, *, config: SchedulerConfig | None = None, planner: Planner | None = None,
                 api: MemoryApi | None = None, deliver: bool = True, now: datetime = NOW) -> None:
        self.now = now
        self.cache = ClusterCache(config or SchedulerConfig())
        self.api = api or MemoryApi()
        self.qclock = FakeClock()
        self.metrics = SchedulerMetrics()
        self.queue: WorkQueue = WorkQueue(clock=self.qclock)
        self.scheduler = Scheduler(self.cache, self.api, clock=lambda: self.now, metrics=self.metrics,
                                   queue=self.queue, planner=planner)
        if deliver:
            self.api.watchers.append(self.scheduler.on_run)

    # -- events ------------------------------------------------------------------------
    def add_pods(self, *pods: PodInfo) -> None:
        for p in pods:
            self.scheduler.on_pod(p, event="ADDED")

    def create(self, *runs: RunInfo) -> None:
        for r in runs:
            self.api.create(r)

    def sync(self) -> None:
        """Deliver the API's current state of every Run to the scheduler (informer catch-up)."""
        for r in self.api.runs():
            self.scheduler.on_run(r)

    # -- the queue -----------------------------------------------------------------------
    def take_all(self) -> list[tuple[str, str]]:
        """Every waiting key, in queue order, without processing (for wake-up tests)."""
        keys = []
        while (key := self.queue.get(timeout=0)) is not None:
            keys.append(key)
            self.queue.done(key)
            self.queue.forget(key)
        return keys

    def step(self) -> tuple[tuple[str, str], str] | None:
        key = self.queue.get(timeout=0)
        if key is None:
            return None
        result = None
        try:
            result = self.scheduler.process(key, self.queue)
            return key, result
        finally:
            if result != IN_FLIGHT:  # else the answer marks it done
                self.queue.done(key)

    def drain(self, *, retries: bool = False, limit: int = 10_000) -> list[tuple[tuple[str, str], str]]:
        """Process keys until the queue is empty; with `retries`, also let backoff delays pass."""
        results = []
        for _ in range(limit):
            item = self.step()
            if item is None:
                if retries and self.queue.delayed_count():
                    self.qclock.now += 10_000
                    continue
                return results
            results.append(item)
        raise AssertionError("the queue did not drain")

    # -- reading -----------------------------------------------------------------------------
    def phase(self, name: str, ns: str = "ns") -> str:
        r = self.api.get((ns, name))
        assert r is not None
        return r.phase

    def placement(self, name: str, ns: str = "ns") -> str | None:
        r = self.api.get((ns, name))
        assert r is not None
        return r.pod_name

    def sample(self, metric: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(metric, labels) or 0.0


# -- a scenario generator shared by the determinism property and its subprocesses ----------

def random_scenario(seed: int) -> tuple[list[PodInfo], list[RunInfo]]:
    """A mixed workload with many ties: several resources, labels, affinity and anti-affinity."""
    rng = random.Random(seed)
    pods = []
    for runtime in ("rt-a", "rt-b"):
        for i in range(rng.randint(2, 6)):
            cap = {"runs": rng.randint(2, 6)}
            if rng.random() < 0.6:
                cap["example.com/gpu"] = rng.randint(0, 3)
            if rng.random() < 0.3:
                cap["mem"] = rng.randint(1, 8)
            pods.append(pod(f"{runtime}-p{i}", runtime=runtime, capacity=cap,
                            ready=rng.random() < 0.9,
                            heartbeat=NOW - timedelta(seconds=rng.choice([0, 10, 30, 31]))))
    teams = ["red", "blue", "green"]
    runs = []
    for j in range(rng.randint(5, 30)):
        labels = {"team": rng.choice(teams)}
        if rng.random() < 0.3:
            labels["tier"] = rng.choice(["x", "y"])
        requests = {"runs": rng.choice([1, 1, 1, 2])}
        if rng.random() < 0.3:
            requests["example.com/gpu"] = 1
        if rng.random() < 0.15:
            requests["mem"] = rng.randint(1, 4)
        aff = NO_AFFINITY
        roll = rng.random()
        if roll < 0.15:
            aff = affinity(required=[sel(team=labels["team"])])
        elif roll < 0.3:
            aff = affinity(anti=[sel(team=rng.choice(teams))])
        elif roll < 0.5:
            aff = affinity(preferred=[(rng.randint(1, 100), sel(team=rng.choice(teams)))],
                           preferred_anti=[(rng.randint(1, 100), Selector(match_expressions=(
                               expr("tier", "In", "x", "y"),)))])
        runs.append(run(f"r{j:03d}", runtime=rng.choice(["rt-a", "rt-b"]), labels=labels, requests=requests,
                        affinity=aff, workspace=rng.choice([None, None, None, "ws1", "ws2"])))
    return pods, runs


def single_threaded_placements(pods: list[PodInfo], runs: list[RunInfo], passes: int = 3) -> dict[str, Any]:
    """Schedule with `Scheduler.process` on keys in sorted order, inline delivery; return the outcome."""
    h = Harness()
    h.add_pods(*pods)
    h.create(*runs)
    keys = sorted(r.key for r in runs)
    for _ in range(passes):
        for key in keys:
            current = h.api.get(key)
            if current is not None and current.phase == "Pending":
                h.scheduler.process(key)
    return {f"{r.namespace}/{r.name}": [r.phase, r.pod_name, r.pending_message] for r in h.api.runs()}


def with_phase(r: RunInfo, phase: str, **kw: Any) -> RunInfo:
    return replace(r, phase=phase, **kw)
