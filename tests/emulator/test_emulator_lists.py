"""Paging, field selectors and patch flavours, pinned against "API Concepts" and "Field Selectors".

- Retrieving large results sets in chunks: ``limit`` gives at most that many items and a
  ``continue`` token; the following pages show the list as it was at the first page's
  resourceVersion; a token whose version was compacted is 410 Gone (reason Expired).
- Field selectors: ``metadata.name`` and ``metadata.namespace`` on every resource, the
  pod fields the pod registry offers (``spec.nodeName``, ``status.phase``...), a custom
  resource's ``selectableFields``; any other field is 400 "field label not supported".
- Patches: a JSON merge patch (RFC 7386) on annotations of pods and custom resources;
  a strategic merge patch on pods; custom resources refuse strategic merge with 415
  Unsupported Media Type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml
from kubernetes import client

from tests.emulator import schema
from tests.emulator.manifests import GROUP, VERSION, bound_pod, pod, run
from tests.emulator.server import Emulator
from tests.emulator.test_emulator import expect_api_error

MERGE, STRATEGIC = "application/merge-patch+json", "application/strategic-merge-patch+json"


def pages(core: client.CoreV1Api, namespace: str, limit: int) -> Iterator[client.V1PodList]:
    token = None
    while True:
        listed = core.list_namespaced_pod(namespace, limit=limit, _continue=token)
        yield listed
        token = listed.metadata._continue
        if not token:
            return


# --- paging ----------------------------------------------------------------------------

def test_a_limited_list_comes_in_pages_that_together_hold_every_item(core: client.CoreV1Api,
                                                                     kube_namespace: str) -> None:
    for index in range(5):
        core.create_namespaced_pod(kube_namespace, pod(f"p{index}"))
    seen = list(pages(core, kube_namespace, 2))
    assert [len(page.items) for page in seen] == [2, 2, 1]
    assert [p.metadata.name for page in seen for p in page.items] == [f"p{i}" for i in range(5)]


def test_later_pages_show_the_list_as_it_was_at_the_first_page(emulator: Emulator, kube_namespace: str) -> None:
    core = client.CoreV1Api(emulator.api_client())
    for name in ("a", "b", "c"):
        core.create_namespaced_pod(kube_namespace, pod(name))
    first = core.list_namespaced_pod(kube_namespace, limit=1)
    assert first.metadata.remaining_item_count == 2
    core.delete_namespaced_pod("c", kube_namespace)
    core.create_namespaced_pod(kube_namespace, pod("d"))
    core.patch_namespaced_pod("b", kube_namespace, {"metadata": {"labels": {"late": "yes"}}})
    rest = core.list_namespaced_pod(kube_namespace, limit=10, _continue=first.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["b", "c"]
    assert rest.items[0].metadata.labels == {}
    assert rest.metadata.resource_version == first.metadata.resource_version


def test_a_continue_token_from_compacted_history_is_410_expired(emulator: Emulator, kube_namespace: str) -> None:
    core = client.CoreV1Api(emulator.api_client())
    for name in ("a", "b"):
        core.create_namespaced_pod(kube_namespace, pod(name))
    first = core.list_namespaced_pod(kube_namespace, limit=1)
    core.create_namespaced_pod(kube_namespace, pod("c"))
    emulator.compact()
    status = expect_api_error(410, core.list_namespaced_pod, kube_namespace, limit=1,
                              _continue=first.metadata._continue)
    assert status["reason"] == "Expired" and "continue parameter is too old" in status["message"]


def test_a_continue_token_that_does_not_decode_is_400(emulator: Emulator, kube_namespace: str) -> None:
    core = client.CoreV1Api(emulator.api_client())
    expect_api_error(400, core.list_namespaced_pod, kube_namespace, limit=1, _continue="not-a-token")


# --- field selectors -------------------------------------------------------------------

def test_pods_select_by_node_name_and_phase(core: client.CoreV1Api, kube_namespace: str) -> None:
    core.create_namespaced_pod(kube_namespace, bound_pod("on-node", node="node-1"))
    core.create_namespaced_pod(kube_namespace, pod("unbound"))
    core.patch_namespaced_pod_status("on-node", kube_namespace, {"status": {"phase": "Running"}})

    def selected(selector: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(kube_namespace, field_selector=selector).items]
    assert selected("spec.nodeName=node-1") == ["on-node"]
    assert selected("spec.nodeName=") == ["unbound"]
    assert selected("status.phase!=Running") == ["unbound"]
    assert selected("metadata.name=unbound,status.phase=Pending") == ["unbound"]


@pytest.mark.parametrize("resource", ["pods", "runs"])
def test_a_field_the_resource_does_not_offer_is_400(core: client.CoreV1Api, custom: client.CustomObjectsApi,
                                                    kube_namespace: str, resource: str) -> None:
    if resource == "pods":
        status = expect_api_error(400, core.list_namespaced_pod, kube_namespace, field_selector="spec.hostname=x")
    else:
        status = expect_api_error(400, custom.list_namespaced_custom_object, GROUP, VERSION, kube_namespace,
                                  "runs", field_selector="spec.runtime=x")
    assert ("spec.hostname" if resource == "pods" else "spec.runtime") in status["message"]


def test_the_committed_run_crd_lets_runs_be_selected_by_their_assigned_pod(
        custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    # deploy/crds declares `.status.assignment.podName` selectable (runtimed's watch, SPEC §4.1).
    for name, assigned in (("a", "p1"), ("b", "p2"), ("c", None)):
        created = custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs", run(name))
        if assigned is not None:
            created["status"] = {"phase": "Scheduled", "assignment": {"podName": assigned, "podUID": f"uid-{assigned}"}}
            custom.replace_namespaced_custom_object_status(GROUP, VERSION, kube_namespace, "runs", name, created)
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs",
                                                  field_selector="status.assignment.podName=p2")
    assert [item["metadata"]["name"] for item in listed["items"]] == ["b"]


def test_runs_select_by_name_and_namespace(custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    for name in ("a", "b"):
        custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs", run(name))
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs",
                                                  field_selector=f"metadata.name=b,metadata.namespace={kube_namespace}")
    assert [r["metadata"]["name"] for r in listed["items"]] == ["b"]


def test_a_crds_selectable_fields_can_be_selected(emulator_factory: Callable[..., Emulator],
                                                  tmp_path: Path) -> None:
    directory = tmp_path
    for source in schema.DEFAULT_CRD_DIR.glob("*.yaml"):
        crd = yaml.safe_load(source.read_text())
        if crd.get("kind") == "CustomResourceDefinition" and crd["spec"]["names"]["plural"] == "runs":
            crd["spec"]["versions"][0]["selectableFields"] = [{"jsonPath": ".spec.runtime"}]
        (directory / source.name).write_text(yaml.safe_dump(crd))
    emulator = emulator_factory(crd_dir=directory)
    api = emulator.api_client()
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "ns"}})
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, "ns", "runs", run("a", runtime="python"))
    custom.create_namespaced_custom_object(GROUP, VERSION, "ns", "runs", run("b", runtime="go"))
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "ns", "runs", field_selector="spec.runtime=go")
    assert [r["metadata"]["name"] for r in listed["items"]] == ["b"]


# --- patch flavours --------------------------------------------------------------------

@pytest.mark.parametrize("content_type", [MERGE, STRATEGIC])
def test_a_pods_annotations_merge_and_null_removes_one(core: client.CoreV1Api, kube_namespace: str,
                                                       content_type: str) -> None:
    core.create_namespaced_pod(kube_namespace, pod("a", annotations={"keep": "1", "drop": "2"}))
    patched = core.patch_namespaced_pod("a", kube_namespace, {"metadata": {"annotations": {"drop": None, "new": "3"}}},
                                        _content_type=content_type)
    assert patched.metadata.annotations == {"keep": "1", "new": "3"}


def test_a_custom_resources_annotations_take_a_merge_patch(custom: client.CustomObjectsApi,
                                                          kube_namespace: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs", run("r"))
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs", "r",
                                                    {"metadata": {"annotations": {"a": "b"}}}, _content_type=MERGE)
    assert patched["metadata"]["annotations"] == {"a": "b"}


def test_a_custom_resource_refuses_a_strategic_merge_patch_with_415(custom: client.CustomObjectsApi,
                                                                   kube_namespace: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs", run("r"))
    expect_api_error(415, custom.patch_namespaced_custom_object, GROUP, VERSION, kube_namespace, "runs", "r",
                     {"metadata": {"annotations": {"a": "b"}}}, _content_type=STRATEGIC)
