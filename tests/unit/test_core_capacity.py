"""The capacity contract (SPEC §2.2 "Active", §2.3), checked through the planner and the cluster cache."""

from __future__ import annotations

import pytest

from kruntimes.api import ingest
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.plugins import availability as av
from tests.builders import active, assume, cache_of, plan, pod, run, verdicts


@pytest.mark.parametrize("default, occupied, fits", [
    (1, 0, True), (1, 1, False), (2, 1, True), (2, 2, False), (0, 0, False),
], ids=[
    "default 1 admits the first run", "default 1 rejects the second run", "a default of 2 admits the second run",
    "a default of 2 rejects the third run", "a default of 0 admits nothing",
])
def test_a_pod_without_a_runs_annotation_has_the_default_runs_capacity(default: int, occupied: int,
                                                                       fits: bool) -> None:
    config = SchedulerConfig(default_runs_capacity=default)
    cache = cache_of([pod("p", capacity={"example.com/gpu": 1})],
                     [active(f"a{i}", "p") for i in range(occupied)], config=config)
    outcome = plan(cache, run("r"))
    assert verdicts(outcome) == {"p": None if fits else av.INSUFFICIENT}


def test_the_default_runs_capacity_does_not_override_a_declared_runs_capacity() -> None:
    cache = cache_of([pod("p", capacity={"runs": 1})], [active("a", "p")],
                     config=SchedulerConfig(default_runs_capacity=5))
    assert verdicts(plan(cache, run("r"))) == {"p": av.INSUFFICIENT}


@pytest.mark.parametrize("capacity, requests", [
    ({"runs": 0}, {"runs": 1}),
    ({"runs": 4, "example.com/gpu": 0}, {"runs": 1, "example.com/gpu": 1}),
], ids=["runs capacity 0", "gpu capacity 0"])
def test_a_declared_capacity_of_zero_admits_no_positive_request(capacity, requests) -> None:
    outcome = plan(cache_of([pod("p", capacity=capacity)]), run("r", requests=requests))
    assert verdicts(outcome) == {"p": av.INSUFFICIENT}


def test_a_resource_the_pod_does_not_declare_makes_the_pod_infeasible() -> None:
    cache = cache_of([pod("p", capacity={"runs": 4}), pod("q", capacity={"runs": 4, "example.com/gpu": 1})])
    outcome = plan(cache, run("r", requests={"runs": 1, "example.com/gpu": 1}))
    assert verdicts(outcome) == {"p": av.NOT_OFFERED, "q": None}
    assert outcome.chosen == "q"


def test_no_resource_but_runs_has_implicit_capacity() -> None:
    outcome = plan(cache_of([pod("p", capacity={})]), run("r", requests={"runs": 1, "mem": 1}))
    assert verdicts(outcome) == {"p": av.NOT_OFFERED}


@pytest.mark.parametrize("active_n, assumed_n, asked, fits", [
    (2, 1, 1, True), (2, 1, 2, False), (3, 0, 2, False), (0, 3, 2, False), (3, 0, 1, True), (0, 4, 1, False),
], ids=[
    "2 active + 1 assumed + 1 requested fits 4", "2 active + 1 assumed + 2 requested exceeds 4",
    "3 active + 2 requested exceeds 4", "3 assumed + 2 requested exceeds 4", "3 active + 1 requested fits exactly",
    "4 assumed fill the pod",
])
def test_usage_is_active_plus_assumed_and_a_request_fits_when_usage_plus_request_is_within_capacity(
        active_n: int, assumed_n: int, asked: int, fits: bool) -> None:
    cache = cache_of([pod("p", capacity={"runs": 4})], [active(f"a{i}", "p") for i in range(active_n)])
    for i in range(assumed_n):
        assume(cache, run(f"s{i}"), "p")
    assert cache.usage("ns", "p") == ({"runs": active_n + assumed_n} if active_n + assumed_n else {})
    outcome = plan(cache, run("r", requests={"runs": asked}))
    assert verdicts(outcome) == {"p": None if fits else av.INSUFFICIENT}


def test_feasibility_checks_every_requested_resource() -> None:
    cache = cache_of([pod("p", capacity={"runs": 4, "example.com/gpu": 2})],
                     [active("a", "p", requests={"runs": 1, "example.com/gpu": 2})])
    assert verdicts(plan(cache, run("r", requests={"runs": 1, "example.com/gpu": 1}))) == {"p": av.INSUFFICIENT}
    assert verdicts(plan(cache, run("s", requests={"runs": 3}))) == {"p": None}


def test_a_pod_with_a_malformed_capacity_annotation_is_not_schedulable() -> None:
    cache = cache_of([pod("p", capacity={"runs": 4}, capacity_problem="malformed capacity annotation")])
    outcome = plan(cache, run("r"))
    assert verdicts(outcome) == {"p": av.INVALID_CAPACITY}
    assert outcome.message == "0/1 runtime pods available: 1 invalid capacity; " + av.NEVER_FITS


