"""runtimed's admission policies (deploy/base/runtimed-policy.yaml, SPEC §4.1 least privilege),
evaluated with cel-python against the writes they must allow and refuse.

The harness, `judge` (the API emulator's own evaluator, tests/emulator/admission.py),
does what the API server does with a ValidatingAdmissionPolicy: if every
matchCondition holds, it evaluates the variables (in order, as `variables.<name>`) and
then every validation; a validation that is false refuses the request with its
message, and one that fails to evaluate refuses it too (`failurePolicy: Fail`). The
policy's CEL keeps to the core language, which cel-python and Kubernetes share, so
the expressions evaluated here are the ones the API server runs.

A runtimed's request carries its pod-bound token's claims in the user extra, as the
API server fills them: `authentication.kubernetes.io/pod-name` and `.../pod-uid`.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.emulator.admission import Decision, judge
from tests.unit.manifests import DEPLOY, Object, build, find

celpy = pytest.importorskip("celpy", reason="pip install cel-python (the test extra)")

POLICY_FILE = DEPLOY / "base" / "runtimed-policy.yaml"
RUN_STATUS, HEARTBEAT = "kruntimes-runtimed-run-status", "kruntimes-runtimed-heartbeat"
EVENTS = "kruntimes-runtimed-events"
HEARTBEAT_KEY = "kruntimes.io/runtimed-heartbeat"
NS, POD, POD_UID = "team-a", "python-7xk2q", "0b1c-own"
RUNTIMED = f"system:serviceaccount:{NS}:kruntimes-runtimed"
ANNOTATIONS_ONLY = ("a runtimed changes no annotation of its pod but kruntimes.io/runtimed-heartbeat, and "
                    "kruntimes.io/devices where its Runtime's devices publisher is Runtimed")
DEVICES_KEY = "kruntimes.io/devices"
INVENTORY = '{"devices":[{"name":"gpu-0"}],"driver":"gpu.example.com"}'


def _policies() -> dict[str, Object]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(POLICY_FILE.read_text())
            if d and d["kind"] == "ValidatingAdmissionPolicy"}


def admit(policy: str, request: Object, obj: Object, old: Object) -> Decision:
    """The policy's answer to an UPDATE: whether it applies, and the messages of what it refuses."""
    activation: dict[str, Any] = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(obj),
                                  "oldObject": celpy.json_to_cel(old)}
    return judge(_policies()[policy]["spec"], activation)


def request(username: str = RUNTIMED, *, namespace: str = NS, pod: str | None = POD,
            pod_uid: str | None = POD_UID) -> Object:
    """An admission request as the API server builds it; `extra` is absent when empty (omitempty)."""
    extra = {key: [value] for key, value in (("authentication.kubernetes.io/pod-name", pod),
                                              ("authentication.kubernetes.io/pod-uid", pod_uid)) if value}
    user: Object = {"username": username, "uid": "u-1", "groups": ["system:authenticated"]}
    if extra:
        user["extra"] = extra
    return {"operation": "UPDATE", "namespace": namespace, "userInfo": user}


# --- the pod heartbeat -------------------------------------------------------------------------

def pod(name: str = POD, *, heartbeat: str | None = "2026-12-01T10:00:00Z", **annotations: str) -> Object:
    notes = {"kruntimes.io/capacity": '{"runs":"4"}', **annotations}
    if heartbeat is not None:
        notes[HEARTBEAT_KEY] = heartbeat
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": POD_UID if name == POD else "0b1c-other",
                         "labels": {"kruntimes.io/runtime": "python"}, "annotations": notes,
                         "ownerReferences": [{"apiVersion": "kruntimes.io/v1alpha1", "kind": "Runtime",
                                              "name": "python", "uid": "rt-1", "controller": True}]},
            "spec": {"serviceAccountName": "kruntimes-runtimed",
                     "containers": [{"name": "runtimed", "image": "ghcr.io/kruntimes/kruntimes:0.1.0"}]}}


