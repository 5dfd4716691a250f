"""The manifests in deploy/: built as kustomize builds them, valid for the API server, and
granting the scheduler exactly the permissions its calls need.

Each kustomization (base and the overlays) is built with `kustomize` or `kubectl
kustomize` when one is installed, else with the small assembler below, which
implements only the kustomization fields deploy/ uses and refuses any other. When a
real kustomize is there, a test checks that both builds agree.

The base includes the generated CRDs through deploy/crds/kustomization.yaml, so builds
use kustomize's default load restrictor, exactly as `kubectl apply -k` does.
"""

from __future__ import annotations

import base64
import copy
import functools
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

import pytest
import yaml

from kruntimes import simulate
from kruntimes.api import capacity, models
from kruntimes.journal import backends

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BUILDS = {"base": DEPLOY / "base", "postgres": DEPLOY / "overlays/postgres", "dev": DEPLOY / "overlays/dev"}
OVERLAYS = ("postgres", "dev")
K8S_VERSION = "1.30.0"  # the oldest Kubernetes the manifests promise to work on

NAMESPACE = "kruntimes-system"
SERVICE_ACCOUNT = "kruntimes-scheduler"
LEASE = "kruntimes-scheduler"
IMAGE = "ghcr.io/kruntimes/kruntimes:0.1.0"
JOURNAL_ENV = "KRUNTIMES_JOURNAL_URL"

Object = dict[str, Any]


# --- building: a real kustomize, or the assembler -----------------------------------------

