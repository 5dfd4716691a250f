"""The CRDs' CEL rules, enforced by the emulator wherever they sit, as the API server does.

Kubernetes evaluates ``x-kubernetes-validations`` at every schema node they are attached
to, including the elements of lists (``items``) and maps (``additionalProperties``), on
create as well as update; only rules that name ``oldSelf`` wait for an update
("Validation rules", CustomResourceDefinition docs). The committed CRDs bound label keys
inside every affinity term and a Runtime's name, so a Run or Runtime over a bound must be
refused with 422 before the scheduler ever sees it.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.emulator.manifests import GROUP, VERSION, run
from tests.emulator.test_emulator import expect_api_error


def _preferred(key: str) -> dict[str, Any]:
    return {"runAffinity": {"preferred": [{"weight": 5, "term": {
        "topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchLabels": {key: "v"}}}}]}}


def _runtime(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Runtime", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}


def test_a_rule_on_the_elements_of_a_list_refuses_a_create_and_names_the_element(
        custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    body = run("r", affinity=_preferred("k" * 318))
    status = expect_api_error(422, custom.create_namespaced_custom_object, GROUP, VERSION, kube_namespace, "runs", body)
    assert "at most 317 characters" in status["message"]
    assert "preferred[0]" in status["message"]


def test_the_same_rule_lets_a_key_at_its_bound_through(custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs",
                                                     run("r", affinity=_preferred("k" * 317)))
    assert created["spec"]["affinity"]["runAffinity"]["preferred"][0]["weight"] == 5


@pytest.mark.parametrize("length, refused", [(63, False), (64, True)], ids=["63 characters", "64 characters"])
def test_a_runtime_name_longer_than_a_label_value_is_refused(custom: client.CustomObjectsApi, kube_namespace: str,
                                                             length: int, refused: bool) -> None:
    body = _runtime("r" * length)
    if refused:
        status = expect_api_error(422, custom.create_namespaced_custom_object, GROUP, VERSION, kube_namespace,
                                  "runtimes", body)
        assert "at most 63 characters" in status["message"]
    else:
        custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runtimes", body)


_CLAIM = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "a100", "count": 1}}]}


@pytest.mark.parametrize("change", [
    {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "a100", "count": 2}}]}, None,
], ids=["a changed claim", "a removed claim"])
def test_a_runs_device_claim_cannot_change_after_creation(custom: client.CustomObjectsApi, kube_namespace: str,
                                                          change: Any) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs", run("r", devices=_CLAIM))
    created["spec"]["devices"] = change
    if change is None:
        del created["spec"]["devices"]
    status = expect_api_error(422, custom.replace_namespaced_custom_object, GROUP, VERSION, kube_namespace, "runs",
                              "r", created)
    assert "spec.devices is immutable" in status["message"]


def test_a_device_class_is_cluster_scoped(custom: client.CustomObjectsApi) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RuntimeDeviceClass", "metadata": {"name": "a100"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}}
    custom.create_cluster_custom_object(GROUP, VERSION, "runtimedeviceclasses", body)
    try:
        got = custom.get_cluster_custom_object(GROUP, VERSION, "runtimedeviceclasses", "a100")
        assert got["spec"]["selectors"] == body["spec"]["selectors"] and got["metadata"]["generation"] == 1
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "runtimedeviceclasses", "a100")
