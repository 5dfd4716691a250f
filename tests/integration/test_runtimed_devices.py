"""A Runtime with devices, through the controller, the scheduler and runtimed on the emulator (SPEC §7).

The controller projects the Runtime's inventory and env mapping onto its pod; the
scheduler, given a RuntimeDeviceClass, allocates a Run's devices and writes them in
`status.devices` with the assignment; runtimed admits the Run by those devices and
tells the process which it got (`KRUNTIMES_DEVICES`, the env mapping). A Run allocated
a device that has since left the inventory ends Failed `AllocatedDeviceMissing` (that
allocation is written by the test, as a scheduler with a stale cache would). Holds
on a real cluster too.
"""

from __future__ import annotations

import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from kubernetes.client import ApiClient

from kruntimes.api import models
from kruntimes.controller.reconcile import DEVICES_ANNOTATION
from kruntimes.controller.runner import ControllerRunner
from kruntimes.devices import inventory_codec
from kruntimes.journal.store.backends import Journal
from kruntimes.runtimed.agent import Agent, Settings
from kruntimes.scheduler import status as st
from replay import source, verify
from tests.emulator import manifests
from tests.integration import cluster

PY = sys.executable
GPU = {"driver": "gpu.example.com", "env": {"GPU_NUMA": "numa"}, "devices": [
    {"name": "gpu-0", "attributes": {"numa": {"int": 0}}}, {"name": "gpu-1", "attributes": {"numa": {"int": 1}}}]}
CLAIM = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]}
TEMPLATE = {"spec": {"schedulerName": manifests.UNSERVED_SCHEDULER,
                     "containers": [{"name": "runtimed", "image": "example.com/gpu-runtime:1"}]}}


def runtime_pod(c: cluster.Cluster, check: Any) -> dict[str, Any]:
    def found() -> Any:
        pods = c.core.list_namespaced_pod(c.namespace, label_selector=f"{models.RUNTIME_LABEL}=gpu").items
        return len(pods) == 1 and check(pods[0].metadata.annotations or {}) and pods[0]
    pod = cluster.wait_for(found, timeout=20, what="the runtime pod with its inventory")
    return {"name": pod.metadata.name, "uid": pod.metadata.uid}


def assign_devices(c: cluster.Cluster, name: str, pod: dict[str, Any], device: str, out: Path) -> None:
    """A Run bound to `pod` with one device allocated, as the scheduler's Bind writes it (SPEC §7.6)."""
    code = "import os, sys; open(sys.argv[1], 'w').write(os.environ['KRUNTIMES_DEVICES'] + ' ' + os.environ['GPU_NUMA'])"
    c.add_run(name, runtime="gpu", devices=CLAIM, mode={"task": {"args": [PY, "-c", code, str(out)]}})
    current = c.run(name)
    status = st.scheduled_status(None, pod["name"], pod["uid"], datetime.now(timezone.utc))
    status["devices"] = {"inventoryDigest": "d", "results": [{"request": "gpu", "device": device}]}
    current["status"] = status
    c.custom.replace_namespaced_custom_object_status(models.GROUP, models.VERSION, c.namespace, "runs", name, current)


def test_a_run_gets_its_allocated_device_and_one_whose_device_left_the_inventory_fails(
        cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str, tmp_path: Path) -> None:
    body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": "gpu"},
            "spec": {"replicas": 1, "template": TEMPLATE, "capacity": {"resources": {"runs": "2"}}, "devices": GPU}}
    cluster_api.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, kube_namespace, "runtimes", body)
    controller = ControllerRunner(kube_api, kube_namespace, resync_period=0.5).start()
    agent: Agent | None = None
    thread: threading.Thread | None = None
    try:
        pod = runtime_pod(cluster_api, lambda a: DEVICES_ANNOTATION in a)
        agent = Agent(kube_api, Settings(pod_name=pod["name"], pod_namespace=kube_namespace, pod_uid=pod["uid"],
                                         work_dir=tmp_path / "work", heartbeat_period=0.2,
                                         settings_namespace=kube_namespace, settings_period=0.2))
        thread = threading.Thread(target=agent.run, name="runtimed-test", daemon=True)
        thread.start()

        assign_devices(cluster_api, "uses-gpu-1", pod, "gpu-1", tmp_path / "seen.txt")
        cluster.wait_for(lambda: cluster_api.phases()["uses-gpu-1"] == "Succeeded", timeout=30, what="Succeeded")
        assert (tmp_path / "seen.txt").read_text() == '{"gpu":["gpu-1"]} 1'

        # gpu-1 leaves the Runtime's inventory: the controller re-projects, runtimed follows.
        fewer = {**GPU, "devices": GPU["devices"][:1]}
        cluster_api.custom.patch_namespaced_custom_object(models.GROUP, models.VERSION, kube_namespace, "runtimes",
                                                          "gpu", {"spec": {"devices": fewer}},
                                                          _content_type="application/merge-patch+json")
        runtime_pod(cluster_api, lambda a: inventory_codec.parse_annotation(a.get(DEVICES_ANNOTATION)).device("gpu-1")
                    is None)
        cluster.wait_for(lambda: agent.lifecycle.guard.capacity().devices.inventory.device("gpu-1") is None,
                         timeout=10, what="runtimed reads the new inventory")
        assign_devices(cluster_api, "wants-gpu-1", pod, "gpu-1", tmp_path / "never.txt")
        cluster.wait_for(lambda: cluster_api.phases()["wants-gpu-1"] == "Failed", timeout=30, what="Failed")
        completed = next(c for c in cluster_api.run("wants-gpu-1")["status"]["conditions"] if c["type"] == "Completed")
        assert completed["reason"] == "AllocatedDeviceMissing"
        assert not (tmp_path / "never.txt").exists()
        # An ended Run keeps the devices it held on record, beside its assignment.
        assert cluster_api.run("uses-gpu-1")["status"]["devices"]["results"] == [{"request": "gpu", "device": "gpu-1"}]
    finally:
        if agent is not None and thread is not None:
            agent.stop()
            thread.join(10)
        controller.stop()


