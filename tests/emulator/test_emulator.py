"""The emulator's object semantics, pinned through the real client against the API documentation.

Sources: Kubernetes "API Concepts" (resourceVersion, conflicts, no-op updates), the
CustomResourceSubresourceStatus reference ("PUT requests to the /status subresource ...
ignore changes to anything except the status stanza; PUT/POST/PATCH requests to the
custom resource ignore changes to the status stanza"), "Labels and Selectors"
(``!=``/``notin`` match objects without the key) and "Finalizers". Tests that take
``kube_api`` hold on a real cluster too (``KRUNTIMES_E2E_KUBECONFIG``); those that take
``emulator`` check what only the emulator lets a test observe (exact resourceVersions).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from kruntimes.api import crds
from tests.emulator.fixtures import api_client_from_kubeconfig
from tests.emulator.manifests import GROUP, VERSION, lease, namespace, pod, run
from tests.emulator.server import Emulator


def expect_api_error(status: int, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    assert caught.value.status == status, caught.value.body
    return json.loads(caught.value.body) if caught.value.body else {}


# --- create, read, resourceVersion -----------------------------------------------------

def test_create_sets_uid_creation_time_generation_and_a_resource_version(
        core: client.CoreV1Api, kube_namespace: str) -> None:
    created = core.create_namespaced_pod(kube_namespace, pod("a"))
    assert created.metadata.uid and created.metadata.creation_timestamp and created.metadata.resource_version
    read = core.read_namespaced_pod("a", kube_namespace)
    assert (read.metadata.uid, read.metadata.resource_version) == (created.metadata.uid,
                                                                   created.metadata.resource_version)


def test_every_write_of_every_resource_takes_the_next_value_of_one_counter(emulator: Emulator) -> None:
    api = emulator.api_client()
    client.CoreV1Api(api).create_namespace(namespace("ns"))
    versions = [
        client.CoreV1Api(api).create_namespaced_pod("ns", pod("a")).metadata.resource_version,
        client.CoordinationV1Api(api).create_namespaced_lease("ns", lease("l", "x")).metadata.resource_version,
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, "ns", "runs", run("r"))["metadata"]["resourceVersion"],
        client.CoreV1Api(api).delete_namespaced_pod("a", "ns").metadata.resource_version,
    ]
    api.close()
    assert [int(v) for v in versions] == [3, 4, 5, 6]  # an empty store is at 1 (like etcd), the namespace 2


def test_a_taken_name_is_409_already_exists(core: client.CoreV1Api, kube_namespace: str) -> None:
    core.create_namespaced_pod(kube_namespace, pod("a"))
    status = expect_api_error(409, core.create_namespaced_pod, kube_namespace, pod("a"))
    assert status["reason"] == "AlreadyExists"


@pytest.mark.parametrize("action", ["read", "replace", "patch", "delete"])
def test_a_missing_object_is_404_not_found(core: client.CoreV1Api, kube_namespace: str, action: str) -> None:
    calls = {"read": (core.read_namespaced_pod, ()), "replace": (core.replace_namespaced_pod, (pod("nope"),)),
             "patch": (core.patch_namespaced_pod, ({"metadata": {"labels": {"a": "b"}}},)),
             "delete": (core.delete_namespaced_pod, ())}
    call, extra = calls[action]
    assert expect_api_error(404, call, "nope", kube_namespace, *extra)["reason"] == "NotFound"


@pytest.mark.parametrize("body, field", [
    (pod("Bad_Name"), "metadata.name"),
    ({"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "metadata.name"),
    (pod("ok", labels={"bad key!": "x"}), "metadata.labels"),
    (pod("ok", labels={"k": "bad value!"}), "metadata.labels"),
    ({"metadata": {"name": "ok"}, "spec": {"containers": []}}, "spec.containers"),
], ids=["an invalid name", "no name", "an invalid label key", "an invalid label value", "no containers"])
def test_invalid_input_is_422(core: client.CoreV1Api, kube_namespace: str, body: dict[str, Any], field: str) -> None:
    status = expect_api_error(422, core.create_namespaced_pod, kube_namespace, body)
    assert status["reason"] == "Invalid" and field in status["message"]


def test_generate_name_gets_a_random_suffix(core: client.CoreV1Api, kube_namespace: str) -> None:
    created = core.create_namespaced_pod(kube_namespace, {**pod(""), "metadata": {"generateName": "rt-"}})
    assert created.metadata.name.startswith("rt-") and len(created.metadata.name) == 8


def test_a_body_for_another_namespace_is_400(core: client.CoreV1Api, kube_namespace: str) -> None:
    expect_api_error(400, core.create_namespaced_pod, kube_namespace, pod("a", namespace="elsewhere"))


# --- update: optimistic concurrency and generation -------------------------------------

def test_an_update_with_a_stale_resource_version_is_409_conflict(
        core: client.CoreV1Api, kube_namespace: str) -> None:
    first = core.create_namespaced_pod(kube_namespace, pod("a"))
    first.metadata.labels = {"v": "1"}
    core.replace_namespaced_pod("a", kube_namespace, first)
    first.metadata.labels = {"v": "2"}
    status = expect_api_error(409, core.replace_namespaced_pod, "a", kube_namespace, first)
    assert status["reason"] == "Conflict" and "the object has been modified" in status["message"]


def test_an_update_without_a_resource_version_is_unconditional(
        core: client.CoreV1Api, kube_namespace: str) -> None:
    created = core.create_namespaced_pod(kube_namespace, pod("a"))
    # Replace what was read (admission may have filled in the spec, as a cluster's
    # ServiceAccount plugin does), without its resourceVersion.
    created.metadata.resource_version = None
    created.metadata.labels = {"v": "2"}
    updated = core.replace_namespaced_pod("a", kube_namespace, created)
    assert updated.metadata.labels == {"v": "2"}


def test_a_patch_carrying_a_stale_resource_version_is_409(custom: client.CustomObjectsApi,
                                                          kube_namespace: str) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs", run("r"))
    custom.patch_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs", "r",
                                          {"metadata": {"labels": {"a": "b"}}})
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
             "status": {"phase": "Scheduled"}}
    expect_api_error(409, custom.patch_namespaced_custom_object_status,
                     GROUP, VERSION, kube_namespace, "runs", "r", stale)


def test_an_update_that_changes_nothing_is_not_a_write(emulator: Emulator) -> None:
    api = emulator.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace(namespace("ns"))
    created = core.create_namespaced_pod("ns", pod("a", labels={"a": "b"}))
    again = core.replace_namespaced_pod("a", "ns", created)
    patched = core.patch_namespaced_pod("a", "ns", {"metadata": {"labels": {"a": "b"}}})
    api.close()
    assert again.metadata.resource_version == patched.metadata.resource_version == created.metadata.resource_version
    assert emulator.store.resource_version == int(created.metadata.resource_version)


def test_generation_counts_spec_changes_only(custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    args = (GROUP, VERSION, kube_namespace, "runs", "r")
    generations = [
        custom.create_namespaced_custom_object(*args[:4], run("r")),
        custom.patch_namespaced_custom_object(*args, {"metadata": {"labels": {"a": "b"}}}),
        custom.patch_namespaced_custom_object_status(*args, {"status": {"phase": "Pending"}}),
        custom.patch_namespaced_custom_object(*args, {"spec": {"workspace": "w"}}),
    ]
    assert [obj["metadata"]["generation"] for obj in generations] == [1, 1, 1, 2]


# --- the status subresource ------------------------------------------------------------

def test_a_custom_resource_is_created_without_the_status_it_was_sent(
        custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs",
                                                     {**run("r"), "status": {"phase": "Running"}})
    assert "status" not in created


def test_a_status_update_changes_only_status(custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    args = (GROUP, VERSION, kube_namespace, "runs", "r")
    created = custom.create_namespaced_custom_object(*args[:4], run("r"))
    body = {**created, "spec": {"runtime": "other"}, "status": {"phase": "Scheduled"}}
    body["metadata"] = {**created["metadata"], "labels": {"sneaky": "yes"}}
    updated = custom.replace_namespaced_custom_object_status(*args, body)
    assert updated["status"] == {"phase": "Scheduled"}
    assert updated["spec"] == created["spec"] and "labels" not in updated["metadata"]


def test_a_main_resource_update_never_changes_status(custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    args = (GROUP, VERSION, kube_namespace, "runs", "r")
    custom.create_namespaced_custom_object(*args[:4], run("r"))
    scheduled = custom.patch_namespaced_custom_object_status(*args, {"status": {"phase": "Scheduled"}})
    body = {**scheduled, "spec": {"runtime": "python", "workspace": "w"}, "status": {"phase": "Failed"}}
    updated = custom.replace_namespaced_custom_object(*args, body)
    assert updated["spec"]["workspace"] == "w" and updated["status"] == {"phase": "Scheduled"}


def test_a_status_update_with_a_stale_resource_version_is_409(
        custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    args = (GROUP, VERSION, kube_namespace, "runs", "r")
    created = custom.create_namespaced_custom_object(*args[:4], run("r"))
    custom.patch_namespaced_custom_object(*args, {"metadata": {"labels": {"a": "b"}}})
    stale = {**created, "status": {"phase": "Scheduled", "assignment": {"podName": "p", "podUID": "u"}}}
    expect_api_error(409, custom.replace_namespaced_custom_object_status, *args, stale)


def test_a_pod_starts_pending_and_its_conditions_merge_by_type(core: client.CoreV1Api, kube_namespace: str) -> None:
    assert core.create_namespaced_pod(kube_namespace, pod("a")).status.phase == "Pending"
    core.patch_namespaced_pod_status("a", kube_namespace, {"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}})
    patched = core.patch_namespaced_pod_status("a", kube_namespace, {"status": {"conditions": [
        {"type": "Ready", "status": "True"}]}})
    assert sorted((c.type, c.status) for c in patched.status.conditions) == [("PodScheduled", "True"),
                                                                          ("Ready", "True")]


def test_a_failed_json_patch_test_is_422(core: client.CoreV1Api, kube_namespace: str) -> None:
    core.create_namespaced_pod(kube_namespace, pod("a", labels={"a": "b"}))
    expect_api_error(422, core.patch_namespaced_pod, "a", kube_namespace,
                     [{"op": "test", "path": "/metadata/labels/a", "value": "c"},
                      {"op": "replace", "path": "/metadata/labels/a", "value": "d"}])


def test_leases_support_create_read_and_guarded_replace(kube_api: ApiClient, kube_namespace: str) -> None:
    leases = client.CoordinationV1Api(kube_api)
    created = leases.create_namespaced_lease(kube_namespace, lease("scheduler", "a"))
    created.spec.holder_identity = "b"
    assert leases.replace_namespaced_lease("scheduler", kube_namespace, created).spec.holder_identity == "b"
    created.spec.holder_identity = "c"
    expect_api_error(409, leases.replace_namespaced_lease, "scheduler", kube_namespace, created)
    assert leases.read_namespaced_lease("scheduler", kube_namespace).spec.holder_identity == "b"


def test_lists_span_every_namespace_when_none_is_named(emulator: Emulator) -> None:
    api = emulator.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for name in ("one", "two"):
        core.create_namespace(namespace(name))
        core.create_namespaced_pod(name, pod("p"))
        custom.create_namespaced_custom_object(GROUP, VERSION, name, "runs", run("r"))
    pods = core.list_pod_for_all_namespaces().items
    runs = custom.list_cluster_custom_object(GROUP, VERSION, "runs")["items"]
    api.close()
    assert [p.metadata.namespace for p in pods] == ["one", "two"]
    assert [r["metadata"]["namespace"] for r in runs] == ["one", "two"]


# --- label and field selectors ---------------------------------------------------------

@pytest.mark.parametrize("selector, expected", [
    ("tier=gpu", ["a"]),
    ("tier==gpu", ["a"]),
    ("tier!=gpu", ["b", "c"]),
    ("tier in (gpu, cpu)", ["a", "b"]),
    ("tier notin (gpu)", ["b", "c"]),
    ("tier", ["a", "b"]),
    ("!tier", ["c"]),
    ("tier,zone=x", ["a"]),
    ("", ["a", "b", "c"]),
], ids=lambda v: repr(v) if isinstance(v, str) else None)
def test_list_filters_by_label_selector(core: client.CoreV1Api, kube_namespace: str, selector: str,
                                        expected: list[str]) -> None:
    for name, labels in (("a", {"tier": "gpu", "zone": "x"}), ("b", {"tier": "cpu"}), ("c", {})):
        core.create_namespaced_pod(kube_namespace, pod(name, labels))
    listed = core.list_namespaced_pod(kube_namespace, label_selector=selector)
    assert sorted(p.metadata.name for p in listed.items) == expected
    assert listed.metadata.resource_version


def test_a_selector_that_does_not_parse_is_400(core: client.CoreV1Api, kube_namespace: str) -> None:
    expect_api_error(400, core.list_namespaced_pod, kube_namespace, label_selector="tier in gpu")


def test_list_filters_by_metadata_name(core: client.CoreV1Api, kube_namespace: str) -> None:
    for name in ("a", "b"):
        core.create_namespaced_pod(kube_namespace, pod(name))
    listed = core.list_namespaced_pod(kube_namespace, field_selector="metadata.name=b")
    assert [p.metadata.name for p in listed.items] == ["b"]


# --- custom resources are admitted with the committed CRDs -----------------------------

def test_unknown_fields_of_a_run_are_pruned(custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runs",
                                                     run("r", runtme="typo"))
    assert "runtme" not in created["spec"]


def test_a_run_the_schema_refuses_is_422(custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    body = run("r", affinity={"runAffinity": {"preferred": [
        {"weight": 101, "term": {"topologyKey": "kruntimes.io/runtime-pod"}}]}})
    expect_api_error(422, custom.create_namespaced_custom_object, GROUP, VERSION, kube_namespace, "runs", body)


@pytest.mark.parametrize("before, after", [
    ({"requests": {"gpu": "1"}}, {"requests": {"gpu": "2"}}),
    (None, {"requests": {"gpu": "1"}}),
], ids=["changing resources", "adding resources later"])
def test_spec_resources_is_immutable(custom: client.CustomObjectsApi, kube_namespace: str,
                                     before: dict[str, Any] | None, after: dict[str, Any]) -> None:
    args = (GROUP, VERSION, kube_namespace, "runs", "r")
    custom.create_namespaced_custom_object(*args[:4], run("r", **({"resources": before} if before else {})))
    status = expect_api_error(422, custom.patch_namespaced_custom_object, *args, {"spec": {"resources": after}})
    assert "spec.resources is immutable" in status["message"]
    custom.patch_namespaced_custom_object(*args, {"spec": {"workspace": "w"}})  # other fields stay mutable


def test_a_runtime_gets_the_crd_defaults(custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runtimes", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Runtime", "metadata": {"name": "python"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    assert created["spec"]["replicas"] == 1
    assert created["spec"]["template"]["spec"]["containers"][0]["image"] == "i"  # preserved as written


# --- delete ----------------------------------------------------------------------------

def test_delete_with_a_finalizer_only_marks_the_object_until_the_finalizer_goes(
        custom: client.CustomObjectsApi, kube_namespace: str) -> None:
    args = (GROUP, VERSION, kube_namespace, "runs", "r")
    custom.create_namespaced_custom_object(*args[:4], {**run("r"), "metadata": {
        "name": "r", "finalizers": ["kruntimes.io/test"]}})
    marked = custom.delete_namespaced_custom_object(*args)
    assert marked["metadata"]["deletionTimestamp"]
    assert custom.get_namespaced_custom_object(*args)["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(*args, {"metadata": {"finalizers": None}})
    expect_api_error(404, custom.get_namespaced_custom_object, *args)


def test_delete_honours_a_resource_version_precondition(core: client.CoreV1Api, kube_namespace: str) -> None:
    created = core.create_namespaced_pod(kube_namespace, pod("a"))
    core.patch_namespaced_pod("a", kube_namespace, {"metadata": {"labels": {"a": "b"}}})
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(
        resource_version=created.metadata.resource_version))
    expect_api_error(409, core.delete_namespaced_pod, "a", kube_namespace, body=options)


def test_deleting_a_lease_answers_a_success_status(kube_api: ApiClient, kube_namespace: str) -> None:
    leases = client.CoordinationV1Api(kube_api)
    leases.create_namespaced_lease(kube_namespace, lease("l", "a"))
    answer = leases.delete_namespaced_lease("l", kube_namespace)
    # Newer clients hand the Status back as a dict, older ones as V1Status.
    assert (answer["status"] if isinstance(answer, dict) else answer.status) == "Success"


# --- the real-cluster path -------------------------------------------------------------

def test_a_kubeconfig_reaches_its_server(emulator: Emulator, tmp_path: Any) -> None:
    # The KRUNTIMES_E2E_KUBECONFIG path, exercised against the emulator.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": emulator.host}}],
        "users": [{"name": "test", "user": {"token": "unused"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "test"}}]}))
    api = api_client_from_kubeconfig(str(kubeconfig))
    client.CoreV1Api(api).create_namespace(namespace("ns"))
    client.CoreV1Api(api).create_namespaced_pod("ns", pod("a"))
    api.close()
    assert emulator.requests[("create", "pods", None)] == 1


def test_the_cluster_serves_the_committed_crds(real_cluster: str, kube_api: ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(kube_api)
    for crd in crds.generate():
        name = crd["metadata"]["name"]
        try:
            served = extensions.read_custom_resource_definition(name)
        except ApiException as exc:
            pytest.fail(f"{name} is not installed ({exc.status}): kubectl apply -k deploy/crds")
        schema = kube_api.sanitize_for_serialization(served.spec.versions[0].var_schema.open_apiv3_schema)
        assert schema == crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], (
            f"{name} on the cluster differs from deploy/crds: kubectl apply -k deploy/crds")
