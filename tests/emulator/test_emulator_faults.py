"""The emulator's per-request faults and hit count: each does what the fault-safe bind tests rely on.

SPEC §3.2 step 6 (amended 2026-12-01) is proven against these faults; if one of them
silently did nothing, those tests would pass without testing anything. The writes
here go through a client built with kruntimes' policy (`kruntimes.cluster.client`),
except where the point is that the default client re-sends and the count shows it.
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes.client
import pytest
import urllib3
from kubernetes.client import ApiClient, ApiException

from kruntimes.cluster import client as cluster_client
from tests.emulator.faults import lease_write, status_write
from tests.emulator.manifests import GROUP, VERSION, lease, namespace, run
from tests.emulator.server import Emulator

NS = "ns"


@pytest.fixture(autouse=True)
def namespace_exists(emulator: Emulator) -> None:
    kubernetes.client.CoreV1Api(emulator.api_client()).create_namespace(namespace(NS))


def policy_client(emulator: Emulator) -> ApiClient:
    return ApiClient(cluster_client.configure(emulator.api_client().configuration))


def create_run(emulator: Emulator, name: str = "r") -> dict[str, Any]:
    custom = kubernetes.client.CustomObjectsApi(emulator.api_client())
    return dict(custom.create_namespaced_custom_object(GROUP, VERSION, NS, "runs", run(name)))


def write_status(api: ApiClient, current: dict[str, Any], phase: str, timeout: float = 5.0) -> dict[str, Any]:
    body = {**current, "status": {"phase": phase}}
    return dict(kubernetes.client.CustomObjectsApi(api).replace_namespaced_custom_object_status(
        GROUP, VERSION, NS, "runs", current["metadata"]["name"], body, _request_timeout=timeout))


def read_run(emulator: Emulator, name: str = "r") -> dict[str, Any]:
    return dict(kubernetes.client.CustomObjectsApi(emulator.api_client()).get_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", name))


def phase_of(emulator: Emulator, name: str = "r") -> str | None:
    return (read_run(emulator, name).get("status") or {}).get("phase")


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_write_delayed_past_the_client_timeout_times_out_and_still_lands_afterwards(emulator: Emulator) -> None:
    current = create_run(emulator)
    emulator.delay(0.6, status_write("r"))
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        write_status(policy_client(emulator), current, "Scheduled", timeout=0.2)
    assert phase_of(emulator) is None  # held before it was applied
    wait_until(lambda: emulator.faults.finished["delay"] == 1)
    assert phase_of(emulator) == "Scheduled"
    assert emulator.hits_of(status_write("r")) == 1


def test_the_default_client_re_sends_a_timed_out_write_and_the_hit_count_shows_it(emulator: Emulator) -> None:
    current = create_run(emulator)
    emulator.delay(0.6, status_write("r"))
    write_status(emulator.api_client(), current, "Scheduled", timeout=0.2)  # urllib3's Retry(3) at work
    assert emulator.hits_of(status_write("r")) == 2


def test_a_delay_after_applying_answers_late_but_the_write_is_visible_at_once(emulator: Emulator) -> None:
    current = create_run(emulator)
    emulator.delay(0.6, status_write("r"), apply_first=True)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        write_status(policy_client(emulator), current, "Scheduled", timeout=0.2)
    assert phase_of(emulator) == "Scheduled"


def test_a_drop_before_applying_closes_the_connection_and_changes_nothing(emulator: Emulator) -> None:
    current = create_run(emulator)
    emulator.drop(status_write("r"))
    with pytest.raises(urllib3.exceptions.ProtocolError):
        write_status(policy_client(emulator), current, "Scheduled")
    assert phase_of(emulator) is None
    assert emulator.hits_of(status_write("r")) == 1


def test_a_drop_after_applying_closes_the_connection_but_the_write_landed(emulator: Emulator) -> None:
    current = create_run(emulator)
    emulator.drop(status_write("r"), apply_first=True)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        write_status(policy_client(emulator), current, "Scheduled")
    assert phase_of(emulator) == "Scheduled"
    assert emulator.hits_of(status_write("r")) == 1


def test_throttling_answers_429_with_retry_after_in_plain_text_and_changes_nothing(emulator: Emulator) -> None:
    current = create_run(emulator)
    emulator.throttle(status_write("r"), retry_after=3)
    with pytest.raises(ApiException) as caught:
        write_status(policy_client(emulator), current, "Scheduled")
    assert caught.value.status == 429
    assert caught.value.headers["Retry-After"] == "3"
    assert caught.value.headers["Content-Type"].startswith("text/plain")
    assert str(caught.value.body).startswith("Too many requests")
    assert phase_of(emulator) is None
    assert emulator.hits_of(status_write("r")) == 1


@pytest.mark.parametrize("code", [409, 500])
def test_an_injected_status_answers_that_code_and_changes_nothing(emulator: Emulator, code: int) -> None:
    current = create_run(emulator)
    emulator.answer(code, status_write("r"))
    with pytest.raises(ApiException) as caught:
        write_status(policy_client(emulator), current, "Scheduled")
    assert caught.value.status == code
    assert phase_of(emulator) is None
    assert write_status(policy_client(emulator), current, "Scheduled")["status"] == {"phase": "Scheduled"}


def test_a_fault_hits_only_the_requests_it_matches_and_is_used_up_after_its_count(emulator: Emulator) -> None:
    create_run(emulator, "a")
    current = create_run(emulator, "b")
    emulator.answer(500, status_write("b"), count=2)
    assert phase_of(emulator, "a") is None  # a GET of another Run is not hit
    for _ in range(2):
        with pytest.raises(ApiException):
            write_status(policy_client(emulator), current, "Scheduled")
    assert write_status(policy_client(emulator), current, "Scheduled")["status"]["phase"] == "Scheduled"
    assert emulator.faults.pending == 0 and emulator.faults.fired["answer"] == 2
    assert emulator.hits_of(status_write("b")) == 3


def test_a_throttled_lease_write_is_not_re_sent_by_a_client_with_kruntimes_policy(emulator: Emulator) -> None:
    coordination = kubernetes.client.CoordinationV1Api(policy_client(emulator))
    emulator.throttle(lease_write("POST"), retry_after=1)
    with pytest.raises(ApiException) as caught:
        coordination.create_namespaced_lease(NS, lease("l", "me"))
    assert caught.value.status == 429
    assert emulator.hits_of(lease_write("POST")) == 1


def test_a_duplicated_guarded_write_lands_once_and_answers_the_second_copys_conflict(emulator: Emulator) -> None:
    current = create_run(emulator)
    emulator.duplicate(status_write("r"))
    with pytest.raises(ApiException) as refused:
        write_status(policy_client(emulator), current, "Running")
    assert refused.value.status == 409
    assert phase_of(emulator) == "Running"
    assert emulator.requests[("update", "runs", "status")] == 2 and emulator.hits_of(status_write("r")) == 1