def test_the_scheduler_allocates_a_device_the_run_gets_and_its_process_is_told(
        cluster_api: cluster.Cluster, kube_api: ApiClient, kube_namespace: str, tmp_path: Path,
        start_scheduler: Callable[..., Any]) -> None:
    body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": "gpu"},
            "spec": {"replicas": 1, "template": TEMPLATE, "capacity": {"resources": {"runs": "2"}}, "devices": GPU}}
    cluster_api.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, kube_namespace, "runtimes", body)
    numa1 = {"cel": {"expression": 'device.attributes["gpu.example.com"].numa == 1'}}
    cluster_api.custom.create_cluster_custom_object(models.GROUP, models.VERSION, "runtimedeviceclasses", {
        "apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "RuntimeDeviceClass", "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}})
    controller = ControllerRunner(kube_api, kube_namespace, resync_period=0.5).start()
    agent: Agent | None = None
    thread: threading.Thread | None = None
    try:
        pod = runtime_pod(cluster_api, lambda a: DEVICES_ANNOTATION in a)
        cluster_api.set_ready(pod["name"], True)
        agent = Agent(kube_api, Settings(pod_name=pod["name"], pod_namespace=kube_namespace, pod_uid=pod["uid"],
                                         work_dir=tmp_path / "work", heartbeat_period=0.2,
                                         settings_namespace=kube_namespace, settings_period=0.2))
        thread = threading.Thread(target=agent.run, name="runtimed-test", daemon=True)
        thread.start()
        # The scheduler journals what it sees and decides; its journal must replay identically (SPEC §7.8).
        url = f"sqlite:///{tmp_path / 'journal.db'}"
        scheduler = start_scheduler(journal_url=url, journal_spool=str(tmp_path / "journal.spool"))
        code = "import os, sys; open(sys.argv[1], 'w').write(os.environ['KRUNTIMES_DEVICES'] + ' ' + os.environ['GPU_NUMA'])"
        claim = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "selectors": [numa1]}}]}
        cluster_api.add_run("r", runtime="gpu", devices=claim,
                            mode={"task": {"args": [PY, "-c", code, str(tmp_path / "seen.txt")]}})
        cluster.wait_for(lambda: cluster_api.phases()["r"] == "Succeeded", timeout=60, what="r Succeeded")
        assert (tmp_path / "seen.txt").read_text() == '{"gpu":["gpu-1"]} 1'
        written = cluster_api.run("r")["status"]["devices"]
        assert written["results"] == [{"request": "gpu", "device": "gpu-1"}]
        assert len(written["inventoryDigest"]) == 64
        # A second Run asks for the same device, which is not free until the first ended: it gets gpu-1 too.
        cluster_api.add_run("r2", runtime="gpu", devices=claim, mode={"task": {"args": [PY, "-c", "pass"]}})
        cluster.wait_for(lambda: cluster_api.phases()["r2"] == "Succeeded", timeout=60, what="r2 Succeeded")
        scheduler.stop()
        journal = Journal.open(url, create=False)
        try:
            report = verify.verify(journal)
            cycles = [r for r in source.cycles(journal, source.Selection()) if "devices" in r.payload]
            chosen = [r.payload["devices"]["chosen"]["results"] for r in cycles if r.payload["devices"]["chosen"]]
        finally:
            journal.close()
        assert report.ok and report.identical == report.selected >= 2, report.problems
        assert chosen == [[{"request": "gpu", "device": "gpu-1"}]] * 2
    finally:
        if agent is not None and thread is not None:
            agent.stop()
            thread.join(10)
        controller.stop()
        cluster_api.custom.delete_cluster_custom_object(models.GROUP, models.VERSION, "runtimedeviceclasses", "gpu")