def publisher(old: Object, env: str = "KRUNTIMES_DEVICE_DISCOVER", container: str = "runtimed") -> Object:
    """`old` as the controller makes a pod whose Runtime's devices publisher is Runtimed (SPEC §7.1)."""
    new = copy.deepcopy(old)
    new["spec"]["containers"] = [{"name": "runtime", "image": "example.com/gpu:1"},
                                 {"name": container, "image": "ghcr.io/kruntimes/kruntimes:0.1.0",
                                  "env": [{"name": "KRUNTIMES_POD_NAME", "value": "x"},
                                          {"name": env, "value": '{"argv":["/bin/gpus"],"driver":"gpu.example.com"}'}]}]
    return new


def renewed(old: Object) -> Object:
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][HEARTBEAT_KEY] = "2026-12-01T10:00:10Z"
    return new


def changed(old: Object, path: tuple[str, ...], value: Any) -> Object:
    new = renewed(old)
    *parents, last = path
    target = new
    for key in parents:
        target = target[key]
    if value is None:
        del target[last]
    else:
        target[last] = value
    return new


OWN = pod()
HEARTBEAT_CASES = [
    ("renewing its own pod's heartbeat is allowed", request(), renewed(OWN), OWN, []),
    ("writing its own pod's first heartbeat is allowed", request(), renewed(pod(heartbeat=None)),
     pod(heartbeat=None), []),
    ("renewing another pod's heartbeat is refused", request(), renewed(pod("python-other")), pod("python-other"),
     ["a runtimed writes its own pod only"]),
    ("raising its own capacity is refused", request(),
     changed(OWN, ("metadata", "annotations", "kruntimes.io/capacity"), '{"runs":"40"}'), OWN,
     [ANNOTATIONS_ONLY]),
    ("adding another annotation is refused", request(), changed(OWN, ("metadata", "annotations", "note"), "x"), OWN,
     [ANNOTATIONS_ONLY]),
    ("removing the capacity annotation is refused", request(),
     changed(OWN, ("metadata", "annotations", "kruntimes.io/capacity"), None), OWN,
     [ANNOTATIONS_ONLY]),
    ("a publisher runtimed publishes its own pod's first inventory", request(),
     changed(publisher(OWN), ("metadata", "annotations", DEVICES_KEY), INVENTORY), publisher(OWN), []),
    ("a publisher runtimed replaces its own pod's inventory, even with a malformed one", request(),
     changed(publisher(pod(**{DEVICES_KEY: INVENTORY})), ("metadata", "annotations", DEVICES_KEY),
             '{"discoverError":"exit 1"}'), publisher(pod(**{DEVICES_KEY: INVENTORY})), []),
    ("a publisher runtimed still may not raise its capacity", request(),
     changed(publisher(OWN), ("metadata", "annotations", "kruntimes.io/capacity"), '{"runs":"40"}'), publisher(OWN),
     [ANNOTATIONS_ONLY]),
    ("a publisher runtimed may not publish another pod's inventory", request(),
     changed(publisher(pod("python-other")), ("metadata", "annotations", DEVICES_KEY), INVENTORY),
     publisher(pod("python-other")), ["a runtimed writes its own pod only"]),
    ("writing the inventory the controller projects is refused", request(),
     changed(pod(**{DEVICES_KEY: INVENTORY}), ("metadata", "annotations", DEVICES_KEY), INVENTORY.replace("0", "9")),
     pod(**{DEVICES_KEY: INVENTORY}), [ANNOTATIONS_ONLY]),
    ("removing the inventory the controller projects is refused", request(),
     changed(pod(**{DEVICES_KEY: INVENTORY}), ("metadata", "annotations", DEVICES_KEY), None),
     pod(**{DEVICES_KEY: INVENTORY}), [ANNOTATIONS_ONLY]),
    ("a discover variable in another container does not make a publisher", request(),
     changed(publisher(OWN, container="runtime-2"), ("metadata", "annotations", DEVICES_KEY), INVENTORY),
     publisher(OWN, container="runtime-2"), [ANNOTATIONS_ONLY]),
    ("another variable of runtimed's does not make a publisher", request(),
     changed(publisher(OWN, env="KRUNTIMES_DEVICE_ENV"), ("metadata", "annotations", DEVICES_KEY), INVENTORY),
     publisher(OWN, env="KRUNTIMES_DEVICE_ENV"), [ANNOTATIONS_ONLY]),
    ("a runtimed may not make itself a publisher by adding the variable", request(),
     changed(publisher(OWN), ("metadata", "annotations", DEVICES_KEY), INVENTORY), OWN,
     [ANNOTATIONS_ONLY, "a runtimed changes nothing of its pod but the kruntimes.io/runtimed-heartbeat annotation"]),
    ("moving its pod to another Runtime by label is refused", request(),
     changed(OWN, ("metadata", "labels", "kruntimes.io/runtime"), "gpu"), OWN,
     ["a runtimed changes nothing of its pod but the kruntimes.io/runtimed-heartbeat annotation"]),
    ("dropping the owner reference is refused", request(), changed(OWN, ("metadata", "ownerReferences"), None), OWN,
     ["a runtimed changes nothing of its pod but the kruntimes.io/runtimed-heartbeat annotation"]),
    ("changing its container image is refused", request(),
     changed(OWN, ("spec", "containers"), [{"name": "runtimed", "image": "evil:latest"}]), OWN,
     ["a runtimed changes nothing of its pod but the kruntimes.io/runtimed-heartbeat annotation"]),
    ("a token without a pod-name claim is refused", request(pod=None, pod_uid=None), renewed(OWN), OWN,
     ["a runtimed writes its own pod only"]),
    ("a runtimed of another namespace is refused",
     request("system:serviceaccount:team-b:kruntimes-runtimed"), renewed(OWN), OWN,
     ["a runtimed writes pods in its own namespace only"]),
]


