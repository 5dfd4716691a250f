"""The emulator's watches and faults, pinned through ``kubernetes.watch.Watch`` against the docs.

Kubernetes "API Concepts", efficient detection of changes: a watch from a
resourceVersion delivers every change after it, in order; without one it starts with
synthetic ADDED events for what exists; once that resourceVersion is older than the
server's history the watch fails with 410 Gone (sent in-stream as an ERROR event
carrying a Status); with ``allowWatchBookmarks`` the server may send BOOKMARK events
whose object has only ``metadata.resourceVersion`` set; ``timeoutSeconds`` ends the
watch. Most of these need the emulator (a real server decides when history is
compacted and when bookmarks come), so they take ``emulator``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Iterator

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client import ApiClient, ApiException

from tests.emulator.server import Emulator
from tests.emulator.manifests import GROUP, VERSION, namespace, pod, run


def with_namespaces(emulator: Emulator) -> ApiClient:
    """A client for ``emulator``, whose namespaces "ns" and "other" exist (creates elsewhere are 404)."""
    api_client = emulator.api_client()
    for name in ("ns", "other"):
        client.CoreV1Api(api_client).create_namespace(namespace(name))
    return api_client


@pytest.fixture
def api(emulator: Emulator) -> Iterator[ApiClient]:
    api_client = with_namespaces(emulator)
    yield api_client
    api_client.close()


@pytest.fixture
def core(api: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def later(action: Callable[[], Any], threads: list[threading.Thread], delay: float = 0.1) -> None:
    """Run ``action`` on another thread after ``delay`` (the caller joins ``threads``)."""
    def act() -> None:
        time.sleep(delay)
        action()
    thread = threading.Thread(target=act)
    thread.start()
    threads.append(thread)


def take(stream: Iterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The next ``count`` events, then close the watch (``timeoutSeconds`` is whole seconds)."""
    events = [next(stream) for _ in range(count)]
    stream.close()  # type: ignore[attr-defined]
    return events


def names(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in events]


# --- starting points -------------------------------------------------------------------

def test_a_watch_without_a_resource_version_starts_with_what_exists(core: client.CoreV1Api) -> None:
    for name in ("b", "a"):
        core.create_namespaced_pod("ns", pod(name))
    events = take(watch.Watch().stream(core.list_namespaced_pod, "ns"), 2)
    assert names(events) == [("ADDED", "a"), ("ADDED", "b")]


def test_a_watch_from_a_resource_version_gets_every_later_change_in_order(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_pod("ns").metadata.resource_version
    core.create_namespaced_pod("ns", pod("a"))
    core.patch_namespaced_pod("a", "ns", {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("a", "ns")
    core.create_namespaced_pod("other", pod("elsewhere"))
    events = list(watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=start,
                                       timeout_seconds=1))
    assert names(events) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    versions = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_live_changes_arrive_on_an_open_watch(core: client.CoreV1Api) -> None:
    threads: list[threading.Thread] = []
    later(lambda: core.create_namespaced_pod("ns", pod("a")), threads)
    stream = watch.Watch().stream(core.list_namespaced_pod, "ns", timeout_seconds=2)
    first = next(stream)
    stream.close()
    for thread in threads:
        thread.join()
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "a")


def test_custom_resources_are_watched_through_custom_objects_api(api: ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, "ns", "runs", run("r"))
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, "ns", "runs", "r", {"status": {"phase": "Pending"}})
    events = take(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "ns", "runs",
                                       resource_version="0"), 1)
    assert [(e["type"], e["object"]["status"]["phase"]) for e in events] == [("ADDED", "Pending")]


def test_an_object_leaving_or_entering_the_selection_is_deleted_or_added(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_pod("ns").metadata.resource_version
    core.create_namespaced_pod("ns", pod("a", {"role": "runtime"}))
    core.patch_namespaced_pod("a", "ns", {"metadata": {"labels": {"role": None}}})
    core.patch_namespaced_pod("a", "ns", {"metadata": {"labels": {"role": "runtime"}}})
    events = take(watch.Watch().stream(core.list_namespaced_pod, "ns", label_selector="role=runtime",
                                       resource_version=start), 3)
    assert names(events) == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "a")]


# --- 410 Gone --------------------------------------------------------------------------

def test_a_watch_from_a_resource_version_older_than_the_history_is_410(
        emulator_factory: Callable[..., Emulator]) -> None:
    emulator = emulator_factory(history_size=3)
    api = with_namespaces(emulator)
    core = client.CoreV1Api(api)
    start = core.list_namespaced_pod("ns").metadata.resource_version
    for index in range(5):
        core.create_namespaced_pod("ns", pod(f"p{index}"))
    with pytest.raises(ApiException) as caught:
        list(watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=start))
    api.close()
    assert caught.value.status == 410


