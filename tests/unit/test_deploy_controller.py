"""The Runtime controller's manifests (issue 13 item 5): a leader-elected Deployment like the
scheduler's, and RBAC granting exactly the calls `kruntimes controller` makes (SPEC §4.2).
"""

from __future__ import annotations

import pytest

from kruntimes.cli.main import build_parser
from tests.unit.manifests import (
    ALL_NAMESPACES, BUILDS, IMAGE, NAMESPACE, ROOT, SETTINGS_GRANT, Call, Grant, Object, allows, build, client_calls, container, env,
    find, flags, grants_to, mounts,
)

CONTROLLER = "kruntimes-controller"  # Deployment, ServiceAccount, ClusterRole and Lease
LEASE = CONTROLLER

# What `kruntimes controller` calls (kruntimes/controller/kube.py, runner.py; the cluster
# adapter's informers and leader election).
CONTROLLER_CALLS = [
    *(Call(f"the {resource} informer may {verb} {resource} in every namespace", ALL_NAMESPACES, group, resource, verb)
      for group, resource in (("kruntimes.io", "runs"), ("kruntimes.io", "runtimes"), ("", "pods"))
      for verb in ("list", "watch")),
    Call("a Run is read once before it is failed as RuntimePodLost", ALL_NAMESPACES, "kruntimes.io", "runs", "get"),
    Call("a pod is read once to confirm it is gone", ALL_NAMESPACES, "", "pods", "get"),
    Call("Runtime Pods are created from the template", ALL_NAMESPACES, "", "pods", "create"),
    Call("surplus and finished Runtime Pods are deleted", ALL_NAMESPACES, "", "pods", "delete"),
    Call("capacity is re-projected by a merge patch", ALL_NAMESPACES, "", "pods", "patch"),
    Call("a Run whose pod is gone ends Failed through its status", ALL_NAMESPACES, "kruntimes.io", "runs/status",
         "update"),
    Call("Runtime.status is written by a merge patch", ALL_NAMESPACES, "kruntimes.io", "runtimes/status", "patch"),
    Call("a pod's owner reference may block its Runtime's deletion (OwnerReferencesPermissionEnforcement)",
         ALL_NAMESPACES, "kruntimes.io", "runtimes/finalizers", "update"),
    Call("leader election may read its Lease", NAMESPACE, "coordination.k8s.io", "leases", "get", LEASE),
    Call("leader election may create its Lease", NAMESPACE, "coordination.k8s.io", "leases", "create"),
    Call("leader election may renew its Lease", NAMESPACE, "coordination.k8s.io", "leases", "update", LEASE),
    Call("Events on Runtimes and on the Runs it fails are created in their namespace", ALL_NAMESPACES,
         "events.k8s.io", "events", "create"),
    Call("the shared Event recorder may patch an Event's series", ALL_NAMESPACES, "events.k8s.io", "events",
         "patch"),
]

FORBIDDEN = [
    *(Call(f"the controller never {verb}s Events", "team-a", "events.k8s.io", "events", verb)
      for verb in ("get", "list", "delete", "update")),
    Call("the controller never creates Runs", "team-a", "kruntimes.io", "runs", "create"),
    Call("the controller never changes a Run's spec", "team-a", "kruntimes.io", "runs", "update"),
    Call("the controller never deletes Runs", "team-a", "kruntimes.io", "runs", "delete"),
    Call("the controller never changes a Runtime's spec", "team-a", "kruntimes.io", "runtimes", "update"),
    Call("the controller never patches a Runtime's spec", "team-a", "kruntimes.io", "runtimes", "patch"),
    Call("the controller replaces a Run's status, guarded, and never patches it", "team-a", "kruntimes.io",
         "runs/status", "patch"),
    Call("the controller never replaces pods", "team-a", "", "pods", "update"),
    Call("the controller never writes pod status", "team-a", "", "pods/status", "update"),
    Call("the controller never execs into pods", "team-a", "", "pods/exec", "create"),
    Call("the controller never evicts pods", "team-a", "", "pods/eviction", "create"),
    Call("the controller never reads Secrets", ALL_NAMESPACES, "", "secrets", "get"),
    Call("the controller never creates ServiceAccount tokens", "team-a", "", "serviceaccounts/token", "create"),
    Call("the controller never renews the scheduler's Lease", NAMESPACE, "coordination.k8s.io", "leases", "update",
         "kruntimes-scheduler"),
    Call("the controller never creates a Lease elsewhere", "kube-system", "coordination.k8s.io", "leases", "create"),
    Call("the controller never binds roles", ALL_NAMESPACES, "rbac.authorization.k8s.io", "clusterroles", "bind"),
]


def _grants(name: str) -> list[Grant]:
    return grants_to(build(name), NAMESPACE, CONTROLLER)