@pytest.mark.parametrize("why,req,new,old,refusals", HEARTBEAT_CASES, ids=[c[0] for c in HEARTBEAT_CASES])
def test_the_heartbeat_policy(why: str, req: Object, new: Object, old: Object, refusals: list[str]) -> None:
    assert admit(HEARTBEAT, req, new, old) == Decision(True, refusals)


# --- Run status ----------------------------------------------------------------------------

def run(phase: str = "Scheduled", *, pod_name: str | None = POD, pod_uid: str | None = POD_UID) -> Object:
    status: Object = {"phase": phase}
    if pod_name is not None:
        status["assignment"] = {"podName": pod_name, **({"podUID": pod_uid} if pod_uid else {})}
    return {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
            "metadata": {"name": "hello", "namespace": NS, "uid": "run-1", "resourceVersion": "7"},
            "spec": {"runtime": "python", "mode": {"task": {"args": ["true"]}}}, "status": status}


def moved(obj: Object, phase: str, **assignment: str | None) -> Object:
    new = copy.deepcopy(obj)
    new["status"]["phase"] = phase
    if assignment:
        new["status"]["assignment"] = {k: v for k, v in assignment.items() if v is not None}
    return new


ELSEWHERE = "a runtimed writes the status of Runs assigned to its own pod only"
KEPT = "a runtimed keeps a Run's assignment as the scheduler wrote it"
FINAL = "a runtimed writes only Runs that are Scheduled or Running; a finished Run stays as it ended"
BACK = "a runtimed moves a Run forward only (Scheduled, Running, Succeeded or Failed), never back"
RUN_CASES = [
    ("claiming a Run assigned to its own pod is allowed", request(), moved(run(), "Running"), run(), []),
    ("ending a Run on its own pod is allowed", request(), moved(run("Running"), "Failed"), run("Running"), []),
    ("a Run assigned by name only (an older scheduler) is allowed", request(),
     moved(run(pod_uid=None), "Running"), run(pod_uid=None), []),
    ("a Run assigned to another pod is refused", request(), moved(run(pod_name="python-other"), "Running"),
     run(pod_name="python-other"), [ELSEWHERE]),
    ("reassigning a Run to its own pod is refused", request(),
     moved(run(pod_name="python-other", pod_uid="0b1c-other"), "Running", podName=POD, podUID=POD_UID),
     run(pod_name="python-other", pod_uid="0b1c-other"), [ELSEWHERE, KEPT]),
    ("moving its own Run to another pod is refused", request(),
     moved(run(), "Scheduled", podName="python-other", podUID="0b1c-other"), run(), [KEPT]),
    ("a Run assigned to an earlier pod of the same name is refused", request(),
     moved(run(pod_uid="0b1c-earlier"), "Running"), run(pod_uid="0b1c-earlier"), [ELSEWHERE]),
    ("a Pending Run is refused", request(), moved(run("Pending", pod_name=None), "Running", podName=POD, podUID=POD_UID),
     run("Pending", pod_name=None), [ELSEWHERE, KEPT, FINAL]),
    ("a token without a pod-name claim is refused", request(pod=None, pod_uid=None), moved(run(), "Running"), run(),
     ["runtimed must authenticate with its pod's bound service-account token (no pod-name claim)", ELSEWHERE]),
    ("a runtimed of another namespace is refused", request("system:serviceaccount:team-b:kruntimes-runtimed"),
     moved(run(), "Running"), run(), ["a runtimed writes the status of Runs in its own namespace only"]),
]


