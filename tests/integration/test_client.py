"""The scheduler's Kubernetes client and binder on the wire: writes sent once, outcomes classified.

SPEC §3.2 step 6 (amended 2026-12-01): client-level retries of writes are off, and
a write that may have landed (sent, not answered) is told apart from one that
surely did not (refused, never connected), because only the first keeps its
assumption. The server's hit count proves what was sent (`tests.emulator.faults`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

import kubernetes.client
import pytest
import urllib3
from kubernetes.client import ApiClient, ApiException

from kruntimes.cli import scheduler_cmd
from kruntimes.cluster import client as cluster_client
from kruntimes.cluster import errors
from kruntimes.cluster.binder.kube import KubernetesBinder
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.scheduler.projection import RunInfo
from tests.emulator.faults import Match
from tests.emulator.manifests import GROUP, VERSION, lease, namespace, run
from tests.emulator.server import Emulator
from tests.integration import cluster

NS = "ns"


@pytest.fixture(autouse=True)
def namespace_exists(emulator: Emulator) -> None:
    """Every test here writes into NS on the emulator; a real server refuses creates elsewhere (404)."""
    kubernetes.client.CoreV1Api(emulator.api_client()).create_namespace(namespace(NS))


def policy_client(emulator: Emulator) -> ApiClient:
    return ApiClient(cluster_client.configure(emulator.api_client().configuration))


def runs_path(method: str, name: str = "r") -> Match:
    return lambda m, path: m == method and (path.endswith(f"/runs/{name}") or path.endswith(f"/runs/{name}/status"))


def create_run(emulator: Emulator, name: str = "r") -> dict[str, Any]:
    return dict(kubernetes.client.CustomObjectsApi(emulator.api_client()).create_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", run(name)))


WRITES: dict[str, Callable[[kubernetes.client.CustomObjectsApi, dict[str, Any]], Any]] = {
    "PUT": lambda api, obj: api.replace_namespaced_custom_object_status(
        GROUP, VERSION, NS, "runs", "r", {**obj, "status": {"phase": "Scheduled"}}, _request_timeout=0.2),
    "PATCH": lambda api, obj: api.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", "r", {"metadata": {"labels": {"a": "b"}}}, _request_timeout=0.2),
    "DELETE": lambda api, obj: api.delete_namespaced_custom_object(GROUP, VERSION, NS, "runs", "r",
                                                                   _request_timeout=0.2),
}


@pytest.mark.parametrize("method", sorted(WRITES))
def test_a_write_that_times_out_is_sent_exactly_once_whatever_its_method(emulator: Emulator, method: str) -> None:
    obj = create_run(emulator)
    match = lambda m, path: m == method and "/runs/r" in path  # noqa: E731
    emulator.delay(0.6, match)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        WRITES[method](kubernetes.client.CustomObjectsApi(policy_client(emulator)), obj)
    assert emulator.hits_of(match) == 1


def test_a_create_whose_connection_drops_is_sent_exactly_once(emulator: Emulator) -> None:
    emulator.drop(lambda m, path: m == "POST" and path.endswith("/leases"))
    with pytest.raises(urllib3.exceptions.ProtocolError):
        kubernetes.client.CoordinationV1Api(policy_client(emulator)).create_namespaced_lease(NS, lease("l", "me"))
    assert emulator.hits_of(lambda m, path: m == "POST" and path.endswith("/leases")) == 1


def test_a_read_whose_connection_drops_is_sent_once_more_and_succeeds(emulator: Emulator) -> None:
    create_run(emulator)
    reads = lambda m, path: m == "GET" and path.endswith("/runs/r")  # noqa: E731
    emulator.drop(reads)
    got = kubernetes.client.CustomObjectsApi(policy_client(emulator)).get_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", "r")
    assert got["metadata"]["name"] == "r" and emulator.hits_of(reads) == 2


def test_a_throttled_read_is_handed_to_the_caller_not_slept_on(emulator: Emulator) -> None:
    create_run(emulator)
    reads = lambda m, path: m == "GET" and path.endswith("/runs/r")  # noqa: E731
    emulator.throttle(reads, retry_after=30)
    with pytest.raises(ApiException) as caught:
        kubernetes.client.CustomObjectsApi(policy_client(emulator)).get_namespaced_custom_object(
            GROUP, VERSION, NS, "runs", "r")
    assert caught.value.status == 429 and errors.retry_after(caught.value) == 30
    assert emulator.hits_of(reads) == 1


def test_the_cluster_scheduler_never_uses_a_client_that_re_sends_writes(
        emulator: Emulator, kube_namespace: str) -> None:
    default = emulator.api_client()
    assert not cluster_client.never_retries_writes(default)
    scheduler = ClusterScheduler(default, cluster.settings(kube_namespace))
    try:
        assert cluster_client.never_retries_writes(scheduler.api)
        assert scheduler.api.configuration.host == emulator.host
    finally:
        scheduler.stop()


def test_the_scheduler_command_builds_its_client_with_the_policy(emulator: Emulator, tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "e",
        "clusters": [{"name": "e", "cluster": {"server": emulator.host}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "e", "context": {"cluster": "e", "user": "u"}}]}))
    api = scheduler_cmd.api_client(argparse.Namespace(kubeconfig=str(config), context=None), pool_size=4)
    assert cluster_client.never_retries_writes(api)


def run_info(obj: dict[str, Any]) -> RunInfo:
    return RunInfo(namespace=NS, name=obj["metadata"]["name"], uid=obj["metadata"]["uid"],
                   resource_version=obj["metadata"]["resourceVersion"])


def test_observe_reads_the_runs_version_and_assignment_and_none_once_it_is_gone(emulator: Emulator) -> None:
    binder = KubernetesBinder(policy_client(emulator))
    obj = create_run(emulator)
    info = run_info(obj)
    binder.update_status(info, {"phase": "Scheduled", "assignment": {"podName": "p", "podUID": "pu"}})
    seen = binder.observe(info)
    assert seen is not None and (seen.uid, seen.phase, seen.pod_uid) == (info.uid, "Scheduled", "pu")
    assert int(seen.resource_version) > int(info.resource_version)
    kubernetes.client.CustomObjectsApi(emulator.api_client()).delete_namespaced_custom_object(
        GROUP, VERSION, NS, "runs", "r")
    assert binder.observe(info) is None
