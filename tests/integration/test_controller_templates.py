"""The controller takes a Runtime's template as the API server does (issue 23 item 8, SPEC §4.2).

One unknown field in the template (a typo, or a pod field newer than the Python
client's models) used to stop the Runtime's reconciliation with a traceback on every
pass: no pods, no status. Now unknown fields go to the server to keep or drop, and
what stops pods from being made (a shape the controller cannot build from, a pod
the server refuses) is said in `Runtime.status`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterator

import pytest
from kubernetes.client import ApiClient

from kruntimes.api import models
from kruntimes.controller.runner import ControllerRunner
from tests.emulator import manifests
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for

CONTAINER = {"name": "runtime", "image": "example.com/python-runtime:1"}


@pytest.fixture
def controller(kube_api: ApiClient, kube_namespace: str, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    with caplog.at_level(logging.WARNING):
        runner = ControllerRunner(kube_api, kube_namespace, resync_period=0.5).start()
        yield
        runner.stop()
    crashes = [r.getMessage() for r in caplog.records if r.exc_info]
    assert crashes == [], "a reconcile pass raised"


def create_runtime(c: Cluster, spec: dict[str, Any]) -> None:
    body = {"apiVersion": f"{models.GROUP}/{models.VERSION}", "kind": "Runtime", "metadata": {"name": "python"},
            "spec": {"replicas": 1, "template": {"spec": {"schedulerName": manifests.UNSERVED_SCHEDULER, **spec}},
                     "capacity": {"resources": {"runs": "1"}}}}
    c.custom.create_namespaced_custom_object(models.GROUP, models.VERSION, c.namespace, "runtimes", body)


def template_condition(c: Cluster) -> dict[str, Any] | None:
    obj = c.custom.get_namespaced_custom_object(models.GROUP, models.VERSION, c.namespace, "runtimes", "python")
    return next((x for x in (obj.get("status") or {}).get("conditions") or [] if x["type"] == "TemplateValid"), None)


def runtime_pods(c: Cluster) -> list[Any]:
    return c.core.list_namespaced_pod(c.namespace, label_selector=f"{models.RUNTIME_LABEL}=python").items


def test_a_template_with_an_unknown_field_makes_pods_for_the_server_to_judge(
        cluster_api: Cluster, controller: None) -> None:
    create_runtime(cluster_api, {"containers": [{**CONTAINER, "imagePullPolicyy": "Always"}]})
    wait_for(lambda: len(runtime_pods(cluster_api)) == 1, timeout=10, what="the Runtime's pod")
    wait_for(lambda: (template_condition(cluster_api) or {}).get("status") == "True", timeout=10,
             what="TemplateValid True")


def test_a_template_of_a_shape_no_pod_can_be_built_from_is_reported_in_the_runtime_status(
        emulator: Emulator, cluster_api: Cluster, controller: None) -> None:
    create_runtime(cluster_api, {"containers": [CONTAINER, "sidecar"]})
    found = wait_for(lambda: template_condition(cluster_api), timeout=10, what="a TemplateValid condition")
    assert (found["status"], found["reason"]) == ("False", "InvalidTemplate")
    assert found["message"] == ("spec.template.spec.containers[1] must be an object; "
                                "no Runtime Pod is created until spec.template is fixed")
    assert runtime_pods(cluster_api) == []


def test_a_pod_the_server_refuses_is_reported_with_the_servers_message(
        emulator: Emulator, cluster_api: Cluster, controller: None) -> None:
    refusing = threading.Event()
    refusing.set()
    emulator.answer(422, lambda method, path: refusing.is_set() and method == "POST" and path.endswith("/pods"),
                    count=1_000)
    create_runtime(cluster_api, {"containers": [CONTAINER]})
    found = wait_for(lambda: (c := template_condition(cluster_api)) and c["status"] == "False" and c,
                     timeout=10, what="TemplateValid False")
    assert found["reason"] == "PodRefused" and "injected by the test" in found["message"]
    # The controller retries with backoff; once the server takes a pod the condition clears.
    refusing.clear()
    wait_for(lambda: len(runtime_pods(cluster_api)) == 1, timeout=10, what="the Runtime's pod")
    wait_for(lambda: (template_condition(cluster_api) or {}).get("status") == "True", timeout=10,
             what="TemplateValid True again")