DEVICES = "a runtimed keeps a Run's status.devices as the scheduler's Bind wrote it"
GPU_0 = {"inventoryDigest": "d" * 64, "results": [{"request": "gpu", "device": "gpu-0"}]}
GPU_1 = {"inventoryDigest": "d" * 64, "results": [{"request": "gpu", "device": "gpu-1"}]}


def with_status(obj: Object, **fields: Any) -> Object:
    new = copy.deepcopy(obj)
    new["status"].update(fields)
    return new


# What the runtimed token could be used for on its own pod if it leaked, beyond where a Run may
# run (SPEC §4.1, issue 23 "a Run's process is a tenant"): each transition runtimed never makes.
TRANSITIONS = [
    ("writing a Run's Admitted condition while it waits is allowed", request(),
     with_status(run(), conditions=[{"type": "Admitted", "status": "False"}]), run(), []),
    ("ending a Scheduled Run Failed (a malformed Run) is allowed", request(), moved(run(), "Failed"), run(), []),
    ("releasing a function Run as it ends Succeeded is allowed", request(),
     with_status(moved(run("Running"), "Succeeded"), released=True), run("Running"), []),
    ("setting a finished Run back to Scheduled is refused", request(), moved(run("Succeeded"), "Scheduled"),
     run("Succeeded"), [FINAL, BACK]),
    ("setting a failed Run back to Running is refused", request(), moved(run("Failed"), "Running"),
     run("Failed"), [FINAL]),
    ("rewriting a finished Run's result is refused", request(), moved(run("Failed"), "Succeeded"),
     run("Failed"), [FINAL]),
    ("setting a Running Run back to Pending is refused", request(), moved(run("Running"), "Pending"),
     run("Running"), [BACK]),
    ("setting a Running Run back to Scheduled is refused", request(), moved(run("Running"), "Scheduled"),
     run("Running"), [BACK]),
    ("setting a Scheduled Run back to Pending is refused", request(), moved(run(), "Pending"), run(), [BACK]),
    ("dropping a Run's phase is refused", request(), moved(run("Running"), ""), run("Running"), [BACK]),
    ("marking a Running Run released without ending it is refused", request(),
     with_status(run("Running"), released=True), run("Running"),
     ["a runtimed marks a Run released only as it ends it Succeeded"]),
    ("an assignment changed back to Pending is refused on every count", request(),
     moved(run("Running"), "Pending", podName=None), run("Running"), [KEPT, BACK]),
    # SPEC §7.6: status.devices is the scheduler's, written with the assignment; runtimed keeps it.
    ("claiming a Run keeping the devices Bind wrote is allowed", request(),
     moved(with_status(run(), devices=GPU_0), "Running"), with_status(run(), devices=GPU_0), []),
    ("ending a Run keeping its devices is allowed", request(),
     moved(with_status(run("Running"), devices=GPU_0), "Succeeded"), with_status(run("Running"), devices=GPU_0), []),
    ("giving a Run other devices is refused", request(),
     moved(with_status(run(), devices=GPU_1), "Running"), with_status(run(), devices=GPU_0), [DEVICES]),
    ("giving a Run devices Bind never wrote is refused", request(),
     moved(with_status(run(), devices=GPU_1), "Running"), run(), [DEVICES]),
    ("dropping a Run's devices is refused", request(), moved(run(), "Running"), with_status(run(), devices=GPU_0),
     [DEVICES]),
]


