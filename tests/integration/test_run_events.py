"""Events on Runs (`kruntimes.cluster.events`) through the real client, against the API emulator.

What `kubectl describe run` shows: a Scheduled Event when a Run is placed, one
FailedScheduling Event per Pending reason whose series counts the re-plans, written
at most once per interval per Run, and a scheduling side that never waits on them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry

from kruntimes.cluster import events
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.scheduler.projection import RunInfo
from tests.integration import cluster
from tests.integration.cluster import wait_for

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def run_info(cluster_api: cluster.Cluster, name: str) -> RunInfo:
    obj = cluster_api.add_run(name, requests={"runs": "1"})
    meta = obj["metadata"]
    return RunInfo(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
                   resource_version=meta["resourceVersion"])


def listed(kube_api: ApiClient, namespace: str) -> list[Any]:
    return client.EventsV1Api(kube_api).list_namespaced_event(namespace).items


@pytest.fixture
def recorder(kube_api: ApiClient) -> tuple[events.EventRecorder, Clock]:
    clock = Clock()
    return events.EventRecorder(kube_api, instance="scheduler-a", min_interval=60.0, clock=clock,
                                now=lambda: NOW), clock


def test_a_run_stuck_pending_has_one_event_whose_series_counts_the_replans(
        recorder: tuple[events.EventRecorder, Clock], cluster_api: cluster.Cluster, kube_api: ApiClient) -> None:
    r, clock = recorder
    run = run_info(cluster_api, "stuck")
    message = "0/3 runtime pods available: 3 insufficient capacity"
    for _ in range(500):  # hours of wake-ups
        r.handle(events.Occurrence(run, events.FAILED_SCHEDULING, message, NOW))
        r.flush()
    (event,) = listed(kube_api, cluster_api.namespace)
    assert (event.reason, event.type, event.note, event.action) == ("FailedScheduling", "Warning", message,
                                                                    "Scheduling")
    assert event.regarding.kind == "Run" and event.regarding.uid == run.uid and event.regarding.name == "stuck"
    assert event.reporting_controller == "kruntimes.io/scheduler" and event.reporting_instance == "scheduler-a"
    assert event.series is None and (r.created, r.patched) == (1, 0)  # within the interval: nothing sent

    clock.t += 60
    r.flush()
    (event,) = listed(kube_api, cluster_api.namespace)
    assert event.series.count == 500 and r.patched == 1
    version = event.metadata.resource_version
    r.handle(events.Occurrence(run, events.FAILED_SCHEDULING, message, NOW))
    clock.t += 60
    r.flush()
    (event,) = listed(kube_api, cluster_api.namespace)
    assert event.series.count == 501 and event.metadata.resource_version != version  # patched, not created
    assert (r.created, r.patched, r.failed) == (1, 2, 0)


def test_a_new_pending_reason_is_a_new_event_once_the_interval_allows(
        recorder: tuple[events.EventRecorder, Clock], cluster_api: cluster.Cluster, kube_api: ApiClient) -> None:
    r, clock = recorder
    run = run_info(cluster_api, "changing")
    r.handle(events.Occurrence(run, events.FAILED_SCHEDULING, "first reason", NOW))
    r.handle(events.Occurrence(run, events.FAILED_SCHEDULING, "second reason", NOW))  # too soon: counted
    assert len(listed(kube_api, cluster_api.namespace)) == 1
    clock.t += 60
    r.handle(events.Occurrence(run, events.FAILED_SCHEDULING, "second reason", NOW))
    notes = sorted(e.note for e in listed(kube_api, cluster_api.namespace))
    assert notes == ["first reason", "second reason"]


def test_a_placed_run_gets_a_scheduled_event_and_its_pending_series_ends(
        recorder: tuple[events.EventRecorder, Clock], cluster_api: cluster.Cluster, kube_api: ApiClient) -> None:
    r, clock = recorder
    run = run_info(cluster_api, "placed")
    r.handle(events.Occurrence(run, events.FAILED_SCHEDULING, "no room yet", NOW))
    r.handle(events.Occurrence(run, events.FAILED_SCHEDULING, "no room yet", NOW))
    r.scheduled(run, "python-0")
    r.handle(r._queue.get_nowait())
    clock.t += 60
    r.flush()  # the pending series is over: its unsent repeat is not patched in after the placement
    found = {e.reason: e for e in listed(kube_api, cluster_api.namespace)}
    assert set(found) == {"FailedScheduling", "Scheduled"}
    assert found["Scheduled"].note == f"Successfully assigned {cluster_api.namespace}/placed to python-0"
    assert found["Scheduled"].type == "Normal" and found["FailedScheduling"].series is None


def test_a_note_longer_than_the_api_allows_is_cut_not_refused(
        recorder: tuple[events.EventRecorder, Clock], cluster_api: cluster.Cluster, kube_api: ApiClient) -> None:
    r, _ = recorder
    run = run_info(cluster_api, "long")
    r.handle(events.Occurrence(run, events.FAILED_SCHEDULING, "x" * 5000, NOW))
    (event,) = listed(kube_api, cluster_api.namespace)
    assert len(event.note.encode()) <= 1024 and event.note.endswith("...") and r.failed == 0


def test_emitting_never_waits_a_full_queue_drops_and_counts(kube_api: ApiClient,
                                                            cluster_api: cluster.Cluster) -> None:
    registry = CollectorRegistry()
    r = events.EventRecorder(kube_api, instance="scheduler-a", capacity=10, registry=registry)  # not started
    run = RunInfo(namespace=cluster_api.namespace, name="r", uid="u", resource_version="1")
    started = time.perf_counter()
    for _ in range(10_000):
        r.failed_scheduling(run, "no room")
    assert time.perf_counter() - started < 1.0
    assert r.dropped == 9_990
    assert registry.get_sample_value("kruntimes_scheduler_events_dropped_total") == 9_990


def test_the_emulator_refuses_an_event_of_no_known_type_and_a_change_to_its_reason(
        kube_api: ApiClient, cluster_api: cluster.Cluster) -> None:
    api = client.EventsV1Api(kube_api)
    body: dict[str, Any] = {"metadata": {"name": "e1"}, "type": "Info", "reason": "Scheduled",
                            "action": "Binding", "reportingController": "kruntimes.io/scheduler",
                            "reportingInstance": "a", "note": "n",
                            "regarding": {"kind": "Run", "namespace": cluster_api.namespace, "name": "r"},
                            # Not on a whole second: the client would drop the zero fraction (see events).
                            "eventTime": "2026-12-01T12:00:00.500000Z"}
    with pytest.raises(client.ApiException) as refused:
        api.create_namespaced_event(cluster_api.namespace, body)
    assert refused.value.status == 422 and 'type: Invalid value: "": has invalid value: Info' in json.loads(
        refused.value.body)["message"]
    created = api.create_namespaced_event(cluster_api.namespace, {**body, "type": "Normal"})
    patched = api.patch_namespaced_event("e1", cluster_api.namespace,
                                         {"series": {"count": 2, "lastObservedTime": "2026-12-01T12:01:00.000000Z"}},
                                         _content_type="application/merge-patch+json")
    assert patched.series.count == 2
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(client.ApiException) as immutable:
        api.patch_namespaced_event("e1", cluster_api.namespace, {"reason": "Other"},
                                   _content_type="application/merge-patch+json")
    assert immutable.value.status == 422
    assert 'reason: Invalid value: "Other": field is immutable' in json.loads(immutable.value.body)["message"]


def test_the_live_scheduler_emits_scheduled_and_failed_scheduling_events(
        start_scheduler: Callable[..., ClusterScheduler], cluster_api: cluster.Cluster,
        kube_api: ApiClient) -> None:
    cluster_api.add_pod("pod-0", runs=1)
    cluster_api.add_run("fits")
    cluster_api.add_run("too-big", requests={"runs": "5"})
    start_scheduler(event_interval=0.2)
    wait_for(lambda: cluster_api.phases().get("fits") == "Scheduled", what="the Run placed")

    def reasons() -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {}
        for e in listed(kube_api, cluster_api.namespace):
            found.setdefault(e.regarding.name, []).append(e)
        return found

    found = wait_for(lambda: (lambda f: f if {"fits", "too-big"} <= set(f) else None)(reasons()),
                     what="Events on both Runs")
    assert [e.reason for e in found["fits"]] == ["Scheduled"]
    assert found["fits"][0].note == f"Successfully assigned {cluster_api.namespace}/fits to pod-0"
    assert [e.reason for e in found["too-big"]] == ["FailedScheduling"]
    assert found["too-big"][0].note == cluster_api.pending_message("too-big")
