"""The manifests in deploy/ as tests read them: built as kustomize builds them, and the
RBAC they grant, checked against the Kubernetes calls each process makes.

Each kustomization (base and the overlays) is built with `kustomize` or `kubectl
kustomize` when one is installed, else with the small assembler below, which
implements only the kustomization fields deploy/ uses and refuses any other. A test
in test_deploy.py checks that both builds agree when a real kustomize is there.

The base includes the generated CRDs through deploy/crds/kustomization.yaml, so builds
use kustomize's default load restrictor, exactly as `kubectl apply -k` does.
"""

from __future__ import annotations

import ast
import base64
import copy
import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLES = DEPLOY / "examples"
BUILDS = {"base": DEPLOY / "base", "postgres": DEPLOY / "overlays/postgres", "dev": DEPLOY / "overlays/dev"}
K8S_VERSION = "1.30.0"  # the oldest Kubernetes the manifests promise to work on

NAMESPACE = "kruntimes-system"
IMAGE = "ghcr.io/kruntimes/kruntimes:0.1.0"

Object = dict[str, Any]


# --- building: a real kustomize, or the assembler -----------------------------------------

def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def kustomize(directory: Path) -> list[Object]:
    command = kustomize_command()
    assert command is not None
    done = subprocess.run([*command, str(directory)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


_ASSEMBLED_FIELDS = {"apiVersion", "kind", "resources", "secretGenerator", "patches", "replicas", "images"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


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
        find(objects, "Deployment", replicas["name"])["spec"]["replicas"] = replicas["count"]
    for image in kustomization.get("images", []):
        _retag(objects, image)
    ids = [object_id(o) for o in objects]
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
    target = find(objects, patch["kind"], patch["metadata"]["name"])
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


def object_id(obj: Object) -> tuple[str, str, str, str]:
    return obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def find(objects: list[Object], kind: str, name: str | None = None) -> Object:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@functools.cache
def _built(name: str) -> tuple[Object, ...]:
    directory = BUILDS[name]
    return tuple(kustomize(directory) if kustomize_command() else assemble(directory))


def build(name: str) -> list[Object]:
    return copy.deepcopy(list(_built(name)))


def decoded(value: str) -> str:
    return base64.b64decode("".join(value.split())).decode()  # kustomize wraps long base64 lines


def comparable(objects: list[Object]) -> dict[tuple[str, str, str, str], Object]:
    """By identity, with Secret data decoded."""
    out = {}
    for obj in copy.deepcopy(objects):
        if obj["kind"] == "Secret":
            obj["data"] = {k: decoded(v) for k, v in obj.get("data", {}).items()}
        out[object_id(obj)] = obj
    return out


# --- RBAC: what a ServiceAccount is granted, and whether that allows a call ---------------

ALL_NAMESPACES = "*"  # a cluster-wide list/watch, or a call in any user namespace


class Call(NamedTuple):
    """One API call a process makes: where, on what, with which verb, on which name."""

    why: str
    scope: str  # ALL_NAMESPACES or one namespace
    group: str
    resource: str
    verb: str
    name: str | None = None  # the object's name when the call names one object

    def __str__(self) -> str:
        return self.why


class Grant(NamedTuple):
    scope: str
    group: str
    resource: str
    verb: str
    names: frozenset[str]  # empty: any name


#: Granted to every ServiceAccount on purpose (deploy/base/settings.yaml): the cluster settings the
#: scheduler and every runtimed read alike (SPEC §2.3), by name, read only.
SETTINGS_GRANT = Grant(NAMESPACE, "", "configmaps", "get", frozenset({"kruntimes-settings"}))


def grants_to(objects: list[Object], namespace: str, account: str) -> list[Grant]:
    """Every (scope, group, resource, verb, names) the bindings in ``objects`` give the account."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    grants = []
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref, where = binding["roleRef"], binding["metadata"].get("namespace")
        subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        # In a RoleBinding, a ServiceAccount subject without a namespace is the binding's own.
        # A ServiceAccount is also in the groups of all service accounts and of its namespace's.
        groups = {"system:serviceaccounts", f"system:serviceaccounts:{namespace}"}
        if not any({k: s.get(k, where) for k in subject} == subject
                   or (s.get("kind") == "Group" and s.get("name") in groups) for s in binding.get("subjects", [])):
            continue
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


# --- the Kubernetes client calls a process's modules make ------------------------------------

_METHOD = re.compile(r"(list|read|get|create|replace|patch|delete)_(?:(?:namespaced|cluster)_(\w+?)"
                     r"|(\w+?)_for_all_namespaces)")
_VERB = {"list": "list", "read": "get", "get": "get", "create": "create", "replace": "update",
         "patch": "patch", "delete": "delete"}
_KIND = {"custom_object": ("kruntimes.io", ""), "custom_object_status": ("kruntimes.io", "/status"),
         "pod": ("", "pods"), "lease": ("coordination.k8s.io", "leases"), "config_map": ("", "configmaps"),
         "event": ("events.k8s.io", "events")}  # EventsV1Api: kruntimes writes no core v1 Events
_PLURALS = {"RUNS": "runs", "RUNTIMES": "runtimes"}


def client_calls(paths: list[Path]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every Kubernetes client method the modules call.

    A method counts when it is called or handed to another call (`functools.partial`, the
    controller's `_call(what, method, ...)`). A custom object's
    plural is the `RUNS`/`RUNTIMES` constant among the call's arguments; a call that
    names neither (a helper taking the plural as a parameter) counts for both.
    """
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            for ref in [node.func, *node.args]:
                match = _METHOD.fullmatch(ref.attr) if isinstance(ref, ast.Attribute) else None
                if match is None or (kind := match.group(2) or match.group(3)) not in _KIND:
                    continue
                group, resource = _KIND[kind]
                if group == "kruntimes.io":
                    named = {_PLURALS[n.id] for a in node.args for n in ast.walk(a)
                             if isinstance(n, ast.Name) and n.id in _PLURALS}
                    plurals = named or set(_PLURALS.values())
                    found |= {(group, plural + resource, _VERB[match.group(1)]) for plural in plurals}
                else:
                    found.add((group, resource, _VERB[match.group(1)]))
    return found


# --- reading a workload ----------------------------------------------------------------------

def container(pod_spec: Object, name: str) -> Object:
    [found] = [c for c in pod_spec["containers"] if c["name"] == name]
    return dict(found)


def flags(container: Object) -> dict[str, str | None]:
    return {a.split("=", 1)[0]: (a.split("=", 1)[1] if "=" in a else None) for a in container["args"]}


def env(container: Object) -> dict[str, Any]:
    return {e["name"]: e.get("valueFrom", e.get("value")) for e in container.get("env", [])}


def mounts(pod_spec: Object, container_name: str) -> dict[str, Object]:
    """mountPath -> volume, for one container."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    return {m["mountPath"]: volumes[m["name"]] for m in container(pod_spec, container_name).get("volumeMounts", [])}


def examples() -> list[Object]:
    """Every document in deploy/examples, as a user applies them (`kubectl apply -n TEAM -f`)."""
    return [d for path in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]
