"""The Runtime controller projects `Runtime.spec.devices` onto its pods like capacity (SPEC §7.1, §4.2)."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any

import pytest

from kruntimes.controller.reading import runtime_pod, runtime_view
from kruntimes.controller.reconcile import (CAPACITY_ANNOTATION, CONDITION_DEVICES, DEVICES_ANNOTATION, RuntimePod,
                                            reconcile)
from kruntimes.devices import inventory_codec

NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)
RT_UID = "uid-rt"
CAPACITY = '{"runs":"4"}'
INVENTORY = {"driver": "gpu.example.com", "devices": [
    {"name": "gpu-1", "attributes": {"numa": {"int": 1}, "model": {"string": "a100"}}},
    {"name": "gpu-0", "attributes": {"model": {"string": "a100"}, "numa": {"int": 0}}}]}
# Canonical: keys sorted, device order kept (gpu-1 stays first).
TEXT = ('{"devices":[{"attributes":{"model":{"string":"a100"},"numa":{"int":1}},"name":"gpu-1"},'
        '{"attributes":{"model":{"string":"a100"},"numa":{"int":0}},"name":"gpu-0"}],"driver":"gpu.example.com"}')


def runtime(devices: Any, replicas: int = 1) -> Any:
    spec: dict[str, Any] = {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                            "capacity": {"resources": {"runs": "4"}}}
    if devices is not None:
        spec["devices"] = devices
    return runtime_view({"metadata": {"name": "gpu", "namespace": "team", "uid": RT_UID, "generation": 1},
                         "spec": spec})


def pod(annotations: dict[str, str]) -> RuntimePod:
    return runtime_pod({"metadata": {"name": "gpu-a", "uid": "uid-gpu-a", "annotations": annotations,
                                     "ownerReferences": [{"uid": RT_UID, "controller": True}]},
                        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}, RT_UID)


def test_the_projected_text_is_the_canonical_annotation_and_its_digest_is_the_inventorys() -> None:
    view = runtime(INVENTORY)
    assert (view.devices, view.devices_text) == ("controller", TEXT)
    assert inventory_codec.parse_annotation(TEXT).digest == hashlib.sha256(TEXT.encode()).hexdigest()


def test_a_new_pod_carries_the_inventory_beside_its_capacity() -> None:
    plan = reconcile(runtime(INVENTORY), [], [], NOW)
    annotations = plan.create[0]["metadata"]["annotations"]
    assert (annotations[CAPACITY_ANNOTATION], annotations[DEVICES_ANNOTATION]) == (CAPACITY, TEXT)


PROJECTIONS = [
    ("a pod without the inventory gets it", INVENTORY, {CAPACITY_ANNOTATION: CAPACITY}, {DEVICES_ANNOTATION: TEXT}),
    ("a pod with an older inventory gets the new one", INVENTORY,
     {CAPACITY_ANNOTATION: CAPACITY, DEVICES_ANNOTATION: '{"devices":[],"driver":"gpu.example.com"}'},
     {DEVICES_ANNOTATION: TEXT}),
    ("a pod with the same inventory is left alone", INVENTORY,
     {CAPACITY_ANNOTATION: CAPACITY, DEVICES_ANNOTATION: TEXT}, None),
    ("a Runtime that dropped its devices removes the annotation", None,
     {CAPACITY_ANNOTATION: CAPACITY, DEVICES_ANNOTATION: TEXT}, {DEVICES_ANNOTATION: None}),
    ("a Runtime without devices leaves a pod without them alone", None, {CAPACITY_ANNOTATION: CAPACITY}, None),
    ("with publisher Runtimed the pod's own inventory is left alone",
     {"driver": "gpu.example.com", "publisher": "Runtimed", "discover": ["/bin/list-gpus"]},
     {CAPACITY_ANNOTATION: CAPACITY, DEVICES_ANNOTATION: "whatever runtimed published"}, None),
    ("with publisher Runtimed a pod runtimed has not published on yet gets nothing written",
     {"driver": "gpu.example.com", "publisher": "Runtimed", "discover": ["/bin/list-gpus"]},
     {CAPACITY_ANNOTATION: CAPACITY}, None),
    ("with publisher Runtimed a malformed inventory runtimed published is left alone too",
     {"driver": "gpu.example.com", "publisher": "Runtimed", "discover": ["/bin/list-gpus"]},
     {CAPACITY_ANNOTATION: CAPACITY, DEVICES_ANNOTATION: '{"discoverError":"exit 1"}'}, None),
    ("capacity and devices changes travel in one patch", INVENTORY, {CAPACITY_ANNOTATION: '{"runs":"1"}'},
     {CAPACITY_ANNOTATION: CAPACITY, DEVICES_ANNOTATION: TEXT}),
]


@pytest.mark.parametrize("_, devices, annotations, expected", PROJECTIONS, ids=[p[0] for p in PROJECTIONS])
def test_devices_are_re_projected_like_capacity(_: str, devices: Any, annotations: dict[str, str],
                                                expected: dict[str, Any] | None) -> None:
    plan = reconcile(runtime(devices), [pod(annotations)], [], NOW)
    assert plan.patch == (() if expected is None else ((pod(annotations), {"metadata": {"annotations": expected}}),))


def test_invalid_devices_create_no_pod_touch_no_annotation_and_say_what_to_fix() -> None:
    bad = {"driver": "gpu.example.com", "devices": [{"name": "a"}, {"name": "a"}]}
    plan = reconcile(runtime(bad, replicas=2), [pod({CAPACITY_ANNOTATION: CAPACITY, DEVICES_ANNOTATION: TEXT})], [], NOW)
    assert plan.create == () and plan.patch == ()
    condition = next(c for c in plan.status["conditions"] if c["type"] == CONDITION_DEVICES)
    assert (condition["status"], condition["reason"]) == ("False", "InvalidDevices")
    assert "used twice" in condition["message"] and "spec.devices" in condition["message"]


@pytest.mark.parametrize("devices, status", [(INVENTORY, "True"), (None, None)],
                         ids=["a Runtime with devices says they are valid", "a Runtime without devices has no such condition"])
def test_the_devices_condition_is_only_there_for_runtimes_with_devices(devices: Any, status: str | None) -> None:
    plan = reconcile(runtime(devices), [], [], NOW)
    assert next((c["status"] for c in plan.status["conditions"] if c["type"] == CONDITION_DEVICES), None) == status


def _runtimed_env(body: dict[str, Any]) -> dict[str, Any]:
    from kruntimes.controller.reconcile import RUNTIMED_CONTAINER
    [runtimed] = [c for c in body["spec"]["containers"] if c["name"] == RUNTIMED_CONTAINER]
    return {e["name"]: e.get("value") for e in runtimed["env"]}


@pytest.mark.parametrize("spec", [
    {**INVENTORY, "env": {"GPU_NUMA": "numa"}},
    {"driver": "gpu.example.com", "publisher": "Runtimed", "discover": ["/bin/x"], "env": {"GPU_NUMA": "numa"}},
], ids=["publisher Controller", "publisher Runtimed"])
def test_the_env_mapping_reaches_runtimed_qualified_in_its_env_and_no_annotation_but_the_spec_s(spec: Any) -> None:
    # SPEC §2.1 and §7.1 name the annotations kruntimes owns on a Runtime Pod: the inventory is the
    # only device one. The mapping goes in runtimed's container env (§4.2, §7.7).
    from kruntimes.controller.reconcile import DEVICE_ENV_VARIABLE, LEGACY_DEVICE_ENV_ANNOTATION
    plan = reconcile(runtime(spec), [], [], NOW)
    body = plan.create[0]
    assert _runtimed_env(body)[DEVICE_ENV_VARIABLE] == '{"GPU_NUMA":"gpu.example.com/numa"}'
    assert set(body["metadata"]["annotations"]) <= {CAPACITY_ANNOTATION, DEVICES_ANNOTATION}
    # A pod an earlier controller gave the mapping annotation loses it; nothing else is written for the mapping.
    old = pod({CAPACITY_ANNOTATION: CAPACITY, LEGACY_DEVICE_ENV_ANNOTATION: '{"GPU_NUMA":"gpu.example.com/numa"}',
               **({DEVICES_ANNOTATION: plan.create[0]["metadata"]["annotations"][DEVICES_ANNOTATION]}
                  if DEVICES_ANNOTATION in body["metadata"]["annotations"] else {})})
    plan = reconcile(runtime(spec), [old], [], NOW)
    assert plan.patch[0][1] == {"metadata": {"annotations": {LEGACY_DEVICE_ENV_ANNOTATION: None}}}


RUNTIMED_SPEC = {"driver": "gpu.example.com", "publisher": "Runtimed", "discover": ["/bin/list-gpus", "--json"]}


@pytest.mark.parametrize("spec, expected", [
    (RUNTIMED_SPEC, '{"argv":["/bin/list-gpus","--json"],"driver":"gpu.example.com"}'),
    (INVENTORY, None),
    (None, None),
], ids=["publisher Runtimed gives runtimed the argv and the driver", "publisher Controller gives it none",
        "no devices give it none"])
def test_runtimed_learns_what_to_discover_from_its_container_env(spec: Any, expected: str | None) -> None:
    from kruntimes.controller.reconcile import DEVICE_DISCOVER_VARIABLE
    body = reconcile(runtime(spec), [], [], NOW).create[0]
    assert _runtimed_env(body).get(DEVICE_DISCOVER_VARIABLE) == expected
    # The pod is created without an inventory: runtimed publishes it (SPEC §7.1).
    assert (DEVICES_ANNOTATION in body["metadata"]["annotations"]) == (spec is INVENTORY)


def test_a_template_cannot_make_its_runtimed_a_publisher() -> None:
    # The runtimed policy lets a runtimed write its pod's inventory only where this variable is set,
    # so only the controller may set it, from the Runtime's publisher.
    from kruntimes.controller.reconcile import DEVICE_DISCOVER_VARIABLE
    view = runtime_view({"metadata": {"name": "gpu", "namespace": "team", "uid": RT_UID, "generation": 1},
                         "spec": {"replicas": 1, "capacity": {"resources": {"runs": "4"}}, "devices": INVENTORY,
                                  "template": {"spec": {"containers": [{"name": "runtimed", "image": "i", "env": [
                                      {"name": DEVICE_DISCOVER_VARIABLE, "value": '{"argv":["/bin/x"]}'}]}]}}}})
    body = reconcile(view, [], [], NOW).create[0]
    assert DEVICE_DISCOVER_VARIABLE not in _runtimed_env(body)