def _kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def _kustomize(directory: Path) -> list[Object]:
    command = _kustomize_command()
    assert command is not None
    done = subprocess.run([*command, str(directory)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


_ASSEMBLED_FIELDS = {"apiVersion", "kind", "resources", "secretGenerator", "patches", "replicas", "images"}
_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def assemble(directory: Path) -> list[Object]:
    """kustomize build, for the fields deploy/ uses: resources (files and directories),
    secretGenerator with literals and a fixed name, whole-object patches (merge of maps,
    or `$patch: delete`), replicas and images. Anything else is an error, not a guess."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = sorted(set(kustomization) - _ASSEMBLED_FIELDS)
    assert not unknown, f"{directory}: the test assembler does not implement {unknown}; extend it"
    objects: list[Object] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        objects += assemble(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    objects += [_generated_secret(g) for g in kustomization.get("secretGenerator", [])]
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"path"}, f"only `patches: - path:` is implemented, got {patch}"
        objects = _patched(objects, yaml.safe_load((directory / patch["path"]).read_text()))
    for replicas in kustomization.get("replicas", []):
        _find(objects, "Deployment", replicas["name"])["spec"]["replicas"] = replicas["count"]
    for image in kustomization.get("images", []):
        _retag(objects, image)
    ids = [_id(o) for o in objects]
    assert len(ids) == len(set(ids)), f"{directory}: duplicate objects"
    return objects


def _generated_secret(generator: Object) -> Object:
    assert set(generator) <= {"name", "namespace", "literals", "options"}, generator
    # kustomize would append a content hash to the name; deploy/ turns that off.
    assert generator.get("options") == {"disableNameSuffixHash": True}, generator
    data = dict(literal.split("=", 1) for literal in generator["literals"])
    metadata = {k: generator[k] for k in ("name", "namespace") if k in generator}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def _patched(objects: list[Object], patch: Object) -> list[Object]:
    target = _find(objects, patch["kind"], patch["metadata"]["name"])
    if patch.get("$patch") == "delete":
        return [o for o in objects if o is not target]
    _merge(target, patch)
    return objects


def _merge(into: Object, patch: Object) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            # Strategic merge keys (containers by name, ...) are not implemented.
            assert not isinstance(value, list), f"patching the list {key!r} is not implemented"
            into[key] = value


def _retag(objects: list[Object], image: Object) -> None:
    for obj in objects:
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            name, tag = _split_image(container["image"])
            if name == image["name"]:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


def _split_image(image: str) -> tuple[str, str]:
    assert "@" not in image, "digests are not implemented"
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    return name, tag


def _id(obj: Object) -> tuple[str, str, str, str]:
    return obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _find(objects: list[Object], kind: str, name: str | None = None) -> Object:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@functools.cache
def _built(name: str) -> tuple[Object, ...]:
    directory = BUILDS[name]
    return tuple(_kustomize(directory) if _kustomize_command() else assemble(directory))


def build(name: str) -> list[Object]:
    return copy.deepcopy(list(_built(name)))


def _decoded(value: str) -> str:
    return base64.b64decode("".join(value.split())).decode()  # kustomize wraps long base64 lines


def _comparable(objects: list[Object]) -> dict[tuple[str, str, str, str], Object]:
    """By identity, with Secret data decoded."""
    out = {}
    for obj in copy.deepcopy(objects):
        if obj["kind"] == "Secret":
            obj["data"] = {k: _decoded(v) for k, v in obj.get("data", {}).items()}
        out[_id(obj)] = obj
    return out


@pytest.mark.parametrize("name", BUILDS)
def test_the_test_assembler_builds_what_kustomize_builds(name: str) -> None:
    if _kustomize_command() is None:
        pytest.skip("neither kustomize nor kubectl is installed: only the test assembler built the manifests")
    assert _comparable(assemble(BUILDS[name])) == _comparable(_kustomize(BUILDS[name]))


def test_the_base_lists_the_generated_crd_files_not_copies() -> None:
    resources = yaml.safe_load((BUILDS["base"] / "kustomization.yaml").read_text())["resources"]
    crds = [r for r in resources if "crds" in r]
    assert crds == ["../crds"]
    assert {c["metadata"]["name"] for c in build("base") if c["kind"] == "CustomResourceDefinition"} == {
        "runs.kruntimes.io", "runtimes.kruntimes.io"}


# --- every manifest is valid for the API server ---------------------------------------------

@pytest.mark.parametrize("name", BUILDS)
def test_every_manifest_passes_the_kubernetes_schema_strictly(name: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for obj in build(name):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("name", BUILDS)
def test_everything_namespaced_lives_in_the_scheduler_namespace(name: str) -> None:
    for obj in build(name):
        expected = None if obj["kind"] in _CLUSTER_SCOPED else NAMESPACE
        assert obj["metadata"].get("namespace") == expected, _id(obj)


# --- RBAC: exactly what the scheduler calls -------------------------------------------------

ALL_NAMESPACES = "*"  # a cluster-wide list/watch, or a call in any user namespace


class Call(NamedTuple):
    """One API call the scheduler makes: where, on what, with which verb, on which name."""

    why: str
    scope: str  # ALL_NAMESPACES or one namespace
    group: str
    resource: str
    verb: str
    name: str | None = None  # the object's name when the call names one object

    def __str__(self) -> str:
        return self.why


# What `kruntimes scheduler` calls (issue 5 items 2-4, SPEC §3.2 step 6, §3.6, §3.7).
SCHEDULER_CALLS = [
    *(Call(f"the {resource} informer may {verb} {resource} in every namespace",
           ALL_NAMESPACES, group, resource, verb)
      for group, resource in (("kruntimes.io", "runs"), ("kruntimes.io", "runtimes"), ("", "pods"))
      for verb in ("list", "watch")),
    Call("the binder, Pending and Failed writes may update a Run's status in any namespace",
         ALL_NAMESPACES, "kruntimes.io", "runs/status", "update"),
    Call("leader election may read its Lease", NAMESPACE, "coordination.k8s.io", "leases", "get", LEASE),
    Call("leader election may create its Lease", NAMESPACE, "coordination.k8s.io", "leases", "create"),
    Call("leader election may renew its Lease", NAMESPACE, "coordination.k8s.io", "leases", "update", LEASE),
]


class Grant(NamedTuple):
    scope: str
    group: str
    resource: str
    verb: str
    names: frozenset[str]  # empty: any name


def grants_to(objects: list[Object], namespace: str, account: str) -> list[Grant]:
    """Every (scope, group, resource, verb, names) the bindings in ``objects`` give the account."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    grants = []
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        if not any({k: s.get(k) for k in subject} == subject for s in binding.get("subjects", [])):
            continue
        ref, where = binding["roleRef"], binding["metadata"].get("namespace")
        role = roles[(ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])]
        # A RoleBinding grants in its namespace only, even when it refers to a ClusterRole.
        scope = ALL_NAMESPACES if binding["kind"] == "ClusterRoleBinding" else where
        for rule in role.get("rules", []):
            assert "nonResourceURLs" not in rule, f"{ref['name']} grants non-resource URLs"
            grants += [Grant(scope, g, r, v, frozenset(rule.get("resourceNames", [])))
                       for g in rule.get("apiGroups", []) for r in rule.get("resources", [])
                       for v in rule["verbs"]]
    return grants


def allows(grants: list[Grant], call: Call) -> bool:
    """RBAC's answer to ``call``: wildcards match everything, resourceNames only that name."""
    def matches(grant: Grant) -> bool:
        return (grant.scope in (ALL_NAMESPACES, call.scope)
                and grant.group in ("*", call.group) and grant.verb in ("*", call.verb)
                and grant.resource in ("*", call.resource, call.resource.split("/")[0] + "/*")
                and (not grant.names or call.name in grant.names))
    return any(matches(g) for g in grants)


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
    Call("the informers never read single Runs", "team-a", "kruntimes.io", "runs", "get"),
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
    role, deployment = _find(objects, "Role"), _find(objects, "Deployment")
    args = _flags(_container(deployment))
    assert args["--leader-elect-resource-name"] == LEASE
    # The namespace is the pod's own (downward API), which is the Role's namespace.
    assert args["--leader-elect-resource-namespace"] == "$(POD_NAMESPACE)"
    assert _env(_container(deployment))["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]


def test_the_deployment_runs_as_the_bound_service_account() -> None:
    pod = _find(build("base"), "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod.get("automountServiceAccountToken", True) is True  # in-cluster config needs the token


# --- the Deployment ---------------------------------------------------------------------------

def _container(deployment: Object) -> Object:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["scheduler"]
    return dict(containers[0])


def _flags(container: Object) -> dict[str, str | None]:
    return {a.split("=", 1)[0]: (a.split("=", 1)[1] if "=" in a else None) for a in container["args"]}


def _env(container: Object) -> dict[str, Any]:
    return {e["name"]: e.get("valueFrom", e.get("value")) for e in container.get("env", [])}


def _mounts(deployment: Object) -> dict[str, Object]:
    """mountPath -> volume, for the scheduler container."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"].get("volumes", [])}
    return {m["mountPath"]: volumes[m["name"]] for m in _container(deployment).get("volumeMounts", [])}


def _under_empty_dir(path: str, deployment: Object) -> bool:
    return any(PurePosixPath(path).is_relative_to(mount) and "emptyDir" in volume
               for mount, volume in _mounts(deployment).items())


@pytest.mark.parametrize("name,replicas", [("base", 2), ("postgres", 2), ("dev", 1)])
def test_the_scheduler_runs_with_leader_election(name: str, replicas: int) -> None:
    deployment = _find(build(name), "Deployment", "kruntimes-scheduler")
    container = _container(deployment)
    assert deployment["spec"]["replicas"] == replicas
    assert container["image"] == IMAGE
    assert container["command"] == ["kruntimes", "scheduler"]
    assert "--leader-elect" in _flags(container) and _flags(container)["--leader-elect"] is None


@pytest.mark.parametrize("name", BUILDS)
def test_the_pod_is_locked_down(name: str) -> None:
    deployment = _find(build(name), "Deployment")
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
    resources = _container(_find(build(name), "Deployment"))["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert set(resources["limits"]) == {"cpu", "memory"}


@pytest.mark.parametrize("name", BUILDS)
def test_health_and_metrics_share_the_named_metrics_port(name: str) -> None:
    container = _container(_find(build(name), "Deployment"))
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert _flags(container)["--http-port"] == "8080"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


@pytest.mark.parametrize("name", BUILDS)
def test_the_journal_spool_is_on_an_empty_dir(name: str) -> None:
    deployment = _find(build(name), "Deployment")
    spool = _flags(_container(deployment))["--journal-spool"]
    assert spool == "/var/lib/kruntimes/journal.spool"
    assert _under_empty_dir(spool, deployment)


@pytest.mark.parametrize("name", BUILDS)
def test_the_replicas_are_spread_over_nodes(name: str) -> None:
    deployment = _find(build(name), "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    terms = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == ["kubernetes.io/hostname"]
    assert terms[0]["podAffinityTerm"]["labelSelector"] == {"matchLabels": pod_labels}


@pytest.mark.parametrize("name", BUILDS)
def test_the_metrics_service_selects_the_scheduler_pods(name: str) -> None:
    objects = build(name)
    deployment, service = _find(objects, "Deployment"), _find(objects, "Service", "kruntimes-scheduler-metrics")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"] == {"matchLabels": service["spec"]["selector"]}
    ports = [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
    assert ports == [("metrics", 8080, "metrics")]


@pytest.mark.parametrize("name,kept", [("base", True), ("postgres", True), ("dev", False)])
def test_a_disruption_budget_keeps_one_of_two_replicas(name: str, kept: bool) -> None:
    objects = build(name)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    if not kept:  # one replica with minAvailable 1 would block every node drain
        assert budgets == []
        return
    [budget] = budgets
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == _find(objects, "Deployment")["spec"]["selector"]


# --- the journal Secret ----------------------------------------------------------------------

def _journal_url(name: str) -> str:
    objects = build(name)
    ref = _env(_container(_find(objects, "Deployment")))[JOURNAL_ENV]["secretKeyRef"]
    secret = _find(objects, "Secret", ref["name"])
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert ref["key"] in secret.get("data", {}), f"the Secret has no key {ref['key']!r}"
    return _decoded(secret["data"][ref["key"]])


def test_the_journal_url_comes_from_the_secret_and_never_the_command_line() -> None:
    container = _container(_find(build("base"), "Deployment"))
    assert _env(container)[JOURNAL_ENV] == {"secretKeyRef": {"name": "kruntimes-journal", "key": "url"}}
    assert "--journal-url" not in _flags(container)
    assert not [o for o in build("base") if o["kind"] == "Secret"], "the base leaves the Secret to the overlays"


def test_the_postgres_overlay_journals_to_postgresql() -> None:
    url = _journal_url("postgres")
    assert url == "postgresql+psycopg://kruntimes@postgres.kruntimes-system:5432/kruntimes"
    assert backends.parse_url(url).get_backend_name() == "postgresql"


def test_the_dev_overlay_journals_to_sqlite_on_the_empty_dir() -> None:
    url = _journal_url("dev")
    assert url == "sqlite:////var/lib/kruntimes/journal.db"
    parsed = backends.parse_url(url)
    assert parsed.get_backend_name() == "sqlite"
    assert _under_empty_dir(str(parsed.database), _find(build("dev"), "Deployment"))


# --- the examples a user applies -------------------------------------------------------------

EXAMPLES = DEPLOY / "examples"


def _examples() -> list[Object]:
    return [d for path in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]


def _crd_schema(kind: str) -> Object:
    [crd] = [o for o in build("base")
             if o["kind"] == "CustomResourceDefinition" and o["spec"]["names"]["kind"] == kind]
    [version] = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def test_the_examples_are_one_runtime_and_three_runs() -> None:
    examples = _examples()
    [runtime] = [e for e in examples if e["kind"] == "Runtime"]
    runs = {e["metadata"]["name"]: e["spec"] for e in examples if e["kind"] == "Run"}
    assert runtime["spec"]["replicas"] == 3
    assert runtime["spec"]["capacity"]["resources"] == {"runs": "4", "example.com/gpu": "1"}
    assert len(runs) == 3 and {s["runtime"] for s in runs.values()} == {runtime["metadata"]["name"]}
    assert "affinity" not in runs["hello"] and "resources" not in runs["hello"]
    assert runs["etl-extract"]["affinity"]["runAffinity"]["required"]
    assert runs["train"]["resources"]["requests"]["example.com/gpu"] == "1"
    # No namespace: `kubectl apply -n TEAM` puts them where the user wants.
    assert all("namespace" not in e["metadata"] for e in examples)


@pytest.mark.parametrize("kind", ["Run", "Runtime"])
def test_the_examples_pass_the_generated_crd_schema(kind: str) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema")
    # OpenAPI v3.0 as a CRD uses it is JSON Schema draft 4; x-kubernetes-* keys are ignored.
    validator = jsonschema.Draft4Validator(_crd_schema(kind))
    examples = [e for e in _examples() if e["kind"] == kind]
    assert examples
    for example in examples:
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

# Client methods always name their scope (namespaced_, cluster_ or _for_all_namespaces),
# which tells them apart from the cache's own delete_pod/delete_run.
_KINDS = r"(custom_object_status|custom_object|pod|lease)"
_CLIENT_CALL = re.compile(r"\b(list|read|create|replace|patch|delete)_(?:(?:namespaced|cluster)_" + _KINDS
                          + r"|" + _KINDS + r"_for_all_namespaces)\b")
_VERB = {"list": "list", "read": "get", "create": "create", "replace": "update", "patch": "patch",
         "delete": "delete"}
_RESOURCE = {"custom_object_status": ("kruntimes.io", "runs/status"), "custom_object": ("kruntimes.io", None),
             "pod": ("", "pods"), "lease": ("coordination.k8s.io", "leases")}


def test_every_kubernetes_call_the_cluster_adapter_makes_is_in_the_permission_table() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "kruntimes" / "cluster").glob("*.py"))
    calls = {(m.group(1), m.group(2) or m.group(3)) for m in _CLIENT_CALL.finditer(source)}
    assert calls, "no client calls found: the pattern no longer matches the adapter"
    table = {(c.group, c.resource, c.verb) for c in SCHEDULER_CALLS}
    for method, kind in sorted(calls):
        group, resource = _RESOURCE[kind]
        verb = _VERB[method]
        resources = [resource] if resource else ["runs", "runtimes"] if verb in ("list", "get") else ["runs"]
        for r in resources:
            assert (group, r, verb) in table, f"the adapter calls {method}_{kind} ({verb} {r}); grant it"
