"""The device parts of the API (SPEC §7.1–§7.3, §7.6): models, messages and generated CRDs."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from kruntimes.api import crds, device_models, errors, models

SEL = {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a100"'}}
CLAIM = {
    "requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "a100", "selectors": [SEL], "count": 2,
                                    "capacity": {"requests": {"gpu.example.com/memory": "20Gi"}}}},
        {"name": "nic", "firstAvailable": [{"name": "fast", "deviceClassName": "nic"},
                                           {"name": "any", "deviceClassName": "nic"}]},
    ],
    "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": "gpu.example.com/numa"}],
}
INVENTORY = {"driver": "gpu.example.com", "devices": [
    {"name": "gpu-0", "attributes": {"model": {"string": "a100"}, "numa": {"int": 0}}}]}


def run(devices: Any) -> dict[str, Any]:
    return {"metadata": {"name": "r", "namespace": "ns"}, "spec": {"runtime": "rt", "devices": devices}}


def runtime(devices: Any) -> dict[str, Any]:
    return {"metadata": {"name": "rt", "namespace": "ns"}, "spec": {"template": {}, "devices": devices}}


def message(model: type[pydantic.BaseModel], body: dict[str, Any]) -> str:
    with pytest.raises(pydantic.ValidationError) as caught:
        model.model_validate(body)
    return errors.describe_validation_error(caught.value)


def test_a_run_with_the_spec_example_claim_keeps_it_as_written() -> None:
    parsed = models.Run.model_validate(run(CLAIM))
    assert parsed.spec.devices is not None
    assert parsed.spec.devices.model_dump(by_alias=True, exclude_none=True) == CLAIM


def test_a_run_without_devices_has_none() -> None:
    assert models.Run.model_validate(run(None)).spec.devices is None


BAD_CLAIMS = [
    ({"requests": []}, "must be a list of 1 to 8 entries", "no requests"),
    ({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "a100", "adminAccess": True}}]},
     "adminAccess is not supported", "adminAccess"),
    ({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "a100", "count": 33}}]},
     "count must be an integer from 1 to 32", "a count above 32"),
    ({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "a100",
                                               "selectors": [{"cel": {"expression": "device.attributes.all(x, true)"}}]}}]},
     "selectors[0]", "a comprehension macro in a selector"),
    ({"requests": [{"name": "Gpu", "exactly": {"deviceClassName": "a100"}}]}, "must be a DNS label", "a name that is not a DNS label"),
]


@pytest.mark.parametrize("devices, expected, _", BAD_CLAIMS, ids=[c[2] for c in BAD_CLAIMS])
def test_an_invalid_claim_fails_with_the_rule_it_breaks(devices: Any, expected: str, _: str) -> None:
    text = message(models.Run, run(devices))
    assert expected in text and len(text) < 600


def test_a_runtime_with_a_controller_inventory_is_valid() -> None:
    parsed = models.Runtime.model_validate(runtime({**INVENTORY, "env": {"GPU_NUMA": "numa"}}))
    assert parsed.spec.devices is not None and parsed.spec.devices["driver"] == "gpu.example.com"


BAD_INVENTORIES = [
    ({"driver": "gpu.example.com", "devices": [{"name": "a"}, {"name": "a"}]}, "used twice", "a duplicate device"),
    ({**INVENTORY, "publisher": "Kubelet"}, "publisher must be Controller or Runtimed", "an unknown publisher"),
    ({**INVENTORY, "env": {"KRUNTIMES_X": "numa"}}, "not starting with KRUNTIMES_", "an env var kruntimes owns"),
]


@pytest.mark.parametrize("devices, expected, _", BAD_INVENTORIES, ids=[c[2] for c in BAD_INVENTORIES])
def test_an_invalid_runtime_inventory_fails_with_the_rule_it_breaks(devices: Any, expected: str, _: str) -> None:
    text = message(models.Runtime, runtime(devices))
    assert expected in text and len(text) < 600


def test_status_devices_is_read_as_written() -> None:
    status = {"phase": "Scheduled", "devices": {"inventoryDigest": "d", "results": [{"request": "gpu", "device": "g"}]}}
    parsed = models.Run.model_validate({**run(None), "status": status})
    assert parsed.status is not None and parsed.status.devices == status["devices"]


def test_a_device_class_with_an_invalid_selector_is_refused() -> None:
    body = {"metadata": {"name": "a100"}, "spec": {"selectors": [{"cel": {"expression": "x" * 5000}}]}}
    assert "RuntimeDeviceClass 'a100'" in message(device_models.RuntimeDeviceClass, body)


def _crd(plural: str) -> dict[str, Any]:
    return next(c for c in crds.generate() if c["spec"]["names"]["plural"] == plural)


def test_the_device_class_crd_is_cluster_scoped_without_a_status() -> None:
    crd = _crd("runtimedeviceclasses")
    assert crd["spec"]["scope"] == "Cluster" and "subresources" not in crd["spec"]["versions"][0]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["selectors"]["maxItems"] == 8


def test_run_spec_devices_is_immutable_through_transition_rules() -> None:
    spec = _crd("runs")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"rule": "self == oldSelf", "message": "spec.devices is immutable"} in \
        spec["properties"]["devices"]["x-kubernetes-validations"]
    assert {"rule": "has(self.devices) == has(oldSelf.devices)", "message": "spec.devices is immutable"} in \
        spec["x-kubernetes-validations"]


def test_inventories_and_status_devices_are_kept_whole_by_the_server() -> None:
    runtime_spec = _crd("runtimes")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    status = _crd("runs")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    for node in (runtime_spec["properties"]["devices"], status["properties"]["devices"]):
        assert node["x-kubernetes-preserve-unknown-fields"] is True and node["type"] == "object"
