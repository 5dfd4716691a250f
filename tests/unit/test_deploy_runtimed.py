"""runtimed's RBAC and the example Runtime whose pods start it (issue 13 item 5, SPEC §4.1, §4.2).

runtimed runs in user namespaces as the ServiceAccount `kruntimes-runtimed` of its
namespace: deploy/base ships the ClusterRole, deploy/examples the ServiceAccount and
the RoleBinding a user applies in their namespace. What RBAC cannot narrow (which
Runs, which pod) the admission policies do; test_runtimed_policy.py tests those.
"""

from __future__ import annotations

import copy
from pathlib import PurePosixPath

import pytest

from kruntimes.cli.main import build_parser
from kruntimes.controller import reconcile, tenancy
from kruntimes.controller.reading import runtime_view
from tests.unit.manifests import (
    BUILDS, IMAGE, K8S_VERSION, NAMESPACE, ROOT, SETTINGS_GRANT, Call, Grant, Object, allows, build, client_calls,
    container,
    env, examples, find, grants_to, mounts,
)

TEAM = "team-a"  # where a user applies the examples
ACCOUNT = "kruntimes-runtimed"

# What `kruntimes runtimed` calls (kruntimes/runtimed/agent.py; the binder's guarded status write).
RUNTIMED_CALLS = [
    *(Call(f"the Run informer may {verb} Runs in its namespace", TEAM, "kruntimes.io", "runs", verb)
      for verb in ("list", "watch")),
    Call("a Run is read again after a conflict", TEAM, "kruntimes.io", "runs", "get"),
    Call("claiming and ending a Run replaces its status", TEAM, "kruntimes.io", "runs/status", "update"),
    *(Call(f"the pod informer may {verb} its pod (a metadata.name field selector)", TEAM, "", "pods", verb)
      for verb in ("list", "watch")),
    Call("its pod is read once on shutdown", TEAM, "", "pods", "get"),
    Call("the heartbeat is a merge patch of its pod", TEAM, "", "pods", "patch"),
    Call("the cluster settings (SPEC §2.3) are read at start-up and every minute", NAMESPACE, "",
         "configmaps", "get", "kruntimes-settings"),
    Call("Events on its Runs (Admitted, Started, Completed, Failed, Lost) are created", TEAM, "events.k8s.io",
         "events", "create"),
    Call("the shared Event recorder may patch an Event's series", TEAM, "events.k8s.io", "events", "patch"),
]

FORBIDDEN = [
    Call("runtimed never reads Runs of another namespace", "team-b", "kruntimes.io", "runs", "list"),
    Call("runtimed never writes Runs of another namespace", "team-b", "kruntimes.io", "runs/status", "update"),
    Call("runtimed never patches pods of another namespace", "team-b", "", "pods", "patch"),
    Call("runtimed never changes a Run's spec", TEAM, "kruntimes.io", "runs", "update"),
    Call("runtimed never patches a Run", TEAM, "kruntimes.io", "runs", "patch"),
    Call("runtimed never creates Runs", TEAM, "kruntimes.io", "runs", "create"),
    Call("runtimed never deletes Runs", TEAM, "kruntimes.io", "runs", "delete"),
    Call("runtimed never reads Runtimes", TEAM, "kruntimes.io", "runtimes", "list"),
    Call("runtimed never writes a Runtime's status", TEAM, "kruntimes.io", "runtimes/status", "patch"),
    Call("runtimed never creates pods", TEAM, "", "pods", "create"),
    Call("runtimed never deletes pods", TEAM, "", "pods", "delete"),
    Call("runtimed never replaces pods", TEAM, "", "pods", "update"),
    Call("runtimed never writes pod status", TEAM, "", "pods/status", "patch"),
    Call("runtimed never execs into pods", TEAM, "", "pods/exec", "create"),
    Call("runtimed never reads Secrets", TEAM, "", "secrets", "get"),
    Call("runtimed never creates tokens", TEAM, "", "serviceaccounts/token", "create"),
    Call("runtimed never creates Events in another namespace", "team-b", "events.k8s.io", "events", "create"),
    *(Call(f"runtimed never {verb}s Events", TEAM, "events.k8s.io", "events", verb)
      for verb in ("get", "list", "delete", "update")),
    Call("runtimed never touches Leases", TEAM, "coordination.k8s.io", "leases", "update", "kruntimes-scheduler"),
]