def test_the_410_comes_in_stream_as_an_error_event_with_a_status(emulator: Emulator, core: client.CoreV1Api) -> None:
    start = core.list_namespaced_pod("ns").metadata.resource_version
    core.create_namespaced_pod("ns", pod("a"))
    emulator.compact()
    response = core.list_namespaced_pod("ns", watch=True, resource_version=start, _preload_content=False)
    try:
        assert response.status == 200
        lines = [json.loads(line) for line in response.read().splitlines()]
    finally:
        response.release_conn()
    assert len(lines) == 1 and lines[0]["type"] == "ERROR"
    status = lines[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert "too old resource version" in status["message"]


def test_a_watcher_resumes_from_its_last_resource_version_after_a_clean_drop(
        emulator: Emulator, core: client.CoreV1Api) -> None:
    threads: list[threading.Thread] = []
    later(lambda: core.create_namespaced_pod("ns", pod("a")), threads)
    stream = watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version="0")
    seen = [next(stream)]

    def drop_then_write() -> None:
        emulator.drop_watches()
        core.create_namespaced_pod("ns", pod("b"))
    later(drop_then_write, threads)
    seen.append(next(stream))  # Watch.stream re-watched from the version of "a" by itself
    stream.close()
    for thread in threads:
        thread.join()
    assert names(seen) == [("ADDED", "a"), ("ADDED", "b")]
    assert emulator.requests[("watch", "pods", None)] == 2


def test_an_abrupt_drop_breaks_the_connection(emulator: Emulator, core: client.CoreV1Api) -> None:
    threads: list[threading.Thread] = []
    core.create_namespaced_pod("ns", pod("a"))
    stream = watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version="0")
    assert next(stream)["type"] == "ADDED"
    later(lambda: emulator.drop_watches(abrupt=True), threads)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        next(stream)
    for thread in threads:
        thread.join()


# --- bookmarks and timeouts ------------------------------------------------------------

def test_bookmarks_carry_only_the_current_resource_version(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("ns", pod("a"))
    events = list(watch.Watch().stream(core.list_namespaced_pod, "ns", allow_watch_bookmarks=True,
                                       resource_version=created.metadata.resource_version, timeout_seconds=1))
    bookmarks = [e["raw_object"] for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks and all(b == {"kind": "Pod", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": created.metadata.resource_version}}
                             for b in bookmarks)


def test_no_bookmarks_unless_asked(core: client.CoreV1Api) -> None:
    events = list(watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version="0", timeout_seconds=1))
    assert events == []


def test_timeout_seconds_ends_the_watch(core: client.CoreV1Api) -> None:
    started = time.monotonic()
    assert list(watch.Watch().stream(core.list_namespaced_pod, "ns", timeout_seconds=1)) == []
    assert 0.9 <= time.monotonic() - started < 3


def test_stopping_the_emulator_ends_open_watches(emulator_factory: Callable[..., Emulator]) -> None:
    emulator = emulator_factory()
    api = with_namespaces(emulator)
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("ns", pod("a"))
    stream = watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version="0", timeout_seconds=30)
    next(stream)
    emulator.stop()
    assert list(stream) == []
    api.close()


# --- faults ----------------------------------------------------------------------------

def test_fail_next_answers_500_then_recovers(emulator: Emulator, core: client.CoreV1Api) -> None:
    emulator.fail_next(2)
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            core.list_namespaced_pod("ns")
        assert caught.value.status == 500 and json.loads(caught.value.body)["reason"] == "InternalError"
    assert core.list_namespaced_pod("ns").items == []


def test_fail_next_can_target_some_requests(emulator: Emulator, api: ApiClient) -> None:
    emulator.fail_next(1, when=lambda method, path: method == "PUT" and path.endswith("/status"))
    custom = client.CustomObjectsApi(api)
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "ns", "runs", run("r"))
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object_status(GROUP, VERSION, "ns", "runs", "r",
                                                       {**created, "status": {"phase": "Scheduled"}})
    assert caught.value.status == 500


def test_latency_delays_every_request(emulator: Emulator, core: client.CoreV1Api) -> None:
    emulator.set_latency(0.2)
    started = time.monotonic()
    core.list_namespaced_pod("ns")
    assert time.monotonic() - started >= 0.2
