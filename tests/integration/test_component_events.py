"""Events from the Runtime controller and runtimed, through the real client, on the API emulator (issue 27).

What `kubectl describe runtime` and `kubectl describe run` should show besides the
scheduler's Scheduled and FailedScheduling: the controller's Runtime Pods created and
deleted and a template it cannot build from (once, not every pass), and runtimed's
Admitted, Started and Completed or Failed on each Run it runs. Each reporter names
itself (``reportingController``) and its instance.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry

from kruntimes import wire
from kruntimes.api import models
from kruntimes.controller.metrics import ControllerMetrics
from kruntimes.controller.runner import ControllerRunner
from kruntimes.runtimed.agent import Agent, Settings
from kruntimes.scheduler import status as st
from tests.emulator import manifests
from tests.integration import cluster

PY = sys.executable
CONTAINER = {"name": "runtimed", "image": "example.com/python-runtime:1"}


def create_runtime(c: cluster.Cluster, name: str, replicas: int, containers: list[Any]) -> None:
    body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": name},
            "spec": {"replicas": replicas, "capacity": {"resources": {"runs": "2"}},
                     "template": {"spec": {"schedulerName": manifests.UNSERVED_SCHEDULER, "containers": containers}}}}
    c.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, c.namespace, "runtimes", body)


def described(kube_api: ApiClient, namespace: str, kind: str, name: str) -> list[Any]:
    """The Events about one object, oldest first: what `kubectl describe` lists."""
    found = client.EventsV1Api(kube_api).list_namespaced_event(namespace).items
    return sorted((e for e in found if e.regarding.kind == kind and e.regarding.name == name),
                  key=lambda e: e.event_time)


def reasons(kube_api: ApiClient, namespace: str, kind: str, name: str) -> list[str]:
    return [e.reason for e in described(kube_api, namespace, kind, name)]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def controller(kube_api: ApiClient, kube_namespace: str, registry: CollectorRegistry) -> Iterator[ControllerRunner]:
    runner = ControllerRunner(kube_api, kube_namespace, resync_period=0.3, instance="controller-a",
                              metrics=ControllerMetrics(registry)).start()
    yield runner
    runner.stop()


def test_the_controller_tells_a_runtime_which_pods_it_created_and_deleted(
        cluster_api: cluster.Cluster, kube_api: ApiClient, controller: ControllerRunner,
        registry: CollectorRegistry) -> None:
    ns = cluster_api.namespace
    create_runtime(cluster_api, "python", 2, [CONTAINER])
    def creates() -> list[Any]:
        return [e for e in described(kube_api, ns, "Runtime", "python") if e.reason == "SuccessfulCreate"]

    created = cluster.wait_for(lambda: len(creates()) == 2 and creates(), timeout=20, what="two SuccessfulCreate")
    pods = {p.metadata.name for p in cluster_api.core.list_namespaced_pod(ns).items}
    assert {e.note.removeprefix("Created Runtime Pod: ") for e in created} == pods
    for e in created:
        assert (e.type, e.reporting_controller, e.reporting_instance) == (
            "Normal", wire.CONTROLLER_EVENTS_REPORTER, "controller-a")
        assert e.regarding.api_version == f"{models.GROUP}/{models.VERSION}" and e.regarding.uid
    cluster_api.custom.patch_namespaced_custom_object(models.GROUP, models.VERSION, ns, "runtimes", "python",
                                                      {"spec": {"replicas": 1}},
                                                      _content_type="application/merge-patch+json")
    deleted = cluster.wait_for(lambda: [e for e in described(kube_api, ns, "Runtime", "python")
                                        if e.reason == "SuccessfulDelete"], timeout=20, what="a SuccessfulDelete")
    assert len(deleted) == 1 and deleted[0].note.removeprefix("Deleted Runtime Pod: ") in pods
    # The same, counted for the dashboard (deploy/monitoring: the controller's panels).
    assert registry.get_sample_value("kruntimes_controller_runtime_pods_total", {"action": "created"}) == 2
    assert registry.get_sample_value("kruntimes_controller_runtime_pods_total", {"action": "deleted"}) == 1
    assert registry.get_sample_value("kruntimes_controller_reconciles_total", {"result": "ok"}) >= 2
    assert registry.get_sample_value("kruntimes_controller_leader") == 1


def test_a_template_the_controller_cannot_build_from_is_one_warning_not_one_per_pass(
        cluster_api: cluster.Cluster, kube_api: ApiClient, controller: ControllerRunner) -> None:
    ns = cluster_api.namespace
    create_runtime(cluster_api, "broken", 1, [CONTAINER, "sidecar"])
    (warning,) = cluster.wait_for(lambda: described(kube_api, ns, "Runtime", "broken"), timeout=20,
                                  what="the InvalidTemplate Event")
    assert (warning.type, warning.reason) == ("Warning", "InvalidTemplate")
    assert warning.note.startswith("spec.template.spec.containers[1] must be an object")
    passes = controller.passes
    cluster.wait_for(lambda: controller.passes >= passes + 3, timeout=20, what="three more passes")
    assert reasons(kube_api, ns, "Runtime", "broken") == ["InvalidTemplate"]


def bind(c: cluster.Cluster, name: str, pod: dict[str, str], args: list[str]) -> None:
    """A Run bound to ``pod`` as the scheduler's Bind writes it."""
    c.add_run(name, runtime="python", mode={"task": {"args": args}})
    current = c.run(name)
    current["status"] = st.scheduled_status(None, pod["name"], pod["uid"], datetime.now(timezone.utc))
    c.custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, c.namespace, "runs", name, current)


