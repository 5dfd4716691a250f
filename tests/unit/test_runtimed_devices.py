"""runtimed admits by device name, atomically with the capacity check (SPEC §7.7).

Runs and the pod are written as API objects and read through runtimed's own readers,
so the claim, the results and the inventory are judged as in the agent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kruntimes.runtimed import devices, metrics
from kruntimes.runtimed.admission import REFUSED, RESERVED, WAITING, AdmissionGuard
from kruntimes.runtimed.reading import assigned_run, pod_capacity

POD, POD_UID = "gpu-abcde", "uid-pod"
INVENTORY = {"driver": "gpu.example.com", "devices": [
    {"name": "gpu-0", "attributes": {"numa": {"int": 0}, "model": {"string": "a100"}}},
    {"name": "gpu-1", "attributes": {"numa": {"int": 1}, "model": {"string": "a100"}}}]}
CLAIM = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "a100", "count": 1}}]}
TWO = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "a100", "count": 2}}]}


def pod(inventory: Any = INVENTORY, env: dict[str, str] | None = None, runs: int = 4) -> dict[str, Any]:
    annotations = {"kruntimes.io/capacity": json.dumps({"runs": str(runs)})}
    if inventory is not None:
        annotations[devices.DEVICES_ANNOTATION] = inventory if isinstance(inventory, str) else json.dumps(inventory)
    runtimed: dict[str, Any] = {"name": devices.RUNTIMED_CONTAINER, "env": [{"name": "KRUNTIMES_WORK_DIR",
                                                                          "value": "/work"}]}
    if env is not None:  # as the controller sets it (SPEC §7.7): in runtimed's container env
        runtimed["env"].append({"name": devices.DEVICE_ENV_VARIABLE, "value": json.dumps(env)})
    return {"metadata": {"name": POD, "uid": POD_UID, "labels": {"kruntimes.io/runtime": "gpu"},
                         "annotations": annotations}, "spec": {"containers": [{"name": "runtime"}, runtimed]}}


def run(name: str, *allocated: str, claim: Any = CLAIM, request: str = "gpu", results: Any = "default") -> Any:
    status: dict[str, Any] = {"phase": "Scheduled", "assignment": {"podName": POD, "podUID": POD_UID}}
    if results == "default":
        results = {"inventoryDigest": "d", "results": [{"request": request, "device": d} for d in allocated]}
    if results is not None:
        status["devices"] = results
    spec: dict[str, Any] = {"runtime": "gpu", "mode": {"task": {"args": ["true"]}}}
    if claim is not None:
        spec["devices"] = claim
    return assigned_run({"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec,
                         "status": status})[0]


def guard(**kw: Any) -> AdmissionGuard:
    return AdmissionGuard(POD, POD_UID, pod_capacity(pod(**kw)))


VERDICTS = [
    ("a Run allocated a free device is reserved", run("a", "gpu-0"), RESERVED, ""),
    ("a Run without status.devices is refused", run("a", results=None), REFUSED, "DeviceAllocationMissing"),
    ("results for another request are refused", run("a", "gpu-0", request="nic"), REFUSED, "DeviceAllocationMissing"),
    ("results short of the count are refused", run("a", "gpu-0", claim=TWO), REFUSED, "DeviceAllocationMissing"),
    ("a device the inventory lacks is refused", run("a", "gpu-9"), REFUSED, "AllocatedDeviceMissing"),
    ("a Run without a claim is admitted as before, whatever its status says", run("a", claim=None), RESERVED, ""),
]


@pytest.mark.parametrize("_, offered, outcome, reason", VERDICTS, ids=[v[0] for v in VERDICTS])
def test_each_device_verdict_says_what_runtimed_does_next(_: str, offered: Any, outcome: str, reason: str) -> None:
    decision = guard().offer(offered)
    assert (decision.outcome, decision.reason) == (outcome, reason)


def test_a_device_held_by_an_admitted_run_makes_the_next_wait_until_it_is_released() -> None:
    g = guard()
    assert g.offer(run("a", "gpu-0")).outcome == RESERVED
    decision = g.offer(run("b", "gpu-0"))
    assert (decision.outcome, decision.reason) == (WAITING, devices.WAIT_BUSY)
    assert g.offer(run("c", "gpu-1")).outcome == RESERVED  # the other device is free
    assert [(d.outcome, d.run.name) for d in g.release("uid-a")] == [(RESERVED, "b")]


def test_a_malformed_inventory_admits_nothing_with_devices_new_but_runs_without_devices_still_go() -> None:
    g = guard(inventory="{not json")
    decision = g.offer(run("a", "gpu-0"))
    assert (decision.outcome, decision.reason) == (WAITING, devices.WAIT_MALFORMED)
    assert g.offer(run("b", claim=None)).outcome == RESERVED


def test_a_waiting_run_whose_device_leaves_the_inventory_is_refused_when_rechecked() -> None:
    g = guard()
    g.offer(run("a", "gpu-0"))
    assert g.offer(run("b", "gpu-0")).outcome == WAITING
    smaller = {**INVENTORY, "devices": INVENTORY["devices"][1:]}
    decisions = g.set_capacity(pod_capacity(pod(inventory=smaller)))
    assert [(d.outcome, d.run.name, d.reason) for d in decisions] == [(REFUSED, "b", "AllocatedDeviceMissing")]
    assert g.waiting() == []


def test_capacity_and_devices_are_checked_in_one_step() -> None:
    g = guard(runs=1)
    g.offer(run("a", claim=None))
    decision = g.offer(run("b", "gpu-0"))
    assert decision.outcome == WAITING and decision.reason.startswith("insufficient runs")


def test_the_process_is_told_its_devices_and_the_env_mapping() -> None:
    capacity = pod_capacity(pod(env={"GPU_NUMA": "gpu.example.com/numa", "GPU_MODEL": "gpu.example.com/model"}))
    assert capacity.devices.inventory is not None
    both = run("a", "gpu-1", "gpu-0", claim=TWO)
    assert both.devices is not None
    assert devices.process_env(capacity.devices, both.devices) == {
        "KRUNTIMES_DEVICES": '{"gpu":["gpu-1","gpu-0"]}', "GPU_MODEL": "a100,a100", "GPU_NUMA": "1,0"}


@pytest.mark.parametrize("previous, kept", [
    ({"devices": {"inventoryDigest": "d", "results": [{"request": "gpu", "device": "gpu-0"}]}}, True),
    ({}, False),
], ids=["an ended Run keeps the devices it held on record", "an ended Run without devices gets no devices field"])
def test_the_terminal_helper_keeps_status_devices(previous: dict[str, Any], kept: bool) -> None:
    from datetime import datetime, timezone

    from kruntimes.scheduler import status as st
    ended = st.terminal_status({"phase": "Running", **previous}, "Succeeded", "Completed", "exit 0",
                               datetime(2026, 12, 5, tzinfo=timezone.utc))
    assert ("devices" in ended) is kept and ended.get("devices") == previous.get("devices")


def _counted(m: Any) -> dict[str, float]:
    return {reason: m.registry.get_sample_value("kruntimes_runtimed_device_waits_total", {"reason": reason})
            for reason in metrics.WAIT_REASONS}


def test_device_waits_are_counted_by_reason_once_per_run_that_starts_waiting() -> None:
    m = metrics.RuntimedMetrics()
    g = guard()
    g.on_device_wait = lambda why: m.device_wait(metrics.wait_reason(why) or "unexpected")
    assert _counted(m) == {"busy": 0.0, "missing": 0.0, "malformed_inventory": 0.0}  # every series from the start
    g.offer(run("a", "gpu-0"))
    g.offer(run("b", "gpu-0"))
    g.offer(run("b", "gpu-0"))  # the same Run seen again while it waits: not a second wait
    g.offer(run("c", "gpu-9"))  # a device the inventory lacks
    g.offer(run("d", claim=None))  # no claim: never a device wait
    bad = guard(inventory="{not json")
    bad.on_device_wait = g.on_device_wait
    bad.offer(run("e", "gpu-0"))
    assert _counted(m) == {"busy": 1.0, "missing": 1.0, "malformed_inventory": 1.0}


def test_runtimed_serves_its_metrics_when_given_a_port() -> None:
    import urllib.request

    from kruntimes.cluster.probes import ProbeServer

    m = metrics.RuntimedMetrics()
    m.device_wait(metrics.BUSY)
    server = ProbeServer(m.registry, healthy=lambda: True, ready=lambda: True, address="127.0.0.1", port=0).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        server.stop()
    assert 'kruntimes_runtimed_device_waits_total{reason="busy"} 1.0' in text
    assert "kruntimes_scheduler" not in text  # runtimed's own registry only


def test_runtimed_reads_the_env_mapping_from_the_container_the_controller_names_runtimed() -> None:
    from kruntimes.controller import reconcile

    assert devices.RUNTIMED_CONTAINER == reconcile.RUNTIMED_CONTAINER
    assert devices.DEVICE_ENV_VARIABLE == reconcile.DEVICE_ENV_VARIABLE
    other = pod(env={"GPU_NUMA": "gpu.example.com/numa"})
    other["spec"]["containers"][1]["name"] = "sidecar"  # the variable on any other container is not the mapping
    assert pod_capacity(other).devices.env == ()