@pytest.mark.parametrize("name", BUILDS)
@pytest.mark.parametrize("call", CONTROLLER_CALLS, ids=str)
def test_every_call_the_controller_makes_is_allowed(call: Call, name: str) -> None:
    assert allows(_grants(name), call)


@pytest.mark.parametrize("name", BUILDS)
def test_nothing_is_granted_to_the_controller_that_no_call_needs(name: str) -> None:
    needed = {(c.scope, c.group, c.resource, c.verb, frozenset({c.name} if c.name else ()))
              for c in CONTROLLER_CALLS}
    assert [g for g in _grants(name) if tuple(g) not in needed and g != SETTINGS_GRANT] == []


@pytest.mark.parametrize("call", FORBIDDEN, ids=str)
def test_what_the_controller_must_never_do_is_denied(call: Call) -> None:
    assert not allows(_grants("base"), call)


def test_every_kubernetes_call_in_the_controller_code_is_in_its_permission_table() -> None:
    modules = [*sorted((ROOT / "kruntimes" / "controller").glob("*.py")),
               ROOT / "kruntimes/cluster/sources.py", ROOT / "kruntimes/cluster/leader.py",
               ROOT / "kruntimes/cluster/events.py"]
    calls = client_calls(modules)
    assert ("", "pods", "create") in calls, "the scan no longer sees the controller's calls"
    table = {(c.group, c.resource, c.verb) for c in CONTROLLER_CALLS}
    assert sorted(calls - table) == [], "the controller makes these calls; grant them"


# --- the Deployment ---------------------------------------------------------------------------

def _pod(name: str) -> Object:
    return dict(find(build(name), "Deployment", CONTROLLER)["spec"]["template"]["spec"])


@pytest.mark.parametrize("name,replicas", [("base", 2), ("postgres", 2), ("dev", 1)])
def test_the_controller_runs_leader_elected_on_its_own_lease(name: str, replicas: int) -> None:
    objects = build(name)
    deployment = find(objects, "Deployment", CONTROLLER)
    main = container(deployment["spec"]["template"]["spec"], "controller")
    assert deployment["spec"]["replicas"] == replicas
    assert main["image"] == IMAGE and main["command"] == ["kruntimes", "controller"]
    args = flags(main)
    assert "--leader-elect" in args and args["--leader-elect"] is None
    assert args["--leader-elect-resource-name"] == LEASE
    assert args["--leader-elect-resource-namespace"] == "$(POD_NAMESPACE)"
    assert env(main)["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env(main)["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # the holder identity
    role = find(objects, "Role", f"{CONTROLLER}-leader-election")
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"] == NAMESPACE


def test_every_flag_the_deployment_passes_is_one_kruntimes_controller_accepts() -> None:
    main = container(_pod("base"), "controller")
    args = [a.replace("$(POD_NAMESPACE)", NAMESPACE) for a in main["args"]]
    parsed = build_parser().parse_args([*main["command"][1:], *args])
    assert parsed.leader_elect is True
    assert parsed.leader_elect_resource_name == LEASE and parsed.http_port == 8080


def test_the_controller_runs_as_its_own_service_account() -> None:
    pod = _pod("base")
    assert pod["serviceAccountName"] == CONTROLLER
    assert pod.get("automountServiceAccountToken", True) is True
    find(build("base"), "ServiceAccount", CONTROLLER)


@pytest.mark.parametrize("name", BUILDS)
def test_the_controller_pod_is_locked_down(name: str) -> None:
    pod = _pod(name)
    main = container(pod, "controller")
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = main["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert all("emptyDir" in volume for volume in mounts(pod, "controller").values())
    assert set(main["resources"]["requests"]) == set(main["resources"]["limits"]) == {"cpu", "memory"}


def test_the_controller_serves_health_and_metrics_on_one_named_port() -> None:
    main = container(_pod("base"), "controller")
    assert main["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_the_controller_replicas_are_spread_over_nodes() -> None:
    deployment = find(build("base"), "Deployment", CONTROLLER)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    [term] = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": {"matchLabels": labels}}
    assert deployment["spec"]["selector"] == {"matchLabels": labels}
    assert labels["app.kubernetes.io/component"] == "controller"  # not selected by the scheduler's Service


@pytest.mark.parametrize("name,kept", [("base", True), ("postgres", True), ("dev", False)])
def test_a_disruption_budget_keeps_one_of_two_controllers(name: str, kept: bool) -> None:
    objects = build(name)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == CONTROLLER]
    if not kept:  # one replica with minAvailable 1 would block every node drain
        assert budgets == []
        return
    [budget] = budgets
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == find(objects, "Deployment", CONTROLLER)["spec"]["selector"]
