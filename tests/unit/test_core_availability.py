"""RuntimePodAvailability (SPEC §3.3.1): readiness, terminating, heartbeat freshness, bound workspace."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kruntimes.api import ingest
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.plugins import availability as av
from tests.builders import NOW, active, assume, cache_of, plan, pod, run, verdicts


@pytest.mark.parametrize("ready, terminating, reason", [
    (True, False, None), (False, False, av.NOT_READY), (True, True, av.TERMINATING), (False, True, av.NOT_READY),
], ids=["a ready pod is available", "a pod that is not ready is rejected",
        "a terminating pod is rejected", "a pod that is neither ready nor alive is rejected as not ready"])
def test_a_pod_must_be_ready_and_not_terminating(ready: bool, terminating: bool, reason: str | None) -> None:
    outcome = plan(cache_of([pod("p", ready=ready, terminating=terminating)]), run("r"))
    assert verdicts(outcome) == {"p": reason}


@pytest.mark.parametrize("age, staleness, reason", [
    (timedelta(0), 30, None),
    (timedelta(seconds=29), 30, None),
    (timedelta(seconds=30), 30, None),
    (timedelta(seconds=30, microseconds=1), 30, av.STALE),
    (timedelta(hours=1), 30, av.STALE),
    (timedelta(seconds=-600), 30, None),
    (timedelta(seconds=5), 5, None),
    (timedelta(seconds=6), 5, av.STALE),
    (timedelta(0), 0, None),
], ids=[
    "a heartbeat at now is fresh", "a heartbeat 29 s old is fresh", "a heartbeat exactly at the limit is fresh",
    "a heartbeat a microsecond past the limit is stale", "an hour-old heartbeat is stale",
    "a heartbeat ahead of now is fresh", "the staleness setting is honoured (fresh)",
    "the staleness setting is honoured (stale)", "a zero staleness still accepts a heartbeat at now",
])
def test_runtimed_heartbeat_is_fresh_when_now_minus_heartbeat_is_within_the_staleness(
        age: timedelta, staleness: int, reason: str | None) -> None:
    config = SchedulerConfig(heartbeat_staleness_seconds=staleness)
    outcome = plan(cache_of([pod("p", heartbeat=NOW - age)], config=config), run("r"))
    assert verdicts(outcome) == {"p": reason}


def test_a_missing_heartbeat_is_stale() -> None:
    assert verdicts(plan(cache_of([pod("p", heartbeat=None)]), run("r"))) == {"p": av.STALE}


@pytest.mark.parametrize("annotation, reason", [
    (None, av.STALE), ("not a time", av.STALE), ("2026-01-01T00:00:00", av.STALE),
    ("2026-01-01T00:00:00Z", None), ("2025-12-31T23:59:30Z", None), ("2025-12-31T23:59:29Z", av.STALE),
    ("2026-01-01T00:10:00+00:00", None),
], ids=["a missing annotation is stale", "an unparsable annotation is stale",
        "a time without a zone is unparsable, hence stale", "a heartbeat annotation at now is fresh",
        "an annotation exactly 30 s old is fresh", "an annotation 31 s old is stale",
        "an annotation ahead of now is fresh"])
def test_the_heartbeat_annotation_read_from_a_pod_decides_freshness(annotation: str | None,
                                                                    reason: str | None) -> None:
    annotations = {"kruntimes.io/capacity.runs": "4"}
    if annotation is not None:
        annotations["kruntimes.io/runtimed-heartbeat"] = annotation
    info = ingest.pod_info({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                                         "labels": {"kruntimes.io/runtime": "rt"}, "annotations": annotations},
                            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert verdicts(plan(cache_of([info]), run("r"))) == {"p": reason}


def test_the_heartbeat_is_judged_against_the_cycles_now_not_the_wall_clock() -> None:
    cache = cache_of([pod("p", heartbeat=NOW)])
    assert verdicts(plan(cache, run("r"), now=NOW + timedelta(seconds=31))) == {"p": av.STALE}
    assert verdicts(plan(cache, run("r"), now=NOW + timedelta(seconds=30))) == {"p": None}


def test_a_run_of_a_bound_workspace_may_only_go_to_the_pod_holding_the_workspace() -> None:
    cache = cache_of([pod("a"), pod("b"), pod("c")], [active("w1", "b", workspace="ws")])
    outcome = plan(cache, run("r", workspace="ws"))
    assert verdicts(outcome) == {"a": av.WORKSPACE_ELSEWHERE, "b": None, "c": av.WORKSPACE_ELSEWHERE}
    assert outcome.chosen == "b"


def test_an_assumed_run_binds_its_workspace_too() -> None:
    cache = cache_of([pod("a"), pod("b")])
    assume(cache, run("w1", workspace="ws"), "b")
    assert verdicts(plan(cache, run("r", workspace="ws"))) == {"a": av.WORKSPACE_ELSEWHERE, "b": None}


def test_after_a_stale_write_a_workspace_on_several_pods_may_use_any_of_them() -> None:
    cache = cache_of([pod("a"), pod("b"), pod("c")],
                     [active("w1", "a", workspace="ws"), active("w2", "c", workspace="ws")])
    assert verdicts(plan(cache, run("r", workspace="ws"))) == {"a": None, "b": av.WORKSPACE_ELSEWHERE, "c": None}


def test_an_unbound_workspace_may_go_anywhere_and_other_workspaces_do_not_bind_it() -> None:
    cache = cache_of([pod("a"), pod("b")], [active("w1", "a", workspace="other")])
    assert verdicts(plan(cache, run("r", workspace="ws"))) == {"a": None, "b": None}
    assert verdicts(plan(cache, run("s"))) == {"a": None, "b": None}


def test_a_workspace_is_no_longer_bound_once_its_runs_finish() -> None:
    cache = cache_of([pod("a"), pod("b")], [active("w1", "a", workspace="ws")])
    cache.upsert_run(active("w1", "a", workspace="ws", phase="Succeeded"))
    assert verdicts(plan(cache, run("r", workspace="ws"))) == {"a": None, "b": None}


def test_the_bound_workspace_pod_must_still_have_room() -> None:
    cache = cache_of([pod("a", capacity={"runs": 1}), pod("b")], [active("w1", "a", workspace="ws")])
    outcome = plan(cache, run("r", workspace="ws"))
    assert verdicts(outcome) == {"a": av.INSUFFICIENT, "b": av.WORKSPACE_ELSEWHERE}
    assert outcome.chosen is None
