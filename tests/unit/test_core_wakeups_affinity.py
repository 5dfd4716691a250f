"""Wake-ups for Runs waiting for their cohort (SPEC §3.1 `affinity_target`, added 2026-12-01).

A Pending Run that some pod rejected for unsatisfied required affinity is parked
in a per-namespace index with its required terms. A Run that becomes an active or
assumed target on a pod wakes the waiters it satisfies (matches all their required
terms, SPEC §3.3) and whose runtime that pod belongs to; every key emitted counts
once in `kruntimes_scheduler_pending_run_wakeups_total{source="affinity_target"}`.
Tested through the loop and its queue.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import pytest

from kruntimes.scheduler import interface
from kruntimes.scheduler.config import ConfigError, SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.plugins import affinity as af
from kruntimes.scheduler.projection import RunInfo
from tests.builders import Harness, affinity, pod, run, sel

WAKEUPS = "kruntimes_scheduler_pending_run_wakeups_total"
NEEDS_DB = affinity(required=[sel(app="db")])
NEEDS_DB_AND_SCAN = affinity(required=[sel(app="db"), sel(service="scan")])


def _waiting(*waiters: RunInfo) -> Harness:
    """Pods p, q (ns/rt), o (ns/rt2), p (ns2/rt); `waiters` planned until parked; the queue empty."""
    h = Harness()
    h.add_pods(pod("p"), pod("q"), pod("o", runtime="rt2"), pod("p", ns="ns2"))
    h.create(*waiters)
    h.drain()
    for w in waiters:
        assert h.phase(w.name, w.namespace) == "Pending"
    assert h.take_all() == []
    return h


def _place(h: Harness, r: RunInfo) -> list[tuple[str, str]]:
    """Let the scheduler place `r` (its own cycle only); return the keys woken meanwhile."""
    h.create(r)
    assert h.take_all() == [r.key]
    assert h.scheduler.process(r.key) == "scheduled"
    return sorted(h.take_all())


def test_a_run_the_scheduler_places_wakes_the_run_waiting_for_its_labels_which_then_joins_it() -> None:
    h = _waiting(run("w", affinity=NEEDS_DB))
    assert _place(h, run("t", labels={"app": "db"})) == [("ns", "w")]
    assert h.sample(WAKEUPS, source="affinity_target") == 1
    h.scheduler.process(("ns", "w"))
    assert h.phase("w") == "Scheduled" and h.placement("w") == h.placement("t")


def test_an_active_run_observed_on_a_pod_wakes_the_run_waiting_for_its_labels() -> None:
    h = _waiting(run("w", affinity=NEEDS_DB))
    h.scheduler.on_run(run("t", phase="Running", on="q", pod_uid="uid-ns-q", labels={"app": "db"}))
    assert h.take_all() == [("ns", "w")]
    assert h.sample(WAKEUPS, source="affinity_target") == 1


def _observe(labels: dict[str, str], **kw: Any) -> Callable[[Harness], None]:
    def event(h: Harness) -> None:
        kw.setdefault("on", "q")
        kw.setdefault("pod_uid", f"uid-{kw.get('ns', 'ns')}-{kw['on']}")
        h.scheduler.on_run(run("t", phase="Running", labels=labels, **kw))
    return event


NOT_WOKEN: list[tuple[str, RunInfo, Callable[[Harness], None]]] = [
    ("a target matching only some of the waiter's terms",
     run("w", affinity=NEEDS_DB_AND_SCAN), _observe({"app": "db"})),
    ("a target on a pod of another runtime", run("w", affinity=NEEDS_DB), _observe({"app": "db"}, on="o")),
    ("a target in another namespace", run("w", affinity=NEEDS_DB), _observe({"app": "db"}, ns="ns2", on="p")),
    ("a target on a pod uid no current pod has",
     run("w", affinity=NEEDS_DB), _observe({"app": "db"}, pod_uid="uid-of-an-earlier-q")),
    ("a target the waiter's own labels would be, when the waiter waits for capacity, not for a cohort",
     run("w", labels={"app": "db"}, affinity=NEEDS_DB, requests={"runs": 9}), _observe({"app": "db"})),
    ("a target matching the waiter's anti-affinity only",
     run("w", affinity=affinity(required=[sel(app="web")], anti=[sel(app="db")])), _observe({"app": "db"})),
]


@pytest.mark.parametrize("waiter, event", [c[1:] for c in NOT_WOKEN], ids=[c[0] for c in NOT_WOKEN])
def test_a_target_that_cannot_satisfy_a_parked_run_does_not_wake_it(waiter: RunInfo, event) -> None:
    h = _waiting(waiter)
    event(h)
    event(h)  # the same target observed again (a status-only update) wakes nothing either
    assert h.take_all() == []
    assert h.sample(WAKEUPS, source="affinity_target") == 0


def test_a_target_observed_again_on_the_same_pod_wakes_nothing() -> None:
    h = Harness()
    h.add_pods(pod("p"), pod("q", ready=False))
    target = run("t", phase="Running", on="q", pod_uid="uid-ns-q", labels={"app": "db"})
    h.scheduler.on_run(target)
    h.create(run("w", affinity=NEEDS_DB))
    h.drain()
    assert h.phase("w") == "Pending"  # its only cohort member sits on an unavailable pod
    h.scheduler.on_run(replace(target, resource_version="2"))
    assert h.take_all() == []
    assert h.sample(WAKEUPS, source="affinity_target") == 0


def test_only_the_waiters_a_target_satisfies_are_woken_and_each_once() -> None:
    h = _waiting(run("w1", affinity=NEEDS_DB), run("w2", affinity=NEEDS_DB_AND_SCAN),
                 run("w3", affinity=affinity(required=[sel(service="scan")])))
    _observe({"app": "db", "service": "scan"})(h)
    assert sorted(h.take_all()) == [("ns", "w1"), ("ns", "w2"), ("ns", "w3")]
    h.scheduler.on_run(run("t2", phase="Running", on="p", pod_uid="uid-ns-p", labels={"app": "db"}))
    assert h.take_all() == []  # woken Runs left the index: nothing is emitted twice
    assert h.sample(WAKEUPS, source="affinity_target") == 3


def test_a_woken_run_that_still_finds_no_cohort_is_parked_again_and_woken_by_the_next_target() -> None:
    h = _waiting(run("w", affinity=NEEDS_DB_AND_SCAN))
    _observe({"app": "db", "service": "scan"}, on="q")(h)
    h.scheduler.on_pod(pod("q", ready=False))  # the target's pod becomes unavailable
    h.drain()
    assert h.phase("w") == "Pending"
    h.scheduler.on_run(run("t2", phase="Running", on="p", pod_uid="uid-ns-p", labels={"app": "db", "service": "scan"}))
    assert h.take_all() == [("ns", "w")]


def test_a_waiter_that_is_deleted_or_scheduled_leaves_the_index() -> None:
    h = _waiting(run("w1", affinity=NEEDS_DB), run("w2", affinity=NEEDS_DB))
    h.scheduler.on_run_deleted("ns", "w1")
    h.scheduler.on_run(run("w2", phase="Running", on="p", pod_uid="uid-ns-p", affinity=NEEDS_DB))
    h.take_all()
    _observe({"app": "db"})(h)
    assert h.take_all() == []


class _TargetAppearsAfterPlanning(Planner):
    """Plans, then lets another worker's Run land as a target before this cycle parks its Run."""

    def __init__(self, config, h: Harness, target: RunInfo) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config)
        self.h, self.target = h, target

    def plan(self, snapshot):  # type: ignore[no-untyped-def]
        outcome = super().plan(snapshot)
        if self.target is not None:
            self.h.scheduler.on_run(self.target)
            self.target = None
        return outcome