def _applied() -> list[Object]:
    """deploy/base (for the ClusterRole) and the examples as `kubectl apply -n team-a` creates them."""
    placed = [copy.deepcopy(e) for e in examples()]
    for obj in placed:
        obj["metadata"]["namespace"] = TEAM
    return build("base") + placed


def _grants() -> list[Grant]:
    return grants_to(_applied(), TEAM, ACCOUNT)


@pytest.mark.parametrize("call", RUNTIMED_CALLS, ids=str)
def test_every_call_runtimed_makes_is_allowed_in_its_namespace(call: Call) -> None:
    assert allows(_grants(), call)


def test_nothing_is_granted_to_runtimed_that_no_call_needs() -> None:
    needed = {(c.scope, c.group, c.resource, c.verb, frozenset({c.name} if c.name else ())) for c in RUNTIMED_CALLS}
    assert [g for g in _grants() if tuple(g) not in needed] == []


@pytest.mark.parametrize("call", FORBIDDEN, ids=str)
def test_what_runtimed_must_never_do_is_denied(call: Call) -> None:
    assert not allows(_grants(), call)


def test_runtimed_is_granted_nothing_cluster_wide() -> None:
    # Beyond its namespace, only the public cluster settings, by name, read only.
    assert all(g.scope == TEAM for g in _grants() if g != SETTINGS_GRANT)
    for name in BUILDS:  # the base binds its ClusterRole to nobody; each namespace does
        assert grants_to(build(name), TEAM, ACCOUNT) == [SETTINGS_GRANT]
    assert not [o for o in _applied() if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == ACCOUNT]


def test_every_kubernetes_call_in_the_runtimed_code_is_in_its_permission_table() -> None:
    modules = [*sorted((ROOT / "kruntimes" / "runtimed").glob("*.py")), ROOT / "kruntimes/cluster/binder/kube.py",
               ROOT / "kruntimes/cluster/shared_settings.py", ROOT / "kruntimes/cluster/events.py"]
    calls = client_calls(modules)
    assert ("", "pods", "patch") in calls, "the scan no longer sees runtimed's calls"
    table = {(c.group, c.resource, c.verb) for c in RUNTIMED_CALLS}
    assert sorted(calls - table) == [], "runtimed makes these calls; grant them"


# --- the example Runtime starts runtimed ---------------------------------------------------

def _runtime() -> Object:
    [runtime] = [e for e in examples() if e["kind"] == "Runtime"]
    return runtime


def _template_pod() -> Object:
    return dict(_runtime()["spec"]["template"]["spec"])


def test_the_runtime_pods_run_as_the_runtimed_service_account_of_their_namespace() -> None:
    assert _template_pod()["serviceAccountName"] == ACCOUNT
    # The pod-bound token, in runtimed's container only (SPEC §4.1: Runs are tenants, not runtimed).
    assert _template_pod()["automountServiceAccountToken"] is False
    token_mounts = {c["name"]: [m for m in c.get("volumeMounts", []) if m["name"] == tenancy.TOKEN_VOLUME]
                    for c in _template_pod()["containers"]}
    assert {name for name, found in token_mounts.items() if found} == {reconcile.RUNTIMED_CONTAINER}
    find(examples(), "ServiceAccount", ACCOUNT)
    binding = find(examples(), "RoleBinding", ACCOUNT)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT}
    find(build("base"), "ClusterRole", ACCOUNT)
    assert all("namespace" not in e["metadata"] for e in examples())  # applied with -n TEAM


