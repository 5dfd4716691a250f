"""The manifests in deploy/: built as kustomize builds them, valid for the API server, and
granting the scheduler exactly the permissions its calls need.

How they are built, and the RBAC checker, are in `tests.unit.manifests`; the Runtime
controller's and runtimed's manifests have test files of their own
(test_deploy_controller.py, test_deploy_runtimed.py, test_runtimed_policy.py).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import PurePosixPath

import pytest
import yaml

from kruntimes import simulate
from kruntimes.api import capacity, models
from kruntimes.journal.store import engines
from tests.unit.manifests import (
    ALL_NAMESPACES, BUILDS, CLUSTER_SCOPED, IMAGE, K8S_VERSION, NAMESPACE, ROOT, Call, Grant, Object, allows,
    assemble, build, client_calls, comparable, decoded, env, examples, find, flags, grants_to, kustomize,
    kustomize_command, object_id,
)

SERVICE_ACCOUNT = "kruntimes-scheduler"
LEASE = "kruntimes-scheduler"
JOURNAL_ENV = "KRUNTIMES_JOURNAL_URL"
SCHEDULER = "kruntimes-scheduler"  # the Deployment, and its leader-election Role with a suffix

@pytest.mark.parametrize("name", BUILDS)
def test_the_test_assembler_builds_what_kustomize_builds(name: str) -> None:
    if kustomize_command() is None:
        pytest.skip("neither kustomize nor kubectl is installed: only the test assembler built the manifests")
    assert comparable(assemble(BUILDS[name])) == comparable(kustomize(BUILDS[name]))


def test_the_base_lists_the_generated_crd_files_not_copies() -> None:
    resources = yaml.safe_load((BUILDS["base"] / "kustomization.yaml").read_text())["resources"]
    crds = [r for r in resources if "crds" in r]
    assert crds == ["../crds"]
    assert {c["metadata"]["name"] for c in build("base") if c["kind"] == "CustomResourceDefinition"} == {
        "runs.kruntimes.io", "runtimes.kruntimes.io", "runtimedeviceclasses.kruntimes.io"}


# --- every manifest is valid for the API server ---------------------------------------------

@pytest.mark.parametrize("name", BUILDS)
def test_every_manifest_passes_the_kubernetes_schema_strictly(name: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for obj in build(name):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("name", BUILDS)
def test_everything_namespaced_lives_in_the_scheduler_namespace(name: str) -> None:
    for obj in build(name):
        expected = None if obj["kind"] in CLUSTER_SCOPED else NAMESPACE
        assert obj["metadata"].get("namespace") == expected, object_id(obj)


# --- RBAC: exactly what the scheduler calls -------------------------------------------------

# What `kruntimes scheduler` calls (issue 5 items 2-4, SPEC §3.2 step 6, §3.6, §3.7).
SCHEDULER_CALLS = [
    *(Call(f"the {resource} informer may {verb} {resource} in every namespace",
           ALL_NAMESPACES, group, resource, verb)
      for group, resource in (("kruntimes.io", "runs"), ("kruntimes.io", "runtimes"), ("", "pods"),
                              ("kruntimes.io", "runtimedeviceclasses"))  # cluster-scoped (SPEC §7.2)
      for verb in ("list", "watch")),
    Call("the binder may read back a Run whose bind outcome was lost, in any namespace",
         ALL_NAMESPACES, "kruntimes.io", "runs", "get"),
    Call("the binder, Pending and Failed writes may update a Run's status in any namespace",
         ALL_NAMESPACES, "kruntimes.io", "runs/status", "update"),
    Call("Events on Runs may be created in any namespace", ALL_NAMESPACES, "events.k8s.io", "events", "create"),
    Call("an Event's series may be patched in any namespace", ALL_NAMESPACES, "events.k8s.io", "events", "patch"),
    Call("leader election may read its Lease", NAMESPACE, "coordination.k8s.io", "leases", "get", LEASE),
    Call("leader election may create its Lease", NAMESPACE, "coordination.k8s.io", "leases", "create"),
    Call("leader election may renew its Lease", NAMESPACE, "coordination.k8s.io", "leases", "update", LEASE),
    Call("the cluster settings are read at start-up", NAMESPACE, "", "configmaps", "get", "kruntimes-settings"),
]


def _scheduler_grants(name: str) -> list[Grant]:
    return grants_to(build(name), NAMESPACE, SERVICE_ACCOUNT)


@pytest.mark.parametrize("name", BUILDS)
@pytest.mark.parametrize("call", SCHEDULER_CALLS, ids=str)
def test_every_call_the_scheduler_makes_is_allowed(call: Call, name: str) -> None:
    assert allows(_scheduler_grants(name), call)


@pytest.mark.parametrize("name", BUILDS)
def test_nothing_is_granted_that_no_call_needs(name: str) -> None:
    # Each grant must be one needed call exactly: same scope (no cluster-wide Lease), no
    # wildcard, and limited to the call's object name whenever the call names one.
    needed = {(c.scope, c.group, c.resource, c.verb, frozenset({c.name} if c.name else ()))
              for c in SCHEDULER_CALLS}
    assert [g for g in _scheduler_grants(name) if tuple(g) not in needed] == []


FORBIDDEN = [
    Call("nobody may create Runs", "team-a", "kruntimes.io", "runs", "create"),
    Call("nobody may update a Run's spec", "team-a", "kruntimes.io", "runs", "update"),
    Call("nobody may patch a Run's spec", "team-a", "kruntimes.io", "runs", "patch"),
    Call("the scheduler never patches a Run's status (it replaces it, guarded)", "team-a", "kruntimes.io",
         "runs/status", "patch"),
    Call("nothing reads single Runtimes", "team-a", "kruntimes.io", "runtimes", "get"),
    Call("nobody may delete Runs", "team-a", "kruntimes.io", "runs", "delete"),
    Call("nobody may write a Runtime's status", "team-a", "kruntimes.io", "runtimes/status", "update"),
    Call("nobody may create pods", "team-a", "", "pods", "create"),
    Call("nobody may delete pods", "team-a", "", "pods", "delete"),
    Call("nobody may patch pods", "team-a", "", "pods", "patch"),
    Call("nobody may evict pods", "team-a", "", "pods/eviction", "create"),
    Call("nobody may read Secrets", ALL_NAMESPACES, "", "secrets", "get"),
    Call("nobody may list Secrets, not even the journal's", NAMESPACE, "", "secrets", "list"),
    Call("nobody may create a Lease elsewhere", "kube-system", "coordination.k8s.io", "leases", "create"),
    Call("nobody may renew a Lease elsewhere", "kube-system", "coordination.k8s.io", "leases", "update", LEASE),
    Call("nobody may renew another Lease in our namespace",
         NAMESPACE, "coordination.k8s.io", "leases", "update", "other"),
    Call("nobody may delete the Lease", NAMESPACE, "coordination.k8s.io", "leases", "delete", LEASE),
    Call("nobody may escalate a ClusterRole",
         ALL_NAMESPACES, "rbac.authorization.k8s.io", "clusterroles", "escalate"),
    Call("nobody may bind a ClusterRole", ALL_NAMESPACES, "rbac.authorization.k8s.io", "clusterroles", "bind"),
    Call("nobody may impersonate service accounts", ALL_NAMESPACES, "", "serviceaccounts", "impersonate"),
    Call("nobody may impersonate users", ALL_NAMESPACES, "", "users", "impersonate"),
    Call("nobody may create Events", "team-a", "", "events", "create"),
    *(Call(f"Events on Runs are only created and patched, never {verb}", "team-a", "events.k8s.io", "events", verb)
      for verb in ("get", "list", "watch", "update", "delete", "deletecollection")),
]


@pytest.mark.parametrize("name", BUILDS)
@pytest.mark.parametrize("call", FORBIDDEN, ids=str)
def test_what_the_scheduler_must_never_do_is_denied(call: Call, name: str) -> None:
    assert not allows(_scheduler_grants(name), call)


@pytest.mark.parametrize("name", BUILDS)
def test_no_role_uses_a_wildcard_or_aggregation(name: str) -> None:
    for role in (o for o in build(name) if o["kind"] in ("Role", "ClusterRole")):
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            assert "*" not in str(rule.get("apiGroups")) + str(rule["resources"]) + str(rule["verbs"]), rule


def _aggregated_to(name: str, role: str) -> list[Grant]:
    """What Kubernetes' built-in ClusterRole ``role`` gains from ours, bound in namespace team-a."""
    label = f"rbac.authorization.k8s.io/aggregate-to-{role}"
    grants = []
    for obj in build(name):
        if obj["kind"] == "ClusterRole" and obj["metadata"].get("labels", {}).get(label) == "true":
            grants += [Grant("team-a", group, resource, verb, frozenset(rule.get("resourceNames", ())))
                       for rule in obj["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
                       for verb in rule["verbs"]]
    return grants


USERS = [
    *(("view", Call(f"a viewer may {verb} {resource}", "team-a", "kruntimes.io", resource, verb), True)
      for resource in ("runs", "runtimes") for verb in ("get", "list", "watch")),
    *(("view", Call(f"a viewer may not {verb} {resource}", "team-a", "kruntimes.io", resource, verb), False)
      for resource in ("runs", "runtimes") for verb in ("create", "patch", "delete")),
    *(("edit", Call(f"an editor may {verb} {resource}", "team-a", "kruntimes.io", resource, verb), True)
      for resource in ("runs", "runtimes") for verb in ("get", "watch", "create", "update", "patch", "delete")),
    ("edit", Call("an editor may release a function Run (one annotation)", "team-a", "kruntimes.io", "runs",
                  "patch"), True),
    *(("edit", Call(f"an editor may not {verb} {resource}", "team-a", "kruntimes.io", resource, verb), False)
      for resource in ("runs/status", "runtimes/status") for verb in ("update", "patch")),
]


@pytest.mark.parametrize("name", BUILDS)
@pytest.mark.parametrize("role,call,allowed", USERS, ids=[str(c) for _, c, _ in USERS])
def test_people_who_may_view_or_edit_a_namespace_may_read_or_change_its_runs_and_runtimes(
        name: str, role: str, call: Call, allowed: bool) -> None:
    # `edit` aggregates what `view` gets too, as Kubernetes' own roles do.
    grants = _aggregated_to(name, role) + (_aggregated_to(name, "view") if role == "edit" else [])
    assert allows(grants, call) is allowed


def test_the_checker_sees_through_wildcards_names_and_binding_scope() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "all"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    named = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "one", "namespace": "n"},
             "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["x"], "verbs": ["get"]}]}
    subject = [{"kind": "ServiceAccount", "name": "sa", "namespace": "n"}]
    in_n = {"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "n"}, "subjects": subject,
            "roleRef": {"kind": "ClusterRole", "name": "all"}}
    one = {"kind": "RoleBinding", "metadata": {"name": "c", "namespace": "n"}, "subjects": subject,
           "roleRef": {"kind": "Role", "name": "one"}}
    grants = grants_to([role, named, in_n, one], "n", "sa")
    assert allows(grants, Call("", "n", "", "secrets", "get"))
    assert not allows(grants, Call("", "other", "", "secrets", "get"))  # a RoleBinding stays in its namespace
    assert not allows(grants_to([named, one], "n", "sa"), Call("", "n", "", "configmaps", "get", "y"))
    assert grants_to([role, in_n], "n", "someone-else") == []


