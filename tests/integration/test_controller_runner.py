"""The Runtime controller through the real client: pods, capacity projection, lost Runs, status (SPEC §4.2).

Holds on the emulator and on a real cluster alike: the template names a scheduler
nobody serves, so no kubelet runs the pods; the test writes their Ready condition.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterator

import pytest
from kubernetes.client import ApiClient

from kruntimes.api import models
from kruntimes.cluster.settings import LeaseSettings
from kruntimes.controller.reconcile import CAPACITY_ANNOTATION, DEVICES_ANNOTATION
from kruntimes.controller.runner import ControllerRunner
from tests.emulator import manifests
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for

TEMPLATE = {"metadata": {"labels": {"app": "python"}},
            "spec": {"schedulerName": manifests.UNSERVED_SCHEDULER,
                     "containers": [{"name": "runtimed", "image": "example.com/python-runtime:1"}]}}


@pytest.fixture
def controller(kube_api: ApiClient, kube_namespace: str) -> Iterator[ControllerRunner]:
    runner = ControllerRunner(kube_api, kube_namespace, resync_period=0.5).start()
    yield runner
    runner.stop()


def create_runtime(c: Cluster, replicas: int, capacity: dict[str, Any]) -> None:
    body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": "python"},
            "spec": {"replicas": replicas, "template": TEMPLATE, "capacity": {"resources": capacity}}}
    c.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, c.namespace, "runtimes", body)


def patch_runtime(c: Cluster, spec: dict[str, Any]) -> None:
    c.custom.patch_namespaced_custom_object(models.GROUP, models.VERSION, c.namespace, "runtimes", "python",
                                            {"spec": spec}, _content_type="application/merge-patch+json")


def runtime_status(c: Cluster) -> dict[str, Any]:
    obj = c.custom.get_namespaced_custom_object(models.GROUP, models.VERSION, c.namespace, "runtimes", "python")
    return obj.get("status") or {}


def pods(c: Cluster) -> list[Any]:
    listed = c.core.list_namespaced_pod(c.namespace, label_selector=f"{models.RUNTIME_LABEL}=python").items
    return sorted((p for p in listed if p.metadata.deletion_timestamp is None), key=lambda p: p.metadata.name)


def wait_pods(c: Cluster, count: int, check: Callable[[list[Any]], bool] = lambda ps: True) -> list[Any]:
    return wait_for(lambda: (ps := pods(c)) and len(ps) == count and check(ps) and ps, timeout=20,
                    what=f"{count} runtime pods")


def test_a_runtime_gets_its_pods_with_capacity_owner_and_label_and_reports_ready_replicas(
        cluster_api: Cluster, controller: ControllerRunner) -> None:
    create_runtime(cluster_api, 2, {"runs": "2", "example.com/gpu": "1"})
    created = wait_pods(cluster_api, 2)
    for pod in created:
        assert pod.metadata.name.startswith("python-")
        assert pod.metadata.annotations[CAPACITY_ANNOTATION] == '{"example.com/gpu":"1","runs":"2"}'
        (owner,) = pod.metadata.owner_references
        assert (owner.kind, owner.name, owner.controller) == ("Runtime", "python", True)
    cluster_api.set_ready(created[0].metadata.name, True)
    status = wait_for(lambda: (s := runtime_status(cluster_api)).get("readyReplicas") == 1 and s, timeout=20,
                      what="readyReplicas 1")
    assert status["replicas"] == 2
    assert all(c["observedGeneration"] >= 1 for c in status["conditions"])


def test_the_runtime_status_reports_its_observed_generation(
        cluster_api: Cluster, controller: ControllerRunner) -> None:
    create_runtime(cluster_api, 1, {"runs": "1"})
    status = wait_for(lambda: (s := runtime_status(cluster_api)).get("replicas") == 1 and s, timeout=20)
    assert status["observedGeneration"] >= 1


def test_a_capacity_change_is_re_projected_onto_the_existing_pods(
        cluster_api: Cluster, controller: ControllerRunner) -> None:
    create_runtime(cluster_api, 2, {"runs": "2"})
    names = [p.metadata.name for p in wait_pods(cluster_api, 2)]
    patch_runtime(cluster_api, {"capacity": {"resources": {"runs": "3"}}})
    wait_pods(cluster_api, 2, lambda ps: all(p.metadata.annotations[CAPACITY_ANNOTATION] == '{"runs":"3"}'
                                             for p in ps))
    assert [p.metadata.name for p in pods(cluster_api)] == names  # the same pods, not new ones


def test_invalid_capacity_creates_no_pod_and_says_what_to_fix(
        cluster_api: Cluster, controller: ControllerRunner, kube_namespace: str) -> None:
    create_runtime(cluster_api, 1, {"runs": "1"})
    wait_pods(cluster_api, 1)
    patch_runtime(cluster_api, {"replicas": 3, "capacity": {"resources": {"runs": "-1"}}})
    condition = wait_for(lambda: next((c for c in runtime_status(cluster_api).get("conditions", [])
                                       if c["type"] == "CapacityValid" and c["status"] == "False"), None),
                         timeout=20, what="CapacityValid=False")
    assert 'quantity "-1" is not a non-negative whole number' in condition["message"]
    assert len(pods(cluster_api)) == 1


def test_a_pod_deleted_under_a_running_run_is_replaced_and_the_run_ends_runtime_pod_lost(
        cluster_api: Cluster, controller: ControllerRunner) -> None:
    create_runtime(cluster_api, 2, {"runs": "2"})
    victim = wait_pods(cluster_api, 2)[0]
    cluster_api.add_run("r")
    current = cluster_api.run("r")
    current["status"] = {"phase": "Running", "assignment": {"podName": victim.metadata.name,
                                                            "podUID": victim.metadata.uid}}
    cluster_api.custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, cluster_api.namespace,
                                                               "runs", "r", current)
    cluster_api.core.delete_namespaced_pod(victim.metadata.name, cluster_api.namespace, grace_period_seconds=0)
    wait_for(lambda: cluster_api.phases()["r"] == "Failed", timeout=20, what="the Run Failed")
    completed = next(c for c in cluster_api.run("r")["status"]["conditions"] if c["type"] == "Completed")
    assert completed["reason"] == "RuntimePodLost"
    wait_pods(cluster_api, 2, lambda ps: victim.metadata.name not in [p.metadata.name for p in ps])


def test_scaling_down_deletes_the_idle_pod_and_keeps_the_busy_one(
        cluster_api: Cluster, controller: ControllerRunner) -> None:
    create_runtime(cluster_api, 2, {"runs": "2"})
    busy = wait_pods(cluster_api, 2)[1]
    cluster_api.add_run("r")
    current = cluster_api.run("r")
    current["status"] = {"phase": "Running", "assignment": {"podName": busy.metadata.name,
                                                            "podUID": busy.metadata.uid}}
    cluster_api.custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, cluster_api.namespace,
                                                               "runs", "r", current)
    wait_for(lambda: controller.runs.objects.get((cluster_api.namespace, "r"), {}).get("status"), timeout=10)
    patch_runtime(cluster_api, {"replicas": 1})
    remaining = wait_pods(cluster_api, 1)
    assert remaining[0].metadata.name == busy.metadata.name
    assert json.loads(remaining[0].metadata.annotations[CAPACITY_ANNOTATION]) == {"runs": "2"}


def test_with_leader_election_only_the_leader_writes_and_a_standby_takes_over_when_it_stops(
        cluster_api: Cluster, kube_api: ApiClient, kube_namespace: str) -> None:
    def elected(identity: str) -> ControllerRunner:
        lease = LeaseSettings(name="kruntimes-controller", namespace=kube_namespace, identity=identity,
                              duration=2, renew_deadline=1.0, retry_period=0.1)
        return ControllerRunner(kube_api, kube_namespace, resync_period=0.5, lease=lease).start()

    first = elected("controller-a")
    wait_for(lambda: first.elector is not None and first.elector.is_leader(), timeout=10, what="a leader")
    second = elected("controller-b")
    try:
        create_runtime(cluster_api, 2, {"runs": "1"})
        wait_pods(cluster_api, 2)
        wait_for(lambda: first.passes > 0, timeout=10, what="the leader's first pass")
        assert second.passes == 0
        first.stop()
        patch_runtime(cluster_api, {"replicas": 3})
        wait_pods(cluster_api, 3)
        wait_for(lambda: second.passes > 0, timeout=10, what="the standby's first pass")  # counted after its writes
    finally:
        first.stop()
        second.stop()


def test_deleting_a_runtime_lets_the_garbage_collector_remove_its_pods_and_none_come_back(
        cluster_api: Cluster, controller: ControllerRunner) -> None:
    # The controller leaves this to the owner references it writes ("Garbage Collection",
    # background cascading deletion), as kruntimes.controller.runner says.
    create_runtime(cluster_api, 2, {"runs": "1"})
    wait_pods(cluster_api, 2)
    cluster_api.custom.delete_namespaced_custom_object(models.GROUP, models.VERSION, cluster_api.namespace,
                                                       "runtimes", "python")
    wait_for(lambda: not cluster_api.core.list_namespaced_pod(
        cluster_api.namespace, label_selector=f"{models.RUNTIME_LABEL}=python").items, timeout=30,
        what="the Runtime's pods collected")
    time.sleep(1.5)  # three of the controller's resyncs
    assert pods(cluster_api) == []


def test_a_runtimes_devices_are_projected_and_a_change_is_re_projected(
        cluster_api: Cluster, controller: ControllerRunner) -> None:
    one = {"driver": "gpu.example.com", "devices": [{"name": "gpu-0"}]}
    two = {"driver": "gpu.example.com", "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}
    create_runtime(cluster_api, 1, {"runs": "2"})
    patch_runtime(cluster_api, {"devices": one})
    wait_pods(cluster_api, 1, lambda ps: ps[0].metadata.annotations.get(DEVICES_ANNOTATION)
              == '{"devices":[{"name":"gpu-0"}],"driver":"gpu.example.com"}')
    patch_runtime(cluster_api, {"devices": two})
    wait_pods(cluster_api, 1, lambda ps: json.loads(ps[0].metadata.annotations.get(DEVICES_ANNOTATION) or "{}")
              .get("devices") == [{"name": "gpu-0"}, {"name": "gpu-1"}])
    patch_runtime(cluster_api, {"devices": None})
    wait_pods(cluster_api, 1, lambda ps: DEVICES_ANNOTATION not in (ps[0].metadata.annotations or {}))


def test_a_scale_down_seen_late_deletes_one_pod_not_one_per_pass(
        emulator: Emulator, cluster_api: Cluster, controller: ControllerRunner) -> None:
    # The deletion reaches the controller's cache only after several passes (a lagging
    # watch): the pod it deleted counts as terminating meanwhile, so no pass deletes again
    # (each again was another delete, another SuccessfulDelete Event and count).
    def deletes(method: str, path: str) -> bool:
        return method == "DELETE" and "/pods/" in path

    create_runtime(cluster_api, 3, {"runs": "1"})
    wait_for(lambda: len([p for (ns, _), p in controller.pods.objects.items() if ns == cluster_api.namespace]) == 3,
             timeout=20, what="three pods in the controller's cache")
    emulator.hold("pods")
    try:
        patch_runtime(cluster_api, {"replicas": 2})
        passes = controller.passes
        wait_for(lambda: controller.passes >= passes + 4, timeout=20, what="four passes with the deletion unseen")
        assert len(pods(cluster_api)) == 2 and emulator.hits_of(deletes) == 1
    finally:
        emulator.release("pods")
    wait_for(lambda: len([p for (ns, _), p in controller.pods.objects.items() if ns == cluster_api.namespace]) == 2,
             timeout=20, what="the deletion seen")
    assert len(pods(cluster_api)) == 2 and emulator.hits_of(deletes) == 1
