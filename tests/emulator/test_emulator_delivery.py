"""When watch events arrive, pinned against "API Concepts" and the API server's watch cache.

- A watch learns of a write after it committed, and each resource's changes travel on
  their own (one watch cache per resource): the emulator publishes a change once its
  write was answered, and ``lag``/``hold`` let a test delay one resource's changes while
  each watch still sees its resource in resourceVersion order.
- Bookmarks: about every minute, plus one shortly before ``timeoutSeconds`` ends the watch.
- A watch from a resourceVersion the server has not reached waits a little, then ends
  with an ERROR event carrying a 504 Timeout Status ("Too large resource version").
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

from kubernetes import client, watch

from tests.emulator import resources
from tests.emulator.manifests import GROUP, VERSION, namespace, pod, run
from tests.emulator.server import Emulator

NS = "ns"


def setup(factory: Callable[..., Emulator], **options: Any) -> tuple[Emulator, client.CoreV1Api,
                                                                    client.CustomObjectsApi]:
    emulator = factory(**options)
    api = emulator.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace(namespace(NS))
    return emulator, core, client.CustomObjectsApi(api)


def arrivals(stream: Any, count: int, into: list[tuple[float, str, str]]) -> threading.Thread:
    """Collect (arrival time, type, name) of the next ``count`` events of ``stream`` on a thread."""
    def collect() -> None:
        for event in stream:
            into.append((time.monotonic(), event["type"], event["raw_object"]["metadata"].get("name", "")))
            if len(into) == count:
                stream.close()
                return
    thread = threading.Thread(target=collect)
    thread.start()
    return thread


def test_a_change_reaches_watches_only_after_its_request_was_answered(emulator: Emulator) -> None:
    core = client.CoreV1Api(emulator.api_client())
    core.create_namespace(namespace(NS))
    start = core.list_namespaced_pod(NS).metadata.resource_version
    seen: list[tuple[float, str, str]] = []
    thread = arrivals(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=start,
                                           timeout_seconds=5), 1, seen)
    store = emulator.store
    store.begin_request()  # as the handler does around a request
    store.create(resources.POD, NS, pod("a"))
    time.sleep(0.3)
    assert seen == []  # committed, readable, but not yet answered
    answered = time.monotonic()
    store.end_request()
    thread.join()
    assert [(t, n) for _, t, n in seen] == [("ADDED", "a")] and seen[0][0] >= answered


def test_a_lagging_resource_is_overtaken_by_another_resources_later_change(
        emulator_factory: Callable[..., Emulator]) -> None:
    emulator, core, custom = setup(emulator_factory)
    emulator.lag("pods", 0.5)
    pod_events: list[tuple[float, str, str]] = []
    run_events: list[tuple[float, str, str]] = []
    pods = arrivals(watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=5), 2, pod_events)
    runs = arrivals(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS, "runs",
                                         timeout_seconds=5), 1, run_events)
    time.sleep(0.2)  # both watches open
    written = time.monotonic()
    core.create_namespaced_pod(NS, pod("p1"))
    core.create_namespaced_pod(NS, pod("p2"))
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, "runs", run("r"))
    pods.join()
    runs.join()
    seen = sorted(pod_events + run_events)
    assert [n for _, _, n in seen] == ["r", "p1", "p2"]  # the pods in their own order, after the Run
    assert seen[1][0] - written >= 0.5


def test_held_changes_come_in_order_once_released(emulator_factory: Callable[..., Emulator]) -> None:
    emulator, core, custom = setup(emulator_factory)
    emulator.hold("runs")
    start = core.list_namespaced_pod(NS).metadata.resource_version
    for name in ("a", "b"):
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "runs", run(name))
    seen: list[tuple[float, str, str]] = []
    thread = arrivals(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS, "runs",
                                           resource_version=start, timeout_seconds=5), 2, seen)
    time.sleep(0.3)
    assert seen == []
    emulator.release("runs")
    thread.join()
    assert [(t, n) for _, t, n in seen] == [("ADDED", "a"), ("ADDED", "b")]


def test_one_bookmark_comes_shortly_before_the_deadline_when_the_interval_is_a_minute(
        emulator_factory: Callable[..., Emulator]) -> None:
    _, core, _ = setup(emulator_factory, bookmark_interval=60.0, bookmark_lead=0.5)
    start = core.list_namespaced_pod(NS).metadata.resource_version
    opened = time.monotonic()
    events = [(time.monotonic() - opened, e["type"]) for e in watch.Watch().stream(
        core.list_namespaced_pod, NS, resource_version=start, allow_watch_bookmarks=True, timeout_seconds=2)]
    assert [kind for _, kind in events] == ["BOOKMARK"]
    assert 1.3 <= events[0][0] < 2.0


def test_a_watch_from_a_future_resource_version_ends_with_a_504_error_event(
        emulator_factory: Callable[..., Emulator]) -> None:
    emulator, core, _ = setup(emulator_factory, fresh_wait=0.2)
    future = emulator.store.resource_version + 100
    response = core.list_namespaced_pod(NS, watch=True, resource_version=str(future), _preload_content=False)
    try:
        lines = [json.loads(line) for line in response.read().splitlines()]
    finally:
        response.release_conn()
    assert [line["type"] for line in lines] == ["ERROR"]
    status = lines[0]["object"]
    assert (status["code"], status["reason"]) == (504, "Timeout")
    assert "Too large resource version" in status["message"]
    assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_a_watch_from_a_version_reached_while_it_waits_streams_normally(
        emulator_factory: Callable[..., Emulator]) -> None:
    emulator, core, _ = setup(emulator_factory, fresh_wait=2.0)
    next_version = str(emulator.store.resource_version + 1)
    timer = threading.Timer(0.3, lambda: core.create_namespaced_pod(NS, pod("a")))
    timer.start()
    seen: list[tuple[float, str, str]] = []
    thread = arrivals(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=next_version,
                                           timeout_seconds=3), 1, seen)
    timer.join()
    core.create_namespaced_pod(NS, pod("b"))
    thread.join()
    assert [(t, n) for _, t, n in seen] == [("ADDED", "b")]  # "a" is the version it started from