def test_runtimed_tells_each_run_it_was_admitted_started_and_how_it_ended(
        cluster_api: cluster.Cluster, kube_api: ApiClient, controller: ControllerRunner, tmp_path: Path) -> None:
    ns = cluster_api.namespace
    create_runtime(cluster_api, "python", 1, [CONTAINER])
    found = cluster.wait_for(lambda: cluster_api.core.list_namespaced_pod(ns).items, timeout=20, what="its pod")
    pod = {"name": found[0].metadata.name, "uid": found[0].metadata.uid}
    agent = Agent(kube_api, Settings(pod_name=pod["name"], pod_namespace=ns, pod_uid=pod["uid"],
                                     work_dir=tmp_path / "work", heartbeat_period=0.2, settings_namespace=ns,
                                     settings_period=0.2))
    thread = threading.Thread(target=agent.run, name="runtimed-events-test", daemon=True)
    thread.start()
    try:
        bind(cluster_api, "ok", pod, [PY, "-c", "pass"])
        bind(cluster_api, "exits-3", pod, [PY, "-c", "raise SystemExit(3)"])
        for name, end in (("ok", "Completed"), ("exits-3", "Failed")):
            cluster.wait_for(lambda n=name, e=end: reasons(kube_api, ns, "Run", n) == ["Admitted", "Started", e],
                             timeout=30, what=f"{name}: Admitted, Started, {end}")
        ok, failed = described(kube_api, ns, "Run", "ok"), described(kube_api, ns, "Run", "exits-3")
        assert [e.type for e in ok] == ["Normal"] * 3 and [e.type for e in failed] == ["Normal", "Normal", "Warning"]
        assert ok[0].note == f"Admitted on Runtime Pod {pod['name']} by its runtimed"
        assert failed[-1].note.startswith("ProcessFailed: ") and "code 3" in failed[-1].note
        assert {(e.reporting_controller, e.reporting_instance) for e in ok + failed} == {
            (wire.RUNTIMED_EVENTS_REPORTER, pod["name"])}
        assert ok[0].regarding.uid == cluster_api.run("ok")["metadata"]["uid"]
    finally:
        agent.stop()
        thread.join(10)
    assert agent.events._thread is None  # the recorder's thread ended with the agent