@pytest.mark.parametrize("why,req,new,old,refusals", TRANSITIONS, ids=[c[0] for c in TRANSITIONS])
def test_the_run_status_policy_allows_only_runtimeds_own_transitions(why: str, req: Object, new: Object, old: Object,
                                                                      refusals: list[str]) -> None:
    assert admit(RUN_STATUS, req, new, old) == Decision(True, refusals)


def test_faking_a_co_tenants_result_is_a_transition_runtimed_makes_itself() -> None:
    # What policy cannot stop: whoever holds runtimed's token may end any Running Run of its
    # pod with any result, because that is the very write runtimed makes. The defence is
    # that only runtimed holds the token (the Runtime Server split, docs/runtimed.md).
    faked = with_status(moved(run("Running"), "Succeeded"), conditions=[{"type": "Completed", "status": "True"}])
    assert admit(RUN_STATUS, request(), faked, run("Running")) == Decision(True, [])


@pytest.mark.parametrize("why,req,new,old,refusals", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_the_run_status_policy(why: str, req: Object, new: Object, old: Object, refusals: list[str]) -> None:
    assert admit(RUN_STATUS, req, new, old) == Decision(True, refusals)


def test_dropping_the_assignment_is_refused() -> None:
    new = moved(run(), "Failed")
    del new["status"]["assignment"]
    assert admit(RUN_STATUS, request(), new, run()) == Decision(True, [KEPT])


# --- everyone else ---------------------------------------------------------------------------

OTHERS = [
    "system:serviceaccount:kruntimes-system:kruntimes-scheduler",
    "system:serviceaccount:kruntimes-system:kruntimes-controller",
    "system:serviceaccount:team-a:default",
    "system:serviceaccount:team-a:kruntimes-runtimed-debug",
    "system:node:worker-1",
    "alice@example.com",
]


@pytest.mark.parametrize("username", OTHERS)
def test_nobody_else_is_affected(username: str) -> None:
    # The scheduler binding a Run elsewhere, the controller failing one, a kubelet or a
    # person editing a pod: the policies do not apply, whatever the write.
    other_pod = changed(pod("python-other"), ("metadata", "annotations", "kruntimes.io/capacity"), '{"runs":"9"}')
    assert admit(HEARTBEAT, request(username, pod=None, pod_uid=None), other_pod, pod("python-other")).matched is False
    rebound = moved(run(pod_name="python-other"), "Scheduled", podName=POD, podUID=POD_UID)
    assert admit(RUN_STATUS, request(username, pod=None, pod_uid=None), rebound,
                 run(pod_name="python-other")).matched is False


# --- the policies as deployed ----------------------------------------------------------------

def test_each_policy_is_bound_to_deny() -> None:
    objects = build("base")
    for name in (RUN_STATUS, HEARTBEAT, EVENTS):
        find(objects, "ValidatingAdmissionPolicy", name)
        binding = find(objects, "ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"]["policyName"] == name and binding["spec"]["validationActions"] == ["Deny"]
        assert _policies()[name]["spec"]["failurePolicy"] == "Fail"


def test_every_write_runtimed_may_make_is_under_a_policy() -> None:
    # What RBAC lets runtimed write, the policies must cover, operation by operation; a PATCH is admitted as UPDATE.
    role = find(build("base"), "ClusterRole", "kruntimes-runtimed")
    operation = {"update": "UPDATE", "patch": "UPDATE", "create": "CREATE"}
    assert {verb for rule in role["rules"] for verb in rule["verbs"]} <= {"get", "list", "watch", *operation}
    writes = {(group, resource, operation[verb]) for rule in role["rules"] for verb in rule["verbs"]
              if verb in operation for group in rule["apiGroups"] for resource in rule["resources"]}
    covered = {(group, resource, op) for policy in _policies().values()
               for rule in policy["spec"]["matchConstraints"]["resourceRules"] for op in rule["operations"]
               for group in rule["apiGroups"] for resource in rule["resources"]}
    assert writes <= covered
    assert {(g, r) for g, r, _ in writes} == {("kruntimes.io", "runs/status"), ("", "pods"), ("events.k8s.io", "events")}


def test_a_heartbeat_far_ahead_is_beyond_what_a_policy_can_bound() -> None:
    # Admission CEL has no clock, so "not after now" cannot be said; a policy could only bound
    # the value against the previous one, which a legitimate runtimed after a long pause breaks.
    # Only runtimed holds the token that can write it (the Runtime Server split).
    far = changed(OWN, ("metadata", "annotations", HEARTBEAT_KEY), "2099-01-01T00:00:00Z")
    assert admit(HEARTBEAT, request(), far, OWN) == Decision(True, [])


# --- its Events --------------------------------------------------------------------------------

def event(*, kind: str = "Run", api_version: str = "kruntimes.io/v1alpha1", namespace: str = NS,
          controller: str = "kruntimes.io/runtimed", instance: str = POD) -> Object:
    """An Event as runtimed's recorder creates it (``kruntimes.cluster.events``)."""
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "batch-1.18a", "namespace": NS},
            "eventTime": "2026-12-01T10:00:00.500000Z", "reportingController": controller,
            "reportingInstance": instance, "action": "Admitted", "reason": "Admitted", "type": "Normal",
            "note": f"Admitted on Runtime Pod {POD} by its runtimed",
            "regarding": {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": "batch-1",
                          "uid": "run-1"}}


