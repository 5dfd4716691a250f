"""Scheduler metrics (SPEC §3.8), with every label value from a bounded, declared set.

No label ever carries a runtime, Run, pod, namespace, selector or resource name:
the values below, and the Filter plugins' declared reasons, are the only ones any
code path can produce, and a test enumerates them. The helpers refuse any other
value with `UndeclaredLabelValue`, an ordinary check rather than an `assert`, so
the bound holds under `python -O` too.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

RESULTS = ("scheduled", "unschedulable", "invalid", "conflict", "error")
STAGES = ("reserve", "bind")
SOURCES = ("runtime_pod", "capacity_released", "affinity_target", "device_class")
# SPEC §7.8: selector verdicts evaluated by the engine (memo misses), and searches by how they ended.
SELECTOR_RESULTS = ("match", "no_match", "error")
SEARCH_RESULTS = ("allocated", "exhausted", "limit", "memoised")
# Why a Pending Run waits (issue 27): for a cycle (waiting, in backoff or in one), or parked after
# an unschedulable cycle until an event can change its answer.
PENDING_STATES = ("queued", "unschedulable")
# The part of `unschedulable` no Runtime Pod could ever fit as the pods are: its own gauge, not a
# third state, so that summing the states still counts each Pending Run once.
UNFITTABLE = "unfittable"


class UndeclaredLabelValue(ValueError):
    """A metric label value outside its declared set: a programming error, never user data."""

    def __init__(self, label: str, value: object, allowed: tuple[str, ...]) -> None:
        # The value is not echoed: it might carry exactly the user data the bound keeps out.
        super().__init__(f"metric label {label!r} got a value outside its declared set {allowed}")
        self.label = label


def _declared(label: str, value: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise UndeclaredLabelValue(label, value, allowed)
    return value


class _PendingRuns:
    """`kruntimes_scheduler_pending_runs{state}` and `..._unfittable_runs`, counted from the cache when scraped.

    Read at scrape time rather than kept up to date by each add, park and wake: the cache's
    indexes are the one truth, so the gauge cannot drift from them."""

    NAME = "kruntimes_scheduler_pending_runs"
    HELP = ("Pending Runs this scheduler knows, by state: queued (waiting for a cycle, in backoff or in one) or "
            "unschedulable (parked after an unschedulable cycle). A standby scheduler reports zero.")

    UNFITTABLE_NAME = "kruntimes_scheduler_unfittable_runs"
    UNFITTABLE_HELP = ("Unschedulable Runs that no Runtime Pod could ever fit as the pods are (their request is "
                       "above every pod's capacity): released capacity cannot help them, only a pod change.")

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[str, int]] | None = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.NAME, self.HELP, labels=["state"])
        yield GaugeMetricFamily(self.UNFITTABLE_NAME, self.UNFITTABLE_HELP)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self.source() if self.source is not None else {}
        for key in sorted(counts):
            _declared("state", key, (*PENDING_STATES, UNFITTABLE))
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["state"])
        for state in PENDING_STATES:
            family.add_metric([state], counts.get(state, 0))
        yield family
        yield GaugeMetricFamily(self.UNFITTABLE_NAME, self.UNFITTABLE_HELP, value=counts.get(UNFITTABLE, 0))


class _DeviceWork:
    """The device metrics (SPEC §7.8), counted per cycle into plain integers and handed to their
    prometheus_client objects when scraped: a cycle of a claim takes one uncontended lock rather than
    a histogram observation and a counter increment per result. The objects are made here, not in the
    registry, so the exposition (names, labels, values, creation times) is theirs, as before."""

    def __init__(self) -> None:
        self.evaluations = Counter(
            "kruntimes_scheduler_device_selector_evaluations",
            "CEL selector evaluations by verdict (memoised verdicts are not evaluated again).",
            ["result"], registry=None)
        self.steps = Histogram(
            "kruntimes_scheduler_device_search_steps", "Device search steps charged in one cycle of a Run with devices.",
            buckets=(0, 1, 4, 16, 64, 256, 1024, 4096, 10_000, 50_000), registry=None)
        self.searches = Counter(
            "kruntimes_scheduler_device_searches", "Device searches of Runs with devices, by how they ended.",
            ["result"], registry=None)
        self._lock = threading.Lock()
        self._steps: dict[int, int] = {}  # steps charged in a cycle → cycles since the last scrape
        self._searches = [0, 0, 0, 0]  # since the last scrape, in SEARCH_RESULTS order
        self._evaluations: dict[str, int] = {}  # verdict → evaluations since the last scrape
        # The labelled children, made when a value first counts (in name order within a cycle), as
        # before: the exposition lists them in that order.
        self._search_children: list[Any] = [None] * len(SEARCH_RESULTS)
        self._evaluation_children: dict[str, Any] = {}

    def count(self, steps: int, searches: tuple[int, int, int, int], now: Mapping[str, int],
              then: Mapping[str, int]) -> None:
        with self._lock:
            self._steps[steps] = self._steps.get(steps, 0) + 1
            counted, children = self._searches, self._search_children
            for i, n in enumerate(searches):
                if n:
                    if children[i] is None:
                        children[i] = self.searches.labels(result=SEARCH_RESULTS[i])
                    counted[i] += n
            if now != then:  # the engine evaluated (most cycles recall every verdict)
                self._count_evaluations(now, then)

    def _count_evaluations(self, now: Mapping[str, int], then: Mapping[str, int]) -> None:
        evaluations, known = self._evaluations, self._evaluation_children
        for verdict in sorted(v for v, n in now.items() if n != then.get(v, 0) and v not in known):
            known[verdict] = self.evaluations.labels(result=_declared("result", verdict, SELECTOR_RESULTS))
        for verdict, n in now.items():
            n -= then.get(verdict, 0)
            if n:
                evaluations[verdict] = evaluations.get(verdict, 0) + n

    def _flush(self) -> None:
        with self._lock:
            steps, self._steps = self._steps, {}
            searches, self._searches = self._searches, [0, 0, 0, 0]
            evaluations, self._evaluations = self._evaluations, {}
        for n, cycles in sorted(steps.items()):
            for _ in range(cycles):
                self.steps.observe(n)
        for child, n in zip(self._search_children, searches):
            if n:
                child.inc(n)
        for verdict, n in evaluations.items():
            self._evaluation_children[verdict].inc(n)

    def describe(self) -> Iterator[Any]:
        for metric in (self.evaluations, self.steps, self.searches):
            yield from metric.describe()

    def collect(self) -> Iterator[Any]:
        self._flush()
        for metric in (self.evaluations, self.steps, self.searches):
            yield from metric.collect()


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.cycle_duration = Histogram(
            "kruntimes_scheduler_scheduling_cycle_duration_seconds",
            "Time from dequeue to the end of one scheduling cycle: plan, reserve and hand the write over "
            "(binder processes send it; with an inline binder, until its answer).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry)
        self.queue_duration = Histogram(
            "kruntimes_scheduler_queue_duration_seconds",
            "Time a Run key waited in the work queue before the scheduling loop took it.",
            registry=self.registry)
        self.results = Counter(
            "kruntimes_scheduler_schedule_results", "Scheduling cycles by result.",
            ["result"], registry=self.registry)
        self.filter_rejections = Counter(
            "kruntimes_scheduler_filter_rejections",
            "Runtime Pod evaluations rejected by a Filter plugin.",
            ["plugin", "reason"], registry=self.registry)
        self.reservation_conflicts = Counter(
            "kruntimes_scheduler_reservation_conflicts",
            "Reserve re-checks that found the pod full, and binds that hit a version conflict.",
            ["stage"], registry=self.registry)
        self.wakeups = Counter(
            "kruntimes_scheduler_pending_run_wakeups",
            "Pending Run keys emitted by wake-ups: runtime pod, capacity release and affinity target events.",
            ["source"], registry=self.registry)

        self._device_work = _DeviceWork()
        self.registry.register(self._device_work)
        self.device_selector_evaluations = self._device_work.evaluations
        self.device_search_steps = self._device_work.steps
        self.device_searches = self._device_work.searches
        self._pending = _PendingRuns()
        self.registry.register(self._pending)

    def count_pending(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Read `kruntimes_scheduler_pending_runs` from `source` (the cache's `pending_counts`) at each scrape."""
        self._pending.source = source

    def device_cycle(self, steps: int, searches: tuple[int, int, int, int], now: Mapping[str, int],
                     then: Mapping[str, int]) -> None:
        """One cycle's device work (SPEC §7.8): steps charged, searches by result (allocated, exhausted,
        limit, memoised) and the engine's evaluations by verdict, `now` against `then` (the cycle's start)."""
        self._device_work.count(steps, searches, now, then)

    def result(self, result: str) -> None:
        self.results.labels(result=_declared("result", result, RESULTS)).inc()

    def conflict(self, stage: str) -> None:
        self.reservation_conflicts.labels(stage=_declared("stage", stage, STAGES)).inc()

    def wakeup(self, source: str) -> None:
        self.wakeups.labels(source=_declared("source", source, SOURCES)).inc()