def test_the_template_starts_runtimed_with_its_pod_identity_from_the_downward_api() -> None:
    runtimed = container(_template_pod(), reconcile.RUNTIMED_CONTAINER)
    assert runtimed["image"] == IMAGE and runtimed["command"] == ["kruntimes", "runtimed"]
    values = env(runtimed)
    for name, path in reconcile.POD_ENV:
        assert values[name] == {"fieldRef": {"fieldPath": path}}, name
    assert values[tenancy.SERVER_ENV] == tenancy.SERVER_SOCKET
    server = container(_template_pod(), tenancy.RUNTIME_CONTAINER)
    assert server["command"] == ["kruntimes", "runtime-server"]
    assert env(server) == {tenancy.SERVER_ENV: tenancy.SERVER_SOCKET, "KRUNTIMES_WORK_DIR": reconcile.WORK_DIR}


def test_kruntimes_runtimed_reads_the_identity_the_template_gives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kubelet resolves the downward API; the command reads the result from its environment.
    resolved = {"metadata.name": "python-7xk2q", "metadata.namespace": TEAM, "metadata.uid": "0b1c-own"}
    runtimed = container(_template_pod(), reconcile.RUNTIMED_CONTAINER)
    for name, value in env(runtimed).items():
        monkeypatch.setenv(name, resolved[value["fieldRef"]["fieldPath"]] if isinstance(value, dict) else value)
    parsed = build_parser().parse_args(runtimed["command"][1:] + runtimed.get("args", []))
    assert (parsed.pod_name, parsed.pod_namespace, parsed.pod_uid) == ("python-7xk2q", TEAM, "0b1c-own")
    assert str(parsed.runtime_server) == tenancy.SERVER_SOCKET


def test_runtimed_and_the_runtime_server_run_non_root_on_a_read_only_root_and_runs_work_on_an_empty_dir() -> None:
    pod = _template_pod()
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["shareProcessNamespace"] is False  # no Run sees runtimed's processes
    for name in (reconcile.RUNTIMED_CONTAINER, tenancy.RUNTIME_CONTAINER):
        security = container(pod, name)["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
    runtime = container(pod, tenancy.RUNTIME_CONTAINER)
    volumes = mounts(pod, tenancy.RUNTIME_CONTAINER)
    assert all("emptyDir" in volume for volume in volumes.values())
    work = PurePosixPath(env(runtime)["KRUNTIMES_WORK_DIR"])
    assert any(work.is_relative_to(path) for path in volumes) and "/tmp" in volumes
    # Runs write into the emptyDirs: the container's limit bounds them.
    assert "ephemeral-storage" in runtime["resources"]["limits"]


def _controller_pod() -> Object:
    runtime = {**_runtime(), "metadata": {**_runtime()["metadata"], "namespace": TEAM, "uid": "rt-1"}}
    view = runtime_view(runtime)
    assert view.capacity is not None, view.capacity_problem
    return reconcile.pod_body(view, view.capacity, reconcile.PodDefaults())


def test_what_the_controller_injects_is_already_in_the_template() -> None:
    # SPEC §4.2: the controller makes sure runtimed and its env are there; the example
    # says the same, so what a user reads is what runs.
    made = _controller_pod()["spec"]
    assert made["containers"] == _template_pod()["containers"]
    assert made["volumes"] == _template_pod()["volumes"]


def test_the_pod_the_controller_makes_from_the_example_is_a_valid_pod() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    body = _controller_pod()
    body["metadata"]["name"] = "python-7xk2q"  # the server's generateName
    kubernetes_validate.validate(body, K8S_VERSION, strict=True)
    assert body["spec"]["serviceAccountName"] == ACCOUNT


def test_the_examples_kubernetes_objects_pass_the_kubernetes_schema_strictly() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    # The Runs and the Runtime are checked against the generated CRDs (test_deploy.py).
    native = [e for e in examples() if not e["apiVersion"].startswith("kruntimes.io/")]
    assert {e["kind"] for e in native} == {"ServiceAccount", "RoleBinding"}
    for obj in native:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