def test_a_malformed_capacity_annotation_read_from_a_pod_makes_it_unschedulable_with_a_bounded_reason() -> None:
    info = ingest.pod_info({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                                         "labels": {"kruntimes.io/runtime": "rt"},
                                         "annotations": {"kruntimes.io/capacity.runs": "1.5",
                                                         "kruntimes.io/runtimed-heartbeat": "2026-01-01T00:00:00Z"}},
                            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    outcome = plan(cache_of([info]), run("r"))
    assert verdicts(outcome) == {"p": av.INVALID_CAPACITY}
    assert "1.5" not in (outcome.message or "")


def test_a_run_is_only_placed_on_pods_of_its_own_namespace() -> None:
    cache = cache_of([pod("p", ns="other", capacity={"runs": 4})])
    outcome = plan(cache, run("r", ns="ns"))
    assert outcome.pods == ()
    assert outcome.chosen is None
    assert outcome.message == "0/0 runtime pods available: no runtime pods for this runtime"


def test_usage_in_another_namespace_does_not_count() -> None:
    # The same pod name in two namespaces: the other namespace's Runs fill *its* pod only.
    cache = cache_of([pod("p", ns="ns", capacity={"runs": 1}), pod("p", ns="other", capacity={"runs": 1})],
                     [active("a", "p", ns="other")])
    assert cache.usage("other", "p") == {"runs": 1}
    assert cache.usage("ns", "p") == {}
    assert verdicts(plan(cache, run("r", ns="ns"))) == {"p": None}


def test_a_run_is_only_placed_on_pods_labelled_with_its_runtime() -> None:
    cache = cache_of([pod("a1", runtime="rt-a"), pod("b1", runtime="rt-b")])
    outcome = plan(cache, run("r", runtime="rt-b"))
    assert outcome.pods == ("b1",)
    assert outcome.chosen == "b1"


def test_a_run_assigned_by_pod_uid_to_a_recreated_pod_does_not_count_on_the_new_pod() -> None:
    old = pod("p", uid="old-uid", capacity={"runs": 1})
    cache = cache_of([old], [active("a", "p", pod_uid="old-uid")])
    assert verdicts(plan(cache, run("r1"))) == {"p": av.INSUFFICIENT}
    cache.delete_pod("ns", "p")
    cache.upsert_pod(pod("p", uid="new-uid", capacity={"runs": 1}), now=None)
    assert cache.usage("ns", "p") == {}
    assert verdicts(plan(cache, run("r2"))) == {"p": None}


def test_a_run_assigned_by_pod_uid_counts_on_the_pod_with_that_uid() -> None:
    cache = cache_of([pod("p", uid="the-uid", capacity={"runs": 1})], [active("a", "p", pod_uid="the-uid")])
    assert cache.usage("ns", "p") == {"runs": 1}


def test_an_assignment_without_a_pod_uid_counts_on_the_pod_of_that_name() -> None:
    cache = cache_of([pod("p", uid="whatever", capacity={"runs": 1})], [run("a", phase="Scheduled", on="p")])
    assert cache.usage("ns", "p") == {"runs": 1}
    assert verdicts(plan(cache, run("r"))) == {"p": av.INSUFFICIENT}


@pytest.mark.parametrize("phase, released, counts", [
    ("Scheduled", False, True), ("Running", False, True), ("Running", True, False), ("Scheduled", True, False),
    ("Succeeded", False, False), ("Failed", False, False), ("Pending", False, False),
], ids=[
    "a Scheduled run is active", "a Running run is active", "a released Running function is not active",
    "a released Scheduled function is not active", "a Succeeded run is not active", "a Failed run is not active",
    "a Pending run with a stale assignment is not active",
])
def test_only_active_runs_consume_capacity(phase: str, released: bool, counts: bool) -> None:
    cache = cache_of([pod("p", capacity={"runs": 1})], [active("a", "p", phase=phase, released=released)])
    assert cache.usage("ns", "p") == ({"runs": 1} if counts else {})
    assert verdicts(plan(cache, run("r"))) == {"p": av.INSUFFICIENT if counts else None}


def test_releasing_a_function_frees_its_capacity() -> None:
    cache = cache_of([pod("p", capacity={"runs": 1})], [active("f", "p")])
    cache.upsert_run(active("f", "p", released=True))
    assert cache.usage("ns", "p") == {}


def test_an_old_active_run_with_a_malformed_request_counts_only_its_runs_default() -> None:
    old = ingest.run_info({
        "metadata": {"name": "old", "namespace": "ns", "uid": "u-old"},
        "spec": {"runtime": "rt", "mode": {"task": {"args": []}},
                 "resources": {"requests": {"runs": "1.5", "example.com/gpu": "abc"}}},
        "status": {"phase": "Running", "assignment": {"podName": "p", "podUID": "uid-ns-p"}},
    })
    assert old.problems
    cache = cache_of([pod("p", capacity={"runs": 2, "example.com/gpu": 1})], [old])
    assert cache.usage("ns", "p") == {"runs": 1}
