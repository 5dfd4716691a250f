"""The Runtime controller's reconcile step, rule by rule (SPEC §2.1, §4.2).

Runtimes and pods are written as API objects and read through the controller's
reading adapter, so invalid capacity is judged by the same models as the CRD.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from typing import Any

import pytest

from kruntimes.controller import tenancy
from kruntimes.controller.reading import active_run, runtime_pod, runtime_view
from kruntimes.controller.reconcile import (CAPACITY_ANNOTATION, POD_ENV, PodDefaults, RuntimePod, capacity_annotation,
                                            WORK_VOLUME, reconcile)

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
EARLIER = "2026-12-01T08:00:00Z"
RT_UID = "uid-rt"
TEMPLATE = {"metadata": {"labels": {"app": "python"}, "annotations": {"team": "ml", "kruntimes.io/capacity.runs": "9"}},
            "spec": {"containers": [{"name": "runtimed", "image": "example.com/python-runtime:1",
                                     "env": [{"name": "KRUNTIMES_POD_NAME", "value": "wrong"},
                                             {"name": "LANG", "value": "C.UTF-8"}]}]}}


def runtime(replicas: int = 2, capacity: Any = None, generation: int = 3,
            conditions: list[dict[str, Any]] | None = None) -> Any:
    return runtime_view({
        "metadata": {"name": "python", "namespace": "team", "uid": RT_UID, "generation": generation},
        "spec": {"replicas": replicas, "template": TEMPLATE,
                 "capacity": {"resources": {"runs": "4", "example.com/gpu": "1"} if capacity is None else capacity}},
        "status": {"conditions": conditions or []},
    })


def pod(name: str, *, ready: bool = True, phase: str = "Running", terminating: bool = False, owned: bool = True,
        created: str = EARLIER, annotations: dict[str, str] | None = None) -> RuntimePod:
    meta: dict[str, Any] = {
        "name": name, "uid": f"uid-{name}", "creationTimestamp": created,
        "annotations": {CAPACITY_ANNOTATION: '{"example.com/gpu":"1","runs":"4"}'} if annotations is None else annotations,
        "ownerReferences": [{"uid": RT_UID if owned else "uid-other", "controller": True}],
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T11:00:00Z"
    return runtime_pod({"metadata": meta, "status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}, RT_UID)


def run(name: str, pod_name: str, pod_uid: str | None = "same") -> Any:
    return active_run({"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
                       "spec": {"runtime": "python"},
                       "status": {"phase": "Running", "assignment": {
                           "podName": pod_name, "podUID": f"uid-{pod_name}" if pod_uid == "same" else pod_uid}}})


def names(pods: Any) -> list[str]:
    return [p.name for p in pods]


def test_a_new_runtime_gets_its_replicas_as_pods_carrying_everything_kruntimes_owns() -> None:
    plan = reconcile(runtime(replicas=2), [], [], NOW)
    assert len(plan.create) == 2
    body = plan.create[0]
    meta = body["metadata"]
    assert meta["generateName"] == "python-" and meta["namespace"] == "team"
    assert meta["labels"] == {"app": "python", "kruntimes.io/runtime": "python"}
    assert meta["ownerReferences"] == [{"apiVersion": "kruntimes.io/v1alpha1", "kind": "Runtime", "name": "python",
                                        "uid": RT_UID, "controller": True, "blockOwnerDeletion": True}]
    # One JSON annotation, sorted keys; the template's seed-style key does not leak through.
    assert meta["annotations"] == {"kruntimes.io/capacity": '{"example.com/gpu":"1","runs":"4"}', "team": "ml"}


def test_the_runtimed_container_keeps_its_image_and_gets_its_pod_identity() -> None:
    spec = reconcile(runtime(replicas=1), [], [], NOW).create[0]["spec"]
    container = spec["containers"][0]
    assert container["image"] == "example.com/python-runtime:1"
    assert container["command"] == ["kruntimes", "runtimed"]
    env = {e["name"]: e for e in container["env"]}
    assert env["LANG"] == {"name": "LANG", "value": "C.UTF-8"}
    for name, path in POD_ENV:
        assert env[name] == {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def test_the_runs_execute_in_a_runtime_container_of_runtimeds_image_with_a_writable_work_dir() -> None:
    spec = reconcile(runtime(replicas=1), [], [], NOW).create[0]["spec"]
    runtimed, server = spec["containers"]
    assert (server["name"], server["image"]) == (tenancy.RUNTIME_CONTAINER, runtimed["image"])
    assert server["command"] == ["kruntimes", "runtime-server"]
    env = {e["name"]: e["value"] for e in server["env"]}
    mounts = {m["mountPath"]: m["name"] for m in server["volumeMounts"]}
    assert {"name": mounts[env["KRUNTIMES_WORK_DIR"]], "emptyDir": {}} in spec["volumes"]
    assert {"name": mounts[tenancy.SERVER_DIR], "emptyDir": {}} in spec["volumes"]
    assert env[tenancy.SERVER_ENV] == tenancy.SERVER_SOCKET


SPLIT_CASES = [
    ("the pod mounts no token into every container", lambda spec: spec["automountServiceAccountToken"] is False),
    ("no container shares runtimed's processes", lambda spec: spec["shareProcessNamespace"] is False),
    ("runtimed alone mounts the token, where the client reads it",
     lambda spec: [(c["name"], m["mountPath"]) for c in spec["containers"] for m in c["volumeMounts"]
                   if m["name"] == tenancy.TOKEN_VOLUME] == [("runtimed", tenancy.TOKEN_DIR)]),
    ("the token is the pod-bound projected service-account token",
     lambda spec: {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}} in
     next(v for v in spec["volumes"] if v["name"] == tenancy.TOKEN_VOLUME)["projected"]["sources"]),
    ("runtimed and the runtime container share the server's socket volume",
     lambda spec: all({"name": tenancy.SERVER_VOLUME, "mountPath": tenancy.SERVER_DIR} in c["volumeMounts"]
                      for c in spec["containers"])),
    ("runtimed does not mount the Runs' working directories",
     lambda spec: all(m["name"] != WORK_VOLUME for m in spec["containers"][0]["volumeMounts"])),
]


@pytest.mark.parametrize("why,holds", SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
def test_runs_are_tenants_not_runtimed(why: str, holds: Any) -> None:
    assert holds(reconcile(runtime(replicas=1), [], [], NOW).create[0]["spec"])


@pytest.mark.parametrize("init", [
    "not a list", ["not an object"], [{"name": "setup", "volumeMounts": "not a list"}],
    [{"name": "setup", "volumeMounts": ["not an object"]}],
], ids=["a string", "a list of strings", "mounts that are a string", "a mount that is a string"])
def test_init_containers_the_controller_cannot_read_are_passed_to_the_server_as_they_are(init: Any) -> None:
    template = copy.deepcopy(TEMPLATE)
    template["spec"]["initContainers"] = copy.deepcopy(init)
    view = runtime_view({"metadata": {"name": "rt", "uid": RT_UID}, "spec": {
        "replicas": 1, "template": template, "capacity": {"resources": {"runs": "1"}}}})
    assert reconcile(view, [], [], NOW).create[0]["spec"]["initContainers"] == init


def test_an_init_container_mounting_something_at_the_token_path_loses_that_mount() -> None:
    template = copy.deepcopy(TEMPLATE)
    template["spec"]["initContainers"] = [{"name": "setup", "image": "busybox", "volumeMounts": [
        {"name": "stolen", "mountPath": tenancy.TOKEN_DIR}, {"name": "data", "mountPath": "/data"}]}]
    view = runtime_view({"metadata": {"name": "rt", "uid": RT_UID}, "spec": {
        "replicas": 1, "template": template, "capacity": {"resources": {"runs": "1"}}}})
    (setup,) = reconcile(view, [], [], NOW).create[0]["spec"]["initContainers"]
    assert setup["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_a_template_that_mounts_something_at_the_token_path_into_the_runtime_container_loses_that_mount() -> None:
    template = copy.deepcopy(TEMPLATE)
    template["spec"]["automountServiceAccountToken"] = True
    template["spec"]["shareProcessNamespace"] = True
    template["spec"]["containers"].append({"name": "runtime", "image": "example.com/tools:2", "command": ["serve"],
                                           "volumeMounts": [{"name": "stolen", "mountPath": tenancy.TOKEN_DIR}]})
    view = runtime_view({"metadata": {"name": "rt", "uid": RT_UID}, "spec": {
        "replicas": 1, "template": template, "capacity": {"resources": {"runs": "1"}}}})
    spec = reconcile(view, [], [], NOW).create[0]["spec"]
    server = next(c for c in spec["containers"] if c["name"] == tenancy.RUNTIME_CONTAINER)
    assert (server["image"], server["command"]) == ("example.com/tools:2", ["serve"])  # the template's own
    assert all(m["mountPath"] != tenancy.TOKEN_DIR for m in server["volumeMounts"])
    assert (spec["automountServiceAccountToken"], spec["shareProcessNamespace"]) == (False, False)


def test_runtimed_gets_a_state_directory_of_its_own_that_outlives_its_restarts() -> None:
    # SPEC §4.1 (amended 2026-12-04): an end not yet written and its Runs' pid files survive a restart.
    spec = reconcile(runtime(replicas=1), [], [], NOW).create[0]["spec"]
    runtimed, server = spec["containers"]
    env = {e["name"]: e for e in runtimed["env"]}
    mounts = {m["mountPath"]: m["name"] for m in runtimed["volumeMounts"]}
    state = mounts[env["KRUNTIMES_STATE_DIR"]["value"]]
    assert {"name": state, "emptyDir": {}} in spec["volumes"]
    assert all(m["name"] != state for m in server["volumeMounts"])  # no Run reaches runtimed's files


def test_a_template_without_a_runtimed_container_gets_one_from_the_default_image() -> None:
    view = runtime_view({"metadata": {"name": "bare", "uid": RT_UID}, "spec": {
        "replicas": 1, "template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}}}})
    containers = reconcile(view, [], [], NOW, defaults=PodDefaults(runtimed_image="img:1")).create[0]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("sidecar", "busybox"), ("runtimed", "img:1"),
                                                             ("runtime", "img:1")]


def test_the_template_is_never_modified() -> None:
    before = json.dumps(TEMPLATE, sort_keys=True)
    reconcile(runtime(replicas=3), [], [], NOW)
    assert json.dumps(TEMPLATE, sort_keys=True) == before


@pytest.mark.parametrize("pods, unobserved, creates", [
    ([pod("a"), pod("b")], 0, 0),
    ([pod("a")], 0, 1),
    ([pod("a")], 1, 0),
    ([pod("a"), pod("b", terminating=True)], 0, 1),
    ([pod("a"), pod("b", phase="Failed")], 0, 1),
    ([pod("a"), pod("x", owned=False)], 0, 1),
], ids=["enough pods: nothing to create", "one missing: one create",
        "a create not yet seen in the cache counts: no second create",
        "a terminating pod does not count", "a failed pod does not count",
        "a pod another controller owns does not count"])
def test_creates_make_up_the_live_owned_pods_to_replicas(pods: list[RuntimePod], unobserved: int, creates: int) -> None:
    assert len(reconcile(runtime(replicas=2), pods, [], NOW, unobserved_creates=unobserved).create) == creates


def test_a_failed_or_succeeded_pod_is_deleted_and_replaced_but_a_terminating_one_is_left_to_go() -> None:
    pods = [pod("a", phase="Failed"), pod("b", phase="Succeeded"), pod("c", terminating=True)]
    plan = reconcile(runtime(replicas=1), pods, [], NOW)
    assert names(plan.delete) == ["a", "b"] and len(plan.create) == 1


def test_creates_per_pass_are_bounded() -> None:
    assert len(reconcile(runtime(replicas=500), [], [], NOW, defaults=PodDefaults(max_creates=10)).create) == 10


def test_scale_down_deletes_idle_pods_first_then_not_ready_then_newest() -> None:
    pods = [pod("busy2"), pod("idle-old", created="2026-12-01T01:00:00Z"),
            pod("idle-new", created="2026-12-01T09:00:00Z"), pod("idle-unready", ready=False), pod("busy1")]
    runs = [run("r1", "busy2"), run("r2", "busy2"), run("r3", "busy1")]
    assert names(reconcile(runtime(replicas=4), pods, runs, NOW).delete) == ["idle-unready"]
    assert names(reconcile(runtime(replicas=3), pods, runs, NOW).delete) == ["idle-new", "idle-unready"]
    assert names(reconcile(runtime(replicas=1), pods, runs, NOW).delete) == [
        "busy1", "idle-new", "idle-old", "idle-unready"]


@pytest.mark.parametrize("annotations, patch", [
    ({CAPACITY_ANNOTATION: '{"example.com/gpu":"1","runs":"4"}'}, None),
    ({CAPACITY_ANNOTATION: '{"runs":"2"}'}, {CAPACITY_ANNOTATION: '{"example.com/gpu":"1","runs":"4"}'}),
    ({}, {CAPACITY_ANNOTATION: '{"example.com/gpu":"1","runs":"4"}'}),
    ({CAPACITY_ANNOTATION: '{"example.com/gpu":"1","runs":"4"}', "kruntimes.io/capacity.runs": "4"},
     {"kruntimes.io/capacity.runs": None}),
], ids=["already projected: no patch", "capacity changed: re-projected", "missing: projected",
        "a seed-style per-resource key is removed"])
def test_capacity_is_re_projected_onto_existing_pods_as_an_annotation_patch(
        annotations: dict[str, str], patch: dict[str, Any] | None) -> None:
    plan = reconcile(runtime(replicas=1), [pod("a", annotations=annotations)], [], NOW)
    assert plan.patch == (() if patch is None else ((pod("a", annotations=annotations),
                                                     {"metadata": {"annotations": patch}}),))


def test_the_capacity_annotation_is_the_same_whatever_order_the_spec_lists_resources() -> None:
    assert capacity_annotation({"runs": 4, "a.io/x": 2}) == capacity_annotation({"a.io/x": 2, "runs": 4}) == \
        '{"a.io/x":"2","runs":"4"}'


@pytest.mark.parametrize("capacity, fix", [
    ({"runs": "-1"}, 'spec.capacity.resources["runs"]: quantity "-1" is not a non-negative whole number'),
    ({"runs": "1.5"}, 'quantity "1.5" is not a non-negative whole number (use e.g. "1" or "2")'),
    ({"bad name!": "1"}, 'resource name "bad name!" is not a valid Kubernetes qualified name'),
], ids=["negative", "fractional", "bad name"])
def test_invalid_capacity_creates_and_patches_no_pod_and_a_condition_says_what_to_fix(
        capacity: dict[str, str], fix: str) -> None:
    plan = reconcile(runtime(replicas=2, capacity=capacity), [pod("a", annotations={CAPACITY_ANNOTATION: '{"runs":"2"}'})],
                     [], NOW)
    assert plan.create == () and plan.patch == ()
    condition = next(c for c in plan.status["conditions"] if c["type"] == "CapacityValid")
    assert (condition["status"], condition["reason"]) == ("False", "InvalidCapacity")
    assert fix in condition["message"] and "until spec.capacity.resources is fixed" in condition["message"]


def test_runs_whose_pod_is_gone_or_replaced_end_runtime_pod_lost_and_others_stay() -> None:
    pods = [pod("alive"), pod("going", terminating=True), pod("foreign", owned=False)]
    runs = [run("ok", "alive"), run("on-terminating", "going"), run("on-foreign", "foreign"),
            run("deleted", "vanished"), run("replaced", "alive", pod_uid="uid-previous-alive"),
            run("by-name", "alive", pod_uid=None), run("by-name-gone", "vanished", pod_uid=None)]
    lost = reconcile(runtime(replicas=1), pods, runs, NOW).lost
    assert [(x.run.name, x.reason) for x in lost] == [
        ("by-name-gone", "RuntimePodLost"), ("deleted", "RuntimePodLost"), ("replaced", "RuntimePodLost")]
    assert "runtime pod vanished is gone" in lost[0].message


def test_status_counts_live_and_ready_pods_and_reports_the_observed_generation() -> None:
    pods = [pod("a"), pod("b", ready=False), pod("c", terminating=True)]
    status = reconcile(runtime(replicas=2, generation=7), pods, [], NOW).status
    assert (status["replicas"], status["readyReplicas"], status["observedGeneration"]) == (2, 1, 7)
    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert (available["status"], available["message"]) == ("False", "1 of 2 runtime pods ready")
    assert all(c["observedGeneration"] == 7 for c in status["conditions"])


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    first = reconcile(runtime(replicas=1), [pod("a")], [], NOW).status["conditions"]
    later = datetime(2026, 12, 1, 13, tzinfo=timezone.utc)
    again = reconcile(runtime(replicas=1, conditions=first), [pod("a")], [], later).status["conditions"]
    assert [c["lastTransitionTime"] for c in again] == [c["lastTransitionTime"] for c in first]


def test_a_runtime_with_an_unreadable_replica_count_reads_as_zero_replicas() -> None:
    view = runtime_view({"metadata": {"name": "x"}, "spec": {"replicas": "3", "template": {}}})
    assert view.replicas == 0
