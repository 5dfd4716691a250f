"""A Runtime whose devices runtimed publishes from `discover`, on the emulator (SPEC §7.1 publisher Runtimed, §7.7).

The controller creates the pod without an inventory and gives runtimed the discover
argv; runtimed, with its own pod-bound identity (so the emulator judges its writes by
deploy/'s runtimed policy), runs discover at start and publishes the canonical
inventory on its pod; the scheduler allocates a device of it and runtimed admits the
Run, whose process is told its device. The controller, resyncing all along, never
writes or removes that annotation. A discover that fails is published as a malformed
inventory: a Run asking for a device is not placed (`invalid device inventory`), a Run
asking for none is.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from kubernetes.client import ApiClient

from kruntimes.api import models
from kruntimes.controller.reconcile import DEVICES_ANNOTATION
from kruntimes.controller.runner import ControllerRunner
from kruntimes.devices import inventory_codec
from kruntimes.runtimed.agent import Agent, Settings
from tests.emulator import admission, manifests
from tests.emulator.server import Emulator
from tests.integration import cluster

PY = sys.executable
G, V = models.GROUP, models.VERSION
INVENTORY = {"driver": "gpu.example.com", "devices": [
    {"name": "gpu-0", "attributes": {"numa": {"int": 0}}}, {"name": "gpu-1", "attributes": {"numa": {"int": 1}}}]}
TEMPLATE = {"spec": {"schedulerName": manifests.UNSERVED_SCHEDULER,
                     "containers": [{"name": "runtimed", "image": "example.com/gpu-runtime:1"}]}}
TELL = "import os, sys; open(sys.argv[1], 'w').write(os.environ['KRUNTIMES_DEVICES'] + ' ' + os.environ['GPU_NUMA'])"
NUMA1 = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "selectors": [
    {"cel": {"expression": 'device.attributes["gpu.example.com"].numa == 1'}}]}}]}


def printing(text: str, code: int = 0) -> list[str]:
    return [PY, "-c", f"import sys; sys.stdout.write({text!r}); sys.exit({code})"]


@pytest.fixture
def gpu_runtime(emulator: Emulator, cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str,
                tmp_path: Path, start_scheduler: Callable[..., Any]) -> Iterator[Callable[[list[str]], dict[str, Any]]]:
    """Creates the `gpu` Runtime with `discover`, its pod (controller) and its runtimed (own identity).

    After `start_scheduler`, so runtimed and the controller stop before its thread check runs."""
    controller = ControllerRunner(kube_api, kube_namespace, resync_period=0.2).start()
    running: list[tuple[Agent, threading.Thread]] = []
    cluster_api.custom.create_cluster_custom_object(G, V, "runtimedeviceclasses", {
        "apiVersion": f"{G}/{V}", "kind": "RuntimeDeviceClass", "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}})

    def start(discover: list[str]) -> dict[str, Any]:
        devices = {"driver": "gpu.example.com", "publisher": "Runtimed", "discover": discover,
                   "env": {"GPU_NUMA": "numa"}}
        cluster_api.custom.create_namespaced_custom_object(G, V, kube_namespace, "runtimes", {
            "apiVersion": f"{G}/{V}", "kind": "Runtime", "metadata": {"name": "gpu"},
            "spec": {"replicas": 1, "template": TEMPLATE, "capacity": {"resources": {"runs": "2"}},
                     "devices": devices}})
        pods = cluster.wait_for(lambda: cluster_api.core.list_namespaced_pod(
            kube_namespace, label_selector=f"{models.RUNTIME_LABEL}=gpu").items, timeout=20, what="the runtime pod")
        pod = {"name": pods[0].metadata.name, "uid": pods[0].metadata.uid}
        assert DEVICES_ANNOTATION not in (pods[0].metadata.annotations or {})  # runtimed's to publish
        cluster_api.set_ready(pod["name"], True)
        identity = admission.service_account(kube_namespace, "kruntimes-runtimed", (pod["name"], pod["uid"]))
        agent = Agent(emulator.api_client(emulator.identity(identity)), Settings(
            pod_name=pod["name"], pod_namespace=kube_namespace, pod_uid=pod["uid"], work_dir=tmp_path / "work",
            heartbeat_period=0.2, settings_namespace=kube_namespace, settings_period=0.2))
        thread = threading.Thread(target=agent.run, name="runtimed-test", daemon=True)
        thread.start()
        running.append((agent, thread))
        return {**pod, "agent": agent}

    try:
        yield start
    finally:
        for agent, thread in running:
            agent.stop()
            thread.join(10)
        controller.stop()
        cluster_api.custom.delete_cluster_custom_object(G, V, "runtimedeviceclasses", "gpu")


def annotation(c: cluster.Cluster, pod: dict[str, Any]) -> str | None:
    return (c.core.read_namespaced_pod(pod["name"], c.namespace).metadata.annotations or {}).get(DEVICES_ANNOTATION)


def discoveries(pod: dict[str, Any], result: str) -> float | None:
    return pod["agent"].metrics.registry.get_sample_value("kruntimes_runtimed_device_discoveries_total",
                                                          {"result": result})


def test_runtimed_publishes_what_discover_found_and_a_run_is_placed_on_it_and_told_its_device(
        gpu_runtime: Callable[[list[str]], dict[str, Any]], cluster_api: cluster.Cluster,
        start_scheduler: Callable[..., Any], tmp_path: Path) -> None:
    pod = gpu_runtime(printing(json.dumps(INVENTORY, indent=2)))
    canonical = inventory_codec.parse_annotation(json.dumps(INVENTORY)).text
    cluster.wait_for(lambda: annotation(cluster_api, pod) == canonical, timeout=20, what="the published inventory")
    start_scheduler()
    cluster_api.add_run("r", runtime="gpu", devices=NUMA1,
                        mode={"task": {"args": [PY, "-c", TELL, str(tmp_path / "seen.txt")]}})
    cluster.wait_for(lambda: cluster_api.phases()["r"] == "Succeeded", timeout=60, what="r Succeeded")
    assert (tmp_path / "seen.txt").read_text() == '{"gpu":["gpu-1"]} 1'
    assert cluster_api.run("r")["status"]["devices"]["results"] == [{"request": "gpu", "device": "gpu-1"}]
    time.sleep(1)  # five controller resyncs: none wrote or removed what runtimed published
    assert annotation(cluster_api, pod) == canonical
    assert discoveries(pod, "published") == 1


def test_a_failing_discover_publishes_a_malformed_inventory_that_only_runs_with_devices_see(
        gpu_runtime: Callable[[list[str]], dict[str, Any]], cluster_api: cluster.Cluster,
        start_scheduler: Callable[..., Any]) -> None:
    pod = gpu_runtime(printing("", code=3))
    cluster.wait_for(lambda: annotation(cluster_api, pod) is not None, timeout=20, what="the published failure")
    with pytest.raises(inventory_codec.InvalidInventory):
        inventory_codec.parse_annotation(annotation(cluster_api, pod))
    assert "exited with code 3" in json.loads(annotation(cluster_api, pod) or "")["discoverError"]
    start_scheduler()
    cluster_api.add_run("plain", runtime="gpu", mode={"task": {"args": [PY, "-c", "pass"]}})
    cluster_api.add_run("wants-gpu", runtime="gpu", devices=NUMA1, mode={"task": {"args": [PY, "-c", "pass"]}})
    cluster.wait_for(lambda: cluster_api.phases()["plain"] == "Succeeded", timeout=60, what="plain Succeeded")
    cluster.wait_for(lambda: "invalid device inventory" in (cluster_api.pending_message("wants-gpu") or ""),
                     timeout=30, what="wants-gpu Pending for the malformed inventory")
    assert cluster_api.phases()["wants-gpu"] == "Pending"
    assert discoveries(pod, "malformed") == 1