def test_the_lease_the_role_allows_is_the_lease_the_scheduler_uses() -> None:
    objects = build("base")
    role, deployment = find(objects, "Role", f"{SCHEDULER}-leader-election"), find(objects, "Deployment", SCHEDULER)
    args = flags(_container(deployment))
    assert args["--leader-elect-resource-name"] == LEASE
    # The namespace is the pod's own (downward API), which is the Role's namespace.
    assert args["--leader-elect-resource-namespace"] == "$(POD_NAMESPACE)"
    assert env(_container(deployment))["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]


def test_the_deployment_runs_as_the_bound_service_account() -> None:
    pod = find(build("base"), "Deployment", SCHEDULER)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod.get("automountServiceAccountToken", True) is True  # in-cluster config needs the token


# --- the Deployment ---------------------------------------------------------------------------

def _container(deployment: Object) -> Object:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["scheduler"]
    return dict(containers[0])


def _mounts(deployment: Object) -> dict[str, Object]:
    """mountPath -> volume, for the scheduler container."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"].get("volumes", [])}
    return {m["mountPath"]: volumes[m["name"]] for m in _container(deployment).get("volumeMounts", [])}


def _under_empty_dir(path: str, deployment: Object) -> bool:
    return any(PurePosixPath(path).is_relative_to(mount) and "emptyDir" in volume
               for mount, volume in _mounts(deployment).items())


@pytest.mark.parametrize("name,replicas", [("base", 2), ("postgres", 2), ("dev", 1)])
def test_the_scheduler_runs_with_leader_election(name: str, replicas: int) -> None:
    deployment = find(build(name), "Deployment", "kruntimes-scheduler")
    container = _container(deployment)
    assert deployment["spec"]["replicas"] == replicas
    assert container["image"] == IMAGE
    assert container["command"] == ["kruntimes", "scheduler"]
    assert "--leader-elect" in flags(container) and flags(container)["--leader-elect"] is None


@pytest.mark.parametrize("name", BUILDS)
def test_the_pod_is_locked_down(name: str) -> None:
    deployment = find(build(name), "Deployment", SCHEDULER)
    pod, container = deployment["spec"]["template"]["spec"], _container(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in security and not pod.get("hostNetwork") and not pod.get("hostPID")
    # With a read-only root, everything the process writes is on an emptyDir.
    assert all("emptyDir" in volume for volume in _mounts(deployment).values())


@pytest.mark.parametrize("name", BUILDS)
def test_the_scheduler_has_requests_and_limits(name: str) -> None:
    resources = _container(find(build(name), "Deployment", SCHEDULER))["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert set(resources["limits"]) == {"cpu", "memory"}


@pytest.mark.parametrize("name", BUILDS)
def test_health_and_metrics_share_the_named_metrics_port(name: str) -> None:
    container = _container(find(build(name), "Deployment", SCHEDULER))
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert flags(container)["--http-port"] == "8080"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


@pytest.mark.parametrize("name", BUILDS)
def test_the_journal_spool_is_on_an_empty_dir(name: str) -> None:
    deployment = find(build(name), "Deployment", SCHEDULER)
    spool = flags(_container(deployment))["--journal-spool"]
    assert spool == "/var/lib/kruntimes/journal.spool"
    assert _under_empty_dir(spool, deployment)


@pytest.mark.parametrize("name", BUILDS)
def test_the_replicas_are_spread_over_nodes(name: str) -> None:
    deployment = find(build(name), "Deployment", SCHEDULER)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    terms = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == ["kubernetes.io/hostname"]
    assert terms[0]["podAffinityTerm"]["labelSelector"] == {"matchLabels": pod_labels}


@pytest.mark.parametrize("name", BUILDS)
def test_the_metrics_service_selects_the_scheduler_pods(name: str) -> None:
    objects = build(name)
    deployment, service = find(objects, "Deployment", SCHEDULER), find(objects, "Service", "kruntimes-scheduler-metrics")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"] == {"matchLabels": service["spec"]["selector"]}
    ports = [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
    assert ports == [("metrics", 8080, "metrics")]


@pytest.mark.parametrize("name,kept", [("base", True), ("postgres", True), ("dev", False)])
def test_a_disruption_budget_keeps_one_of_two_replicas(name: str, kept: bool) -> None:
    objects = build(name)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == SCHEDULER]
    if not kept:  # one replica with minAvailable 1 would block every node drain
        assert budgets == []
        return
    [budget] = budgets
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == find(objects, "Deployment", SCHEDULER)["spec"]["selector"]


# --- the journal Secret ----------------------------------------------------------------------

def _journal_url(name: str) -> str:
    objects = build(name)
    ref = env(_container(find(objects, "Deployment", SCHEDULER)))[JOURNAL_ENV]["secretKeyRef"]
    secret = find(objects, "Secret", ref["name"])
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert ref["key"] in secret.get("data", {}), f"the Secret has no key {ref['key']!r}"
    return decoded(secret["data"][ref["key"]])


def documented_secret() -> tuple[str, str, str]:
    """(name, key, URL) of the Secret deploy/README.md tells people to create."""
    text = (ROOT / "deploy" / "README.md").read_text()
    found = re.search(r"create secret generic (\S+) \\\n\s*--from-literal=(\w+)='([^']+)'", text)
    assert found, "deploy/README.md no longer shows the Secret to create"
    return found.group(1), found.group(2), found.group(3)


def test_the_journal_url_comes_from_the_secret_and_never_the_command_line() -> None:
    container = _container(find(build("base"), "Deployment", SCHEDULER))
    assert env(container)[JOURNAL_ENV] == {"secretKeyRef": {"name": "kruntimes-journal", "key": "url"}}
    assert "--journal-url" not in flags(container)
    assert not [o for o in build("base") if o["kind"] == "Secret"], "the base leaves the Secret to the overlays"


def test_the_postgres_overlay_reads_the_secret_people_create_and_never_overwrites_it() -> None:
    name, key, url = documented_secret()
    objects = build("postgres")
    assert not [o for o in objects if o["kind"] == "Secret"], "applying the overlay would overwrite the Secret"
    container = _container(find(objects, "Deployment", SCHEDULER))
    assert env(container)[JOURNAL_ENV] == {"secretKeyRef": {"name": name, "key": key}}
    assert engines.parse_url(url).get_backend_name() == "postgresql"


def test_the_dev_overlay_journals_to_sqlite_on_the_empty_dir() -> None:
    url = _journal_url("dev")
    assert url == "sqlite:////var/lib/kruntimes/journal.db"
    parsed = engines.parse_url(url)
    assert parsed.get_backend_name() == "sqlite"
    assert _under_empty_dir(str(parsed.database), find(build("dev"), "Deployment", SCHEDULER))


# --- the examples a user applies -------------------------------------------------------------

def _examples() -> list[Object]:
    """The Runs and the Runtime (the other examples are runtimed's ServiceAccount and binding)."""
    return [e for e in examples() if e["apiVersion"].startswith("kruntimes.io/")]


def _crd_schema(kind: str) -> Object:
    [crd] = [o for o in build("base")
             if o["kind"] == "CustomResourceDefinition" and o["spec"]["names"]["kind"] == kind]
    [version] = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def test_the_examples_are_one_runtime_and_three_runs() -> None:
    documents = _examples()
    [runtime] = [e for e in documents if e["kind"] == "Runtime"]
    runs = {e["metadata"]["name"]: e["spec"] for e in documents if e["kind"] == "Run"}
    assert runtime["spec"]["replicas"] == 3
    assert runtime["spec"]["capacity"]["resources"] == {"runs": "4", "example.com/gpu": "1"}
    assert len(runs) == 3 and {s["runtime"] for s in runs.values()} == {runtime["metadata"]["name"]}
    assert "affinity" not in runs["hello"] and "resources" not in runs["hello"]
    assert runs["etl-extract"]["affinity"]["runAffinity"]["required"]
    assert runs["train"]["resources"]["requests"]["example.com/gpu"] == "1"
    # No namespace: `kubectl apply -n TEAM` puts them where the user wants.
    assert all("namespace" not in e["metadata"] for e in documents)


@pytest.mark.parametrize("kind", ["Run", "Runtime"])
def test_the_examples_pass_the_generated_crd_schema(kind: str) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema")
    # OpenAPI v3.0 as a CRD uses it is JSON Schema draft 4; x-kubernetes-* keys are ignored.
    validator = jsonschema.Draft4Validator(_crd_schema(kind))
    documents = [e for e in _examples() if e["kind"] == kind]
    assert documents
    for example in documents:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(example)]
        assert errors == [], example["metadata"]["name"]


def test_the_examples_pass_the_scheduler_validation() -> None:
    # The CRD schema cannot say everything PreFilter checks; a Run failing here would be Failed.
    for example in _examples():
        getattr(models, example["kind"]).model_validate(example)


def test_the_runtime_pod_template_is_a_valid_pod_template() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    [runtime] = [e for e in _examples() if e["kind"] == "Runtime"]
    template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "python"},
                "template": runtime["spec"]["template"]}
    kubernetes_validate.validate(template, K8S_VERSION, strict=True)


