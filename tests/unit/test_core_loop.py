"""The scheduler loop (SPEC §3.1 wake-ups, §3.2 steps 5-6 and the Pending status, §3.7)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, Callable

import pytest

from kruntimes.memory.api import MemoryApi
from kruntimes.scheduler import status as st
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.registry import REGISTRY
from tests.builders import NOW, Harness, cache_of, plan, pod, run
from tests.unit.test_core_framework import RaisingScore, StrayReason

RESULTS = "kruntimes_scheduler_schedule_results_total"
CONFLICTS = "kruntimes_scheduler_reservation_conflicts_total"
WAKEUPS = "kruntimes_scheduler_pending_run_wakeups_total"


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


# -- Pending status ----------------------------------------------------------------------------

def test_an_unschedulable_run_gets_scheduled_false_with_the_aggregated_message() -> None:
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 0}))
    h.create(run("r"))
    h.drain()
    status = h.api.status(("ns", "r"))
    assert status is not None and status["phase"] == "Pending"
    cond = _conditions(status)["Scheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == ("0/1 runtime pods available: 1 insufficient capacity (runs); "
                              "no runtime pod could fit this Run even if idle: it waits until pods or their capacity change")
    assert "assignment" not in status


def test_the_pending_status_is_written_only_when_the_message_changes() -> None:
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 0}))
    h.create(run("r"))
    h.drain()
    assert h.api.writes == 1
    # Its own write and someone else's touch change nothing the planner reads: no new cycle.
    h.api.touch(("ns", "r"))
    assert h.drain() == []
    # A change the planner does read (a label) re-plans, but the same message is not re-written.
    h.api.create(replace(h.api.get(("ns", "r")), labels=(("team", "a"),)))
    assert [res for _, res in h.drain()] == ["unschedulable"]
    assert h.api.writes == 1
    # A new pod changes the message: written once more.
    h.add_pods(pod("q", ready=False))
    h.drain()
    assert h.api.writes == 2
    assert _conditions(h.api.status(("ns", "r")))["Scheduled"]["message"] == \
        "0/2 runtime pods available: 1 insufficient capacity (runs), 1 runtime pod not ready"


# -- invalid Runs --------------------------------------------------------------------------------

def test_an_invalid_run_becomes_terminal_failed_through_the_terminal_status_helper(monkeypatch) -> None:
    calls: list[tuple] = []
    real = st.terminal_status

    def spy(previous, phase, reason, message, now):
        calls.append((phase, reason, message, now))
        return real(previous, phase, reason, message, now)

    monkeypatch.setattr(st, "terminal_status", spy)
    h = Harness()
    h.add_pods(pod("p"))
    h.create(run("bad", problems=("spec.mode: must set exactly one of task or function",)))
    assert h.drain() == [(("ns", "bad"), "invalid")]
    message = "invalid Run: spec.mode: must set exactly one of task or function"
    assert calls == [("Failed", st.REASON_INVALID, message, NOW)]
    status = h.api.status(("ns", "bad"))
    assert status == real(None, "Failed", st.REASON_INVALID, message, NOW)
    assert status["phase"] == "Failed"
    assert status["completionTime"] == "2026-01-01T00:00:00Z"
    conds = _conditions(status)
    assert (conds["Completed"]["status"], conds["Completed"]["reason"]) == ("True", st.REASON_INVALID)
    assert (conds["Scheduled"]["status"], conds["Scheduled"]["message"]) == ("False", message)
    assert len(h.cache.assumed) == 0
    assert h.sample(RESULTS, result="invalid") == 1
    # Terminal: never planned again.
    h.scheduler.queue.add(("ns", "bad"))
    assert h.drain() == [(("ns", "bad"), "skipped")]


# -- plugin errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("config", [
    SchedulerConfig(filters=("RuntimePodAvailability", "StrayReason")),
    SchedulerConfig(scores=(("LeastLoaded", 1), ("RaisingScore", 1))),
], ids=["a filter reason outside its bounded set", "a raising score plugin"])
def test_a_plugin_error_makes_no_assumption_and_no_status_write_and_the_key_is_retried(config) -> None:
    registry = {**REGISTRY, "StrayReason": StrayReason, "RaisingScore": RaisingScore}
    h = Harness(config=config, planner=Planner(config, registry))
    h.add_pods(pod("p"))
    h.create(run("r"))
    assert h.drain() == [(("ns", "r"), "error")]
    assert h.api.writes == 0
    assert h.api.status(("ns", "r")) is None
    assert len(h.cache.assumed) == 0 and h.cache.usage("ns", "p") == {}
    assert h.queue.num_requeues(("ns", "r")) == 1
    assert h.queue.delayed_count() == 1
    assert h.sample(RESULTS, result="error") == 1


# -- reserve ------------------------------------------------------------------------------------------

class _FillsThePodAfterPlanning(Planner):
    """Plans, then lets an 'other worker' take the chosen pod before this cycle reserves."""

    def __init__(self, config, cache, intruder) -> None:
        super().__init__(config)
        self.cache, self.intruder = cache, intruder

    def plan(self, snapshot):
        outcome = super().plan(snapshot)
        if outcome.chosen is not None and self.intruder is not None:
            # The intruder takes every free `runs` unit of the chosen pod.
            free = next(v.free for v in snapshot.pods if v.name == outcome.chosen)
            intruder = replace(self.intruder, requests=(("runs", free["runs"]),))
            self.cache.upsert_run(intruder)
            assert self.cache.reserve(intruder, outcome.chosen)
            self.intruder = None
        return outcome


def test_a_reserve_that_finds_the_pod_filled_meanwhile_counts_a_reserve_conflict_and_retries() -> None:
    h = Harness()
    h.scheduler.planner = _FillsThePodAfterPlanning(h.cache.config, h.cache, run("intruder", uid="u-intruder"))
    h.add_pods(pod("p", capacity={"runs": 1}))
    h.create(run("r"))
    assert h.step() == (("ns", "r"), "conflict")
    assert h.sample(CONFLICTS, stage="reserve") == 1
    assert h.sample(CONFLICTS, stage="bind") == 0
    assert h.api.writes == 0
    assert ("ns", "uid-ns-r") not in h.cache.assumed
    assert h.queue.num_requeues(("ns", "r")) == 1


# -- bind ------------------------------------------------------------------------------------------------

def test_a_bind_conflict_releases_the_assumption_requeues_and_counts_a_bind_conflict() -> None:
    h = Harness(api=MemoryApi(conflict_rate=1.0))
    h.add_pods(pod("p", capacity={"runs": 1}))
    h.create(run("r"))
    assert h.step() == (("ns", "r"), "conflict")
    assert h.sample(CONFLICTS, stage="bind") == 1
    assert len(h.cache.assumed) == 0 and h.cache.usage("ns", "p") == {}
    assert h.queue.num_requeues(("ns", "r")) == 1
    assert h.phase("r") == "Pending"  # not terminal
    h.api.conflict_rate = 0.0
    h.drain(retries=True)
    assert (h.phase("r"), h.placement("r")) == ("Scheduled", "p")


def test_a_bind_on_a_stale_resource_version_is_a_conflict() -> None:
    h = Harness(deliver=False)
    h.add_pods(pod("p"))
    h.create(run("r"))
    h.sync()
    h.api.touch(("ns", "r"))  # changed on the server; the informer has not delivered it
    assert h.step() == (("ns", "r"), "conflict")
    assert h.sample(CONFLICTS, stage="bind") == 1
    assert len(h.cache.assumed) == 0


def test_another_bind_error_releases_the_assumption_and_backs_off() -> None:
    h = Harness(api=MemoryApi(error_rate=1.0))
    h.add_pods(pod("p", capacity={"runs": 1}))
    h.create(run("r"))
    assert h.step() == (("ns", "r"), "error")
    assert len(h.cache.assumed) == 0 and h.cache.usage("ns", "p") == {}
    assert h.sample(CONFLICTS, stage="bind") == 0
    assert h.queue.num_requeues(("ns", "r")) == 1 and h.queue.delayed_count() == 1
    h.api.error_rate = 0.0
    h.drain(retries=True)
    assert h.phase("r") == "Scheduled"


def test_a_failed_bind_wakes_the_runs_its_assumption_kept_out() -> None:
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 1}))
    h.create(run("first"), run("second"))
    h.take_all()

    class FailFirstAfterSecondPlans:
        def update_status(self, r, body):
            if r.name == "first":
                assert h.scheduler.process(("ns", "second")) == "unschedulable"  # p is held by "first"
                raise st.ApiError("boom")
            h.api.update_status(r, body)

    h.scheduler.binder = FailFirstAfterSecondPlans()
    before = h.sample(WAKEUPS, source="capacity_released")
    assert h.scheduler.process(("ns", "first")) == "error"
    assert h.sample(WAKEUPS, source="capacity_released") == before + 1
    assert ("ns", "second") in h.take_all()


def test_a_successful_bind_keeps_the_assumption_until_the_informer_shows_the_bound_run() -> None:
    h = Harness(deliver=False)
    h.add_pods(pod("p", capacity={"runs": 2}))
    h.create(run("r"))
    h.sync()
    assert h.step() == (("ns", "r"), "scheduled")
    assert (h.phase("r"), h.placement("r")) == ("Scheduled", "p")
    assert h.api.status(("ns", "r"))["assignment"] == {"podName": "p", "podUID": "uid-ns-p"}
    assert ("ns", "uid-ns-r") in h.cache.assumed
    assert h.cache.usage("ns", "p") == {"runs": 1}
    # The key comes back (e.g. a wake-up) before the informer caught up: nothing is planned twice.
    h.queue.add(("ns", "r"))
    assert h.step() == (("ns", "r"), "skipped")
    assert h.api.writes == 1
    h.sync()
    assert ("ns", "uid-ns-r") not in h.cache.assumed
    assert h.cache.usage("ns", "p") == {"runs": 1}


def test_the_bind_writes_scheduled_with_pod_name_and_uid_guarded_by_the_observed_version() -> None:
    seen: list[tuple[str, dict]] = []

    class Recording:
        def update_status(self, r, body):
            seen.append((r.resource_version, body))

    h = Harness()
    h.add_pods(pod("p"))
    h.create(run("r"))
    h.scheduler.binder = Recording()
    h.drain()
    (version, body), = seen
    assert version == h.api.get(("ns", "r")).resource_version
    assert body["phase"] == "Scheduled"
    assert body["assignment"] == {"podName": "p", "podUID": "uid-ns-p"}
    assert _conditions(body)["Scheduled"]["status"] == "True"


# -- wake-ups ----------------------------------------------------------------------------------------------

def _wakeup_world(p_kwargs: dict[str, Any]) -> Harness:
    """p (ns/rt) full with active x; Pending a, b (ns/rt), c (ns/rt2), d (ns2/rt); the queue drained."""
    h = Harness()
    h.add_pods(pod("p", capacity={"runs": 1}, **p_kwargs), pod("q", runtime="rt2", capacity={"runs": 0}),
               pod("p", ns="ns2", capacity={"runs": 0}))
    h.api.create(run("x", phase="Running", on="p", pod_uid="uid-ns-p"))
    h.create(run("a"), run("b"), run("c", runtime="rt2"), run("d", ns="ns2"))
    h.drain()
    assert {h.phase(n) for n in "abc"} == {"Pending"} and h.phase("d", "ns2") == "Pending"
    return h


def _finish(h: Harness) -> None:
    h.api.finish(("ns", "x"), "Succeeded", NOW)


WAKE_CASES: list[tuple[str, dict[str, Any], Callable[[Harness], None], str]] = [
    ("a pod becoming ready", {"ready": False}, lambda h: h.scheduler.on_pod(pod("p", capacity={"runs": 1})),
     "runtime_pod"),
    ("a pod becoming unavailable", {}, lambda h: h.scheduler.on_pod(pod("p", capacity={"runs": 1}, ready=False)),
     "runtime_pod"),
    ("a pod starting to terminate", {},
     lambda h: h.scheduler.on_pod(pod("p", capacity={"runs": 1}, terminating=True)), "runtime_pod"),
    ("a stale heartbeat becoming fresh", {"heartbeat": NOW - timedelta(minutes=5)},
     lambda h: h.scheduler.on_pod(pod("p", capacity={"runs": 1})), "runtime_pod"),
    ("a capacity increase", {}, lambda h: h.scheduler.on_pod(pod("p", capacity={"runs": 2})), "runtime_pod"),
    ("a capacity change (a resource added)", {},
     lambda h: h.scheduler.on_pod(pod("p", capacity={"runs": 1, "gpu": 1})),
     "runtime_pod"),
    ("a new pod", {}, lambda h: h.scheduler.on_pod(pod("p2")), "runtime_pod"),
    ("a deleted pod", {}, lambda h: h.scheduler.on_pod_deleted("ns", "p"), "runtime_pod"),
    ("a run finishing", {}, _finish, "capacity_released"),
    ("a run deleted", {}, lambda h: h.scheduler.on_run_deleted("ns", "x"), "capacity_released"),
    ("a function released", {},
     lambda h: h.scheduler.on_run(replace(h.api.get(("ns", "x")), released=True)), "capacity_released"),
]


@pytest.mark.parametrize("p_kwargs, event, source", [c[1:] for c in WAKE_CASES], ids=[c[0] for c in WAKE_CASES])
def test_an_event_enqueues_the_pending_runs_of_that_runtime_and_namespace_only(p_kwargs, event, source) -> None:
    h = _wakeup_world(p_kwargs)
    other = "capacity_released" if source == "runtime_pod" else "runtime_pod"
    before = {s: h.sample(WAKEUPS, source=s) for s in (source, other)}
    writes = h.api.writes
    event(h)
    assert h.api.writes == writes  # event handlers only enqueue
    assert sorted(h.take_all()) == [("ns", "a"), ("ns", "b")]
    assert h.sample(WAKEUPS, source=source) == before[source] + 2
    assert h.sample(WAKEUPS, source=other) == before[other]


def test_a_woken_run_is_placed_on_the_freed_capacity() -> None:
    h = _wakeup_world({})
    _finish(h)
    h.drain()
    assert sorted((h.phase(n), h.placement(n)) for n in "ab") == [("Pending", None), ("Scheduled", "p")]


@pytest.mark.parametrize("observe", ["deleted", "succeeded", "released", "elsewhere"])
def test_an_assumption_dropped_before_its_bind_was_observed_wakes_the_runs_it_kept_out(observe: str) -> None:
    # Regression (fixed in 4a27965): the drop freed the assumed capacity without a wake-up.
    h = Harness(deliver=False)
    h.add_pods(pod("p", capacity={"runs": 1}), pod("q", capacity={"runs": 0}))
    h.create(run("first"), run("second"))
    h.sync()
    h.take_all()
    assert h.scheduler.process(("ns", "first")) == "scheduled"  # assumed on p; the informer lags
    assert h.scheduler.process(("ns", "second")) == "unschedulable"
    h.take_all()
    # A relist delivers only the latest state of "first", skipping its Scheduled version.
    bound = h.cache.run(("ns", "first"))
    if observe == "deleted":
        h.scheduler.on_run_deleted("ns", "first")
    elif observe == "succeeded":
        h.scheduler.on_run(replace(bound, resource_version="99", phase="Succeeded", pod_name="p",
                                   pod_uid="uid-ns-p"))
    elif observe == "released":
        h.scheduler.on_run(replace(bound, resource_version="99", phase="Running", pod_name="p",
                                   pod_uid="uid-ns-p", released=True))
    else:
        h.scheduler.on_run(replace(bound, resource_version="99", phase="Running", pod_name="q",
                                   pod_uid="uid-ns-q"))
    assert h.cache.usage("ns", "p") == {}
    assert ("ns", "second") in h.take_all()


def test_a_new_leader_enqueues_every_pending_run() -> None:
    cache = cache_of([pod("p")], [run("a"), run("b", phase="Running", on="p"), run("c", ns="ns2")])
    assert cache.pending_keys() == [("ns", "a"), ("ns2", "c")]


def test_a_run_without_pods_for_its_runtime_stays_pending_with_a_bounded_message() -> None:
    h = Harness()
    h.create(run("r", runtime="nowhere"))
    h.drain()
    assert _conditions(h.api.status(("ns", "r")))["Scheduled"]["message"] == \
        "0/0 runtime pods available: no runtime pods for this runtime"


def test_planning_sees_what_the_previous_cycle_assumed() -> None:
    h = Harness(deliver=False)
    h.add_pods(pod("p", capacity={"runs": 1}), pod("q", capacity={"runs": 1}))
    h.create(run("a"), run("b"), run("c"))
    h.sync()
    results = [h.scheduler.process(("ns", n)) for n in "abc"]
    assert results == ["scheduled", "scheduled", "unschedulable"]
    assert {h.placement("a"), h.placement("b")} == {"p", "q"}
    assert plan(h.cache, h.cache.run(("ns", "c"))).message == \
        "0/2 runtime pods available: 2 insufficient capacity (runs)"


def test_the_scheduler_uses_the_queue_it_is_given() -> None:
    # Regression (fixed in 4a27965): `queue or WorkQueue()` replaced an empty, hence falsy, queue.
    from kruntimes.scheduler.loop import Scheduler
    from kruntimes.scheduler.queue import WorkQueue
    queue: WorkQueue = WorkQueue()
    assert Scheduler(cache_of(), MemoryApi(), queue=queue).queue is queue


def test_bind_conflicts_of_stale_runs_back_off_instead_of_waking_each_other_forever() -> None:
    h = Harness(deliver=False)
    h.add_pods(pod("p", capacity={"runs": 1}))
    h.create(run("x", phase="Running", on="p", pod_uid="uid-ns-p"), run("a"), run("b"))
    h.sync()
    h.drain()  # a and b get their Pending status; the informer has not delivered those writes yet
    assert [h.phase(n) for n in "ab"] == ["Pending", "Pending"]
    h.api.finish(("ns", "x"), "Succeeded", NOW)
    h.scheduler.on_run(h.api.get(("ns", "x")))  # only x's event has arrived: both a and b wake
    cycles = []
    for _ in range(50):  # no time passes: only immediate work, never a backoff, is processed
        item = h.step()
        if item is None:
            break
        cycles.append(item[1])
    assert len(cycles) <= 4, f"{len(cycles)} cycles without time passing: {cycles[:6]}..."
