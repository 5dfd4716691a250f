"""Graceful pod deletion and ownerReferences garbage collection, pinned against the upstream rules.

Sources: "Pod Lifecycle", termination of Pods (a DELETE sets ``deletionTimestamp`` and
the grace period, 30 s by default from ``terminationGracePeriodSeconds``; grace 0
deletes at once); the pod registry's graceful-delete rule (a pod never bound to a node,
or already Succeeded/Failed, is deleted at once; a later DELETE may only shorten the
period); "Garbage Collection" (background cascading deletion is the default: the
garbage collector deletes the dependents after the owner is gone; ``Orphan`` leaves them,
without the reference). There is no kubelet here: the emulator removes a terminating pod
when its grace period elapsed (``grace_scale`` shortens it for tests).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from tests.emulator.manifests import GROUP, VERSION, bound_pod, namespace, pod
from tests.emulator.server import Emulator
from tests.emulator.test_emulator import expect_api_error

NS = "ns"


def started(factory: Callable[..., Emulator], **options: Any) -> tuple[Emulator, client.CoreV1Api]:
    emulator = factory(**options)
    api = emulator.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace(namespace(NS))
    return emulator, core


def names(core: client.CoreV1Api) -> list[str]:
    return [p.metadata.name for p in core.list_namespaced_pod(NS).items]


def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# --- pods ------------------------------------------------------------------------------

def test_deleting_a_bound_pod_marks_it_with_the_default_30_second_grace_period(
        emulator_factory: Callable[..., Emulator]) -> None:
    _, core = started(emulator_factory)
    created = core.create_namespaced_pod(NS, bound_pod("a"))
    assert created.spec.termination_grace_period_seconds == 30  # defaulted on create
    answer = core.delete_namespaced_pod("a", NS)
    assert answer.metadata.deletion_grace_period_seconds == 30
    read = core.read_namespaced_pod("a", NS)
    assert read.metadata.deletion_timestamp is not None
    assert 29 <= (read.metadata.deletion_timestamp - read.metadata.creation_timestamp).total_seconds() <= 31


def test_a_terminating_pod_is_removed_once_its_grace_period_elapsed(
        emulator_factory: Callable[..., Emulator]) -> None:
    _, core = started(emulator_factory, grace_scale=0.01)  # 30 s pass in 0.3 s
    core.create_namespaced_pod(NS, bound_pod("a"))
    core.delete_namespaced_pod("a", NS)
    assert names(core) == ["a"]
    eventually(lambda: names(core) == [])


def test_grace_period_zero_deletes_a_bound_pod_at_once(emulator_factory: Callable[..., Emulator]) -> None:
    _, core = started(emulator_factory)
    core.create_namespaced_pod(NS, bound_pod("a"))
    core.delete_namespaced_pod("a", NS, grace_period_seconds=0)
    assert names(core) == []


def test_a_second_delete_may_shorten_the_grace_period_but_not_lengthen_it(
        emulator_factory: Callable[..., Emulator]) -> None:
    _, core = started(emulator_factory)
    core.create_namespaced_pod(NS, bound_pod("a"))
    core.delete_namespaced_pod("a", NS, grace_period_seconds=20)
    assert core.delete_namespaced_pod("a", NS, grace_period_seconds=60).metadata.deletion_grace_period_seconds == 20
    assert core.delete_namespaced_pod("a", NS, grace_period_seconds=5).metadata.deletion_grace_period_seconds == 5
    core.delete_namespaced_pod("a", NS, grace_period_seconds=0)
    assert names(core) == []


@pytest.mark.parametrize("phase", [None, "Succeeded", "Failed"], ids=["never bound", "succeeded", "failed"])
def test_a_pod_no_kubelet_runs_is_deleted_at_once(emulator_factory: Callable[..., Emulator],
                                                  phase: str | None) -> None:
    _, core = started(emulator_factory)
    core.create_namespaced_pod(NS, pod("a") if phase is None else bound_pod("a"))
    if phase:
        core.patch_namespaced_pod_status("a", NS, {"status": {"phase": phase}})
    core.delete_namespaced_pod("a", NS)
    assert names(core) == []


def test_writes_to_a_terminating_pod_do_not_delete_it(emulator_factory: Callable[..., Emulator]) -> None:
    _, core = started(emulator_factory)
    core.create_namespaced_pod(NS, bound_pod("a"))
    core.delete_namespaced_pod("a", NS)
    core.patch_namespaced_pod("a", NS, {"metadata": {"annotations": {"k": "v"}}})
    assert core.read_namespaced_pod("a", NS).metadata.deletion_timestamp is not None


def test_finish_terminating_ends_every_grace_period_now(emulator_factory: Callable[..., Emulator]) -> None:
    emulator, core = started(emulator_factory)
    core.create_namespaced_pod(NS, bound_pod("a"))
    core.delete_namespaced_pod("a", NS)
    emulator.finish_terminating()
    eventually(lambda: names(core) == [])


# --- garbage collection ----------------------------------------------------------------

def owned_pod(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    body = pod(name)
    body["metadata"]["ownerReferences"] = [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "Runtime",
                                            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                            "controller": True}]
    return body


def runtime(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    return dict(custom.create_namespaced_custom_object(GROUP, VERSION, NS, "runtimes", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Runtime", "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}))


def test_deleting_an_owner_deletes_its_dependents_in_the_background(
        kube_api: ApiClient, kube_namespace: str) -> None:
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    owner = dict(custom.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runtimes", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Runtime", "metadata": {"name": "python"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
    core.create_namespaced_pod(kube_namespace, owned_pod("owned", owner))
    core.create_namespaced_pod(kube_namespace, pod("free"))
    custom.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, "runtimes", "python")
    eventually(lambda: [p.metadata.name for p in core.list_namespaced_pod(kube_namespace).items] == ["free"], 30)


def test_orphan_propagation_keeps_the_dependents_without_the_reference(
        emulator_factory: Callable[..., Emulator]) -> None:
    emulator, core = started(emulator_factory)
    custom = client.CustomObjectsApi(emulator.api_client())
    owner = runtime(custom, "python")
    core.create_namespaced_pod(NS, owned_pod("owned", owner))
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "runtimes", "python", propagation_policy="Orphan")
    eventually(lambda: not core.read_namespaced_pod("owned", NS).metadata.owner_references)


def test_a_dependent_with_another_live_owner_only_loses_the_dangling_reference(
        emulator_factory: Callable[..., Emulator]) -> None:
    emulator, core = started(emulator_factory)
    custom = client.CustomObjectsApi(emulator.api_client())
    first, second = runtime(custom, "first"), runtime(custom, "second")
    body = owned_pod("shared", first)
    body["metadata"]["ownerReferences"].append({**owned_pod("x", second)["metadata"]["ownerReferences"][0],
                                                "controller": False})
    core.create_namespaced_pod(NS, body)
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "runtimes", "first")
    eventually(lambda: [r.uid for r in core.read_namespaced_pod("shared", NS).metadata.owner_references]
               == [second["metadata"]["uid"]])


def test_a_dependent_created_for_an_owner_that_does_not_exist_is_collected(
        emulator_factory: Callable[..., Emulator]) -> None:
    _, core = started(emulator_factory)
    ghost = {"metadata": {"name": "gone", "uid": "00000000-0000-0000-0000-000000000000"}}
    core.create_namespaced_pod(NS, owned_pod("orphan", ghost))
    eventually(lambda: names(core) == [])


def test_foreground_propagation_is_refused_visibly(emulator_factory: Callable[..., Emulator]) -> None:
    emulator, core = started(emulator_factory)
    custom = client.CustomObjectsApi(emulator.api_client())
    runtime(custom, "python")
    expect_api_error(501, custom.delete_namespaced_custom_object, GROUP, VERSION, NS, "runtimes", "python",
                     propagation_policy="Foreground")