def test_the_example_runs_are_all_placed_once_the_runtime_pods_are_up() -> None:
    # The pods the Runtime controller makes (SPEC §2.1), with fresh runtimed heartbeats.
    now = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    [runtime] = [e for e in _examples() if e["kind"] == "Runtime"]
    name, spec = runtime["metadata"]["name"], runtime["spec"]
    annotations = {models.HEARTBEAT_ANNOTATION: now.isoformat(),
                   **capacity.annotations(spec["capacity"]["resources"])}
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-{i}", "namespace": "team-a",
                          "labels": {models.RUNTIME_LABEL: name}, "annotations": annotations},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}} for i in range(spec["replicas"])]
    runs = [{**e, "metadata": {**e["metadata"], "namespace": "team-a",
                               "creationTimestamp": f"2026-11-29T11:00:0{i}Z"}}
            for i, e in enumerate(e for e in _examples() if e["kind"] == "Run")]
    placements = simulate.simulate([(o["metadata"]["name"], o) for o in pods + runs], now)
    assert {(p.name, p.phase) for p in placements} == {(r["metadata"]["name"], "Scheduled") for r in runs}


# --- the table above is the code's calls ------------------------------------------------------

def test_every_kubernetes_call_the_cluster_adapter_makes_is_in_the_permission_table() -> None:
    calls = client_calls(sorted((ROOT / "kruntimes" / "cluster").glob("*.py")))
    assert calls, "no client calls found: the scan no longer matches the adapter"
    table = {(c.group, c.resource, c.verb) for c in SCHEDULER_CALLS}
    assert sorted(calls - table) == [], "the adapter makes these calls; grant them"