EVENT_CASES = [
    ("its Event about a Run of its namespace, as itself", request(), event(), []),
    ("an Event about a pod", request(), event(kind="Pod", api_version="v1"),
     ["a runtimed writes Events about Runs of its namespace only"]),
    ("an Event about a Run of another namespace", request(), event(namespace="team-b"),
     ["a runtimed writes Events about Runs of its namespace only"]),
    ("an Event speaking for the scheduler", request(), event(controller="kruntimes.io/scheduler"),
     ["a runtimed reports Events as kruntimes.io/runtimed, instance its own pod"]),
    ("an Event in another pod's name", request(), event(instance="python-other"),
     ["a runtimed reports Events as kruntimes.io/runtimed, instance its own pod"]),
    ("a token bound to no pod", request(pod=None, pod_uid=None), event(),
     ["a runtimed reports Events as kruntimes.io/runtimed, instance its own pod"]),
    ("an Event in another namespace", request(namespace="team-b"), event(),
     ["a runtimed writes Events in its own namespace only", "a runtimed writes Events about Runs of its namespace only"]),
]


@pytest.mark.parametrize("why,req,new,refusals", EVENT_CASES, ids=[c[0] for c in EVENT_CASES])
def test_the_events_policy(why: str, req: Object, new: Object, refusals: list[str]) -> None:
    create = {**req, "operation": "CREATE"}
    assert admit(EVENTS, create, new, None) == Decision(True, refusals)  # type: ignore[arg-type]


def test_the_events_policy_leaves_everyone_else_alone() -> None:
    scheduler = request("system:serviceaccount:kruntimes-system:kruntimes-scheduler", pod=None, pod_uid=None)
    assert admit(EVENTS, scheduler, event(controller="kruntimes.io/scheduler"), None).matched is False  # type: ignore[arg-type]


def test_the_events_runtimed_emits_pass_its_policy() -> None:
    # The body the recorder builds, for an Event runtimed's lifecycle emits, is what the policy admits.
    from unittest import mock

    from kruntimes import wire
    from kruntimes.cluster import events

    sent: list[Object] = []
    recorder = events.EventRecorder(mock.MagicMock(), instance=POD, controller=wire.RUNTIMED_EVENTS_REPORTER)
    recorder._events = mock.MagicMock(create_namespaced_event=lambda ns, body, **kw: sent.append(body))
    recorder.emit(events.run(NS, "batch-1", "run-1"), "Completed", "Succeeded: exit code 0")
    recorder.handle(recorder._queue.get_nowait())
    (body,) = sent
    assert admit(EVENTS, {**request(), "operation": "CREATE"}, body, None) == Decision(True, [])  # type: ignore[arg-type]
