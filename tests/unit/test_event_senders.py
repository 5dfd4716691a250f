"""The Event recorder's senders: several Events written at once, one Event's writes in order.

With one write at a time, a burst binding ~370 Runs a second got a Scheduled Event
for fewer than a third of them (bench/cluster.py counts them); kube-scheduler sends
each of its Events in a goroutine of its own. The API here is a stand-in that
records what was asked of it and when.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client import ApiException

from kruntimes.cluster import events
from kruntimes.scheduler.projection import RunInfo

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


class Api:
    """`create_namespaced_event` and `patch_namespaced_event`, each held until `hold` lets it go."""

    def __init__(self, hold: Any = None, refuse: int = 0) -> None:
        self.hold = hold or (lambda kind, name: None)
        self.refuse = refuse  # creates to refuse first
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, str]] = []  # (begin|end, create|patch, name)
        self.in_flight = self.most_in_flight = 0

    def _call(self, kind: str, name: str) -> None:
        with self.lock:
            self.calls.append(("begin", kind, name))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            refused = kind == "create" and self.refuse > 0
            self.refuse -= refused
        try:
            self.hold(kind, name)
            if refused:
                raise ApiException(status=500, reason="Internal Server Error")
        finally:
            with self.lock:
                self.in_flight -= 1
                self.calls.append(("end", kind, name))

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self._call("create", body["metadata"]["name"])

    def patch_namespaced_event(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self._call("patch", name)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def recorder(api: Api, senders: int, clock: Clock | None = None) -> events.EventRecorder:
    client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host="http://127.0.0.1:1"))
    r = events.EventRecorder(client, instance="scheduler-a", senders=senders, clock=clock or Clock(),
                             now=lambda: NOW)
    r._events = api
    return r


def run(name: str) -> RunInfo:
    return RunInfo(namespace="team", name=name, uid=f"uid-{name}", resource_version="1")


def test_scheduled_events_are_written_several_at_once() -> None:
    senders = 8
    # Each create waits for `senders` creates to be in flight together: one at a time, all would fail.
    together = threading.Barrier(senders, timeout=10)
    api = Api(hold=lambda kind, name: together.wait())
    r = recorder(api, senders)
    r.start()
    try:
        for i in range(senders * 4):
            r.scheduled(run(f"r{i}"), "python-0")
    finally:
        r.stop(timeout=20)
    assert (r.created, r.failed, r.dropped) == (senders * 4, 0, 0)
    assert api.most_in_flight == senders


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def started_with_slow(slow: str) -> tuple[Api, events.EventRecorder, Clock]:
    """A started recorder of 4 senders whose API takes half a second for each ``slow`` write."""
    clock = Clock()
    api = Api(hold=lambda kind, name: time.sleep(0.5) if kind == slow else None)
    r = recorder(api, senders=4, clock=clock)
    r.start()
    return api, r, clock


def test_a_series_is_patched_only_once_its_create_is_done() -> None:
    api, r, clock = started_with_slow("create")
    try:
        stuck = run("stuck")
        r.failed_scheduling(stuck, "no room")
        r.failed_scheduling(stuck, "no room")
        wait_until(lambda: api.calls)  # the create is in flight
        clock.t += 60
        r.failed_scheduling(stuck, "no room")  # the deciding thread flushes: a patch is due, its create is not done
        wait_until(lambda: ("begin", "patch") in [c[:2] for c in api.calls])
    finally:
        r.stop(timeout=10)
    assert [c[:2] for c in api.calls] == [("begin", "create"), ("end", "create"), ("begin", "patch"),
                                          ("end", "patch")]
    assert len({c[2] for c in api.calls}) == 1  # one Event
    assert (r.created, r.patched, r.failed) == (1, 1, 0)


def test_a_series_has_one_patch_in_flight_at_a_time() -> None:
    api, r, clock = started_with_slow("patch")
    try:
        stuck = run("stuck")
        r.failed_scheduling(stuck, "no room")
        wait_until(lambda: r.created == 1)
        for _ in range(3):  # three patches due while the first is held
            clock.t += 60
            r.failed_scheduling(stuck, "no room")
            time.sleep(0.05)
        wait_until(lambda: r.patched == 2)
    finally:
        r.stop(timeout=10)
    patches = [c[0] for c in api.calls if c[1] == "patch"]
    assert patches == ["begin", "end", "begin", "end"] and api.most_in_flight == 1


@pytest.mark.parametrize("started", [False, True])
def test_a_refused_create_is_forgotten_and_the_next_occurrence_creates_the_event_again(started: bool) -> None:
    clock = Clock()
    api = Api(refuse=1)
    r = recorder(api, senders=2, clock=clock)
    stuck = run("stuck")
    if started:
        r.start()
        r.failed_scheduling(stuck, "no room")
        deadline = time.monotonic() + 10
        while r.failed == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        clock.t += 60  # its retry is not held back by the interval of a write that never landed
        r.failed_scheduling(stuck, "no room")
        r.stop(timeout=10)
    else:
        r.handle(events.Occurrence(stuck, events.FAILED_SCHEDULING, "no room", NOW))
        clock.t += 60
        r.handle(events.Occurrence(stuck, events.FAILED_SCHEDULING, "no room", NOW))
        r.flush()
    creates = [c[2] for c in api.calls if c[:2] == ("begin", "create")]
    assert len(creates) == 2 and creates[0] != creates[1]
    assert not [c for c in api.calls if c[1] == "patch"]
    assert (r.created, r.patched, r.failed) == (1, 0, 1)


def test_an_abandoned_recorder_writes_nothing_more() -> None:
    release = threading.Event()
    api = Api(hold=lambda kind, name: release.wait(10))
    r = recorder(api, senders=1)
    r.start()
    for i in range(5):
        r.scheduled(run(f"r{i}"), "python-0")
    deadline = time.monotonic() + 10
    while not api.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    threading.Timer(0.2, release.set).start()
    r.abandon(timeout=10)
    assert [c[:2] for c in api.calls] == [("begin", "create"), ("end", "create")]  # the one in flight only


def test_a_recorder_needs_a_sender() -> None:
    with pytest.raises(ValueError, match="at least one sender"):
        recorder(Api(), senders=0)