@pytest.mark.skipif(kustomize_command() is None, reason="building a component needs kustomize or kubectl")
@pytest.mark.parametrize("overlay", ["base", "postgres"])
def test_the_optional_journal_key_component_gives_the_scheduler_and_the_upgrade_the_key_as_a_file(
        overlay: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # kustomize wants relative paths from the kustomization that uses the component.
    here = tmp_path / "with-key"
    here.mkdir()
    rel = PurePosixPath(*[".."] * len(here.parts[1:]))
    (here / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [str(rel / BUILDS[overlay].relative_to("/"))],
        "components": [str(rel / (ROOT / "deploy/components/journal-key").relative_to("/"))],
    }))
    objects = kustomize(here)
    pods = [find(objects, "Deployment", SCHEDULER)["spec"]["template"]["spec"]]
    if overlay == "postgres":
        pods.append(find(objects, "Job", "kruntimes-db-upgrade")["spec"]["template"]["spec"])
    for pod in pods:
        (volume,) = [v for v in pod["volumes"] if v["name"] == "journal-key"]
        assert volume["secret"]["secretName"] == "kruntimes-journal-key"
        main = pod["containers"][0]
        (mount,) = [m for m in main["volumeMounts"] if m["name"] == "journal-key"]
        assert mount["readOnly"] is True
        assert env(main)["KRUNTIMES_JOURNAL_KEY_FILE"] == f"{mount['mountPath']}/key"
    assert not [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "kruntimes-journal-key"], \
        "the key is created out of band, never generated from git"