def test_a_cycle_that_overlapped_a_new_target_requeues_its_run_instead_of_parking_it() -> None:
    h = Harness(deliver=False)  # the Pending status write is not echoed back, so it cannot requeue the Run
    h.add_pods(pod("p"), pod("q"))
    h.create(run("w", affinity=NEEDS_DB))
    h.sync()
    assert h.take_all() == [("ns", "w")]
    h.scheduler.planner = _TargetAppearsAfterPlanning(
        h.cache.config, h, run("t", phase="Running", on="q", pod_uid="uid-ns-q", labels={"app": "db"}))
    assert h.scheduler.process(("ns", "w")) == "unschedulable"
    assert h.take_all() == [("ns", "w")]  # not parked: the target it waited for has already come


class _WaitsForTargets:
    """Rejects every pod with one reason; declares (or not) that a new affinity target can help."""

    reasons = ("waits for a partner",)

    def __init__(self, name: str, hints: bool) -> None:
        self.name, self._hints = name, hints

    def filter(self, state: Any, pods: Any) -> list[str | None]:
        return [self.reasons[0]] * len(pods)

    def wake_events(self) -> dict[str, frozenset[str]]:
        return {self.reasons[0]: frozenset({interface.AFFINITY_TARGET})} if self._hints else {}


@pytest.mark.parametrize("hints", [True, False], ids=["declared", "not declared"])
def test_a_run_waits_for_a_new_target_only_when_the_plugin_that_rejected_it_says_one_can_help(hints: bool) -> None:
    # The cache parks by the events a plugin declares (kube's EnqueueExtensions), never by a reason's text.
    plugin = _WaitsForTargets("Partner", hints)
    planner = Planner(SchedulerConfig(filters=("Partner",), scores=()), {"Partner": lambda: plugin})
    h = Harness(planner=planner)
    h.add_pods(pod("p"))
    h.create(run("w", affinity=NEEDS_DB))
    h.drain()
    assert h.phase("w") == "Pending" and h.take_all() == []
    h.scheduler.on_run(run("t", phase="Running", on="p", pod_uid="uid-ns-p", labels={"app": "db"}))
    assert (h.take_all() == [("ns", "w")]) is hints


def test_a_plugin_may_declare_wake_up_events_only_for_its_own_reasons_and_known_events() -> None:
    config = SchedulerConfig(filters=("Partner",), scores=())
    for hints in ({"not its reason": frozenset({interface.AFFINITY_TARGET})},
                  {"waits for a partner": frozenset({"the moon rises"})}):
        plugin = _WaitsForTargets("Partner", True)
        plugin.wake_events = lambda hints=hints: hints  # type: ignore[method-assign]
        with pytest.raises(ConfigError, match="wake-up events"):
            Planner(config, {"Partner": lambda plugin=plugin: plugin})


def test_the_required_affinity_rejection_is_the_only_built_in_one_that_waits_for_a_target() -> None:
    planner = Planner(SchedulerConfig())
    rejections = [(f.name, r) for f in planner.filters for r in f.reasons]
    assert {r for r in rejections if planner.wake_events([r])} == {("RunAffinity", af.AFFINITY_UNSATISFIED)}
    assert planner.wake_events([None, ("RunAffinity", af.AFFINITY_UNSATISFIED)]) == {interface.AFFINITY_TARGET}
