"""Deploy as a user does: `kubectl apply --server-side` of deploy/ against a real API server.

The emulator and the schema checks of tests/unit check the manifests against our
reading of Kubernetes; here the release's own kube-apiserver reads them: the CRDs'
structural schemas and CEL rules (compiled and cost-estimated at create), RBAC objects,
the four ValidatingAdmissionPolicies (type-checked by the server's own checker against
the Run, Pod and Lease schemas, through probes it can check), and every overlay and
component. The CRDs and the dev overlay are applied for real (the namespace, roles
and policies exist afterwards); the rest is sent with ``--dry-run=server``, which runs
the same validation and admission without storing.
Nothing here runs a pod: the control plane has no kubelet and no scheduler.
"""

from __future__ import annotations

import copy
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from kruntimes.api import models
from tests.realkube.controlplane import ControlPlane
from tests.realkube.fixtures import DEPLOY, apply, kubectl

# runtimed's three (SPEC §4.1: its Runs' status, its heartbeat, its Events), the controller's
# (§4.2) and the scheduler's term fence (§3.6), whose param is a Lease.
POLICIES = ("kruntimes-runtimed-run-status", "kruntimes-runtimed-heartbeat", "kruntimes-runtimed-events",
            "kruntimes-controller-run-status", "kruntimes-scheduler-fence")


def composed(directory: Path, overlay: str, *components: str) -> Path:
    """A kustomization of an overlay with components, as a user writes one beside deploy/."""
    directory.mkdir(parents=True, exist_ok=True)

    def relative(path: str) -> str:  # kustomize refuses absolute roots
        return os.path.relpath(DEPLOY / path, directory)

    lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization",
             "resources:", f"- {relative(overlay)}", "components:", *(f"- {relative(c)}" for c in components)]
    (directory / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return directory


def get(plane: ControlPlane, *what: str) -> Any:
    return json.loads(kubectl(plane, "get", "-o", "json", *what))


def test_the_generated_crds_are_established_with_their_names_accepted(deployed: ControlPlane) -> None:
    for crd in ("runs.kruntimes.io", "runtimes.kruntimes.io"):
        conditions = {c["type"]: c["status"] for c in get(deployed, "crd", crd)["status"]["conditions"]}
        assert conditions.get("Established") == "True", (crd, conditions)
        assert conditions.get("NamesAccepted") == "True", (crd, conditions)
        assert conditions.get("NonStructuralSchema") is None, (crd, conditions)


def test_the_dev_overlay_creates_everything_it_lists(deployed: ControlPlane) -> None:
    for obj in _yaml_docs(kubectl(deployed, "kustomize", str(DEPLOY / "overlays/dev"))):
        kind, name = obj["kind"], obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace")
        args = [f"{kind}.{obj['apiVersion'].split('/')[0]}" if "/" in obj["apiVersion"] else kind, name]
        if namespace:
            args += ["-n", namespace]
        assert get(deployed, *args)["metadata"]["name"] == name


def _yaml_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


# The server's type checker gives up on a rule with a wildcard version and skips
# subresources, so it would pass our policies (runs/status, apiVersions "*") without
# looking at a single field. A probe is the same policy matching the main resource at
# the served version, which it does type-check: a subresource's object is the whole Run.
SERVED_VERSIONS = {"kruntimes.io": models.VERSION, "": "v1", "events.k8s.io": "v1"}


def typecheck_probe(policy: dict[str, Any], name: str) -> dict[str, Any]:
    probe = copy.deepcopy(policy)
    probe["metadata"] = {"name": name}
    for rule in probe["spec"]["matchConstraints"]["resourceRules"]:
        rule["apiVersions"] = sorted({SERVED_VERSIONS[group] for group in rule["apiGroups"]})
        rule["resources"] = sorted({resource.split("/")[0] for resource in rule["resources"]})
    return probe


def type_check(plane: ControlPlane, policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The real type checker's warnings for ``policy``, created (unbound, so it admits nothing) and deleted."""
    name = policy["metadata"]["name"]
    kubectl(plane, "apply", "--server-side", "-f", "-", stdin=json.dumps(policy))
    try:
        deadline = time.monotonic() + 60
        while True:
            obj = get(plane, "validatingadmissionpolicy", name)
            status = obj.get("status", {})
            if status.get("observedGeneration") == obj["metadata"]["generation"] and "typeChecking" in status:
                return list(status["typeChecking"].get("expressionWarnings", []))
            assert time.monotonic() < deadline, f"{name} was not type-checked: {status}"
            time.sleep(0.5)
    finally:
        kubectl(plane, "delete", "validatingadmissionpolicy", name)


def dev_policies(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    built = _yaml_docs(kubectl(plane, "kustomize", str(DEPLOY / "overlays/dev")))
    return {o["metadata"]["name"]: o for o in built if o["kind"] == "ValidatingAdmissionPolicy"}


def test_every_admission_policy_is_deployed(deployed: ControlPlane) -> None:
    assert sorted(dev_policies(deployed)) == sorted(POLICIES)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_admission_policy_passes_the_servers_type_checker(deployed: ControlPlane, policy: str) -> None:
    probe = typecheck_probe(dev_policies(deployed)[policy], f"{policy}-typecheck")
    assert type_check(deployed, probe) == []


def test_the_type_checker_sees_the_run_schema_and_names_a_field_it_lacks(deployed: ControlPlane) -> None:
    policy = copy.deepcopy(dev_policies(deployed)["kruntimes-runtimed-run-status"])
    policy["spec"]["validations"] = [{"expression": "object.status.assignment.noSuchField == 'x'"}]
    warnings = type_check(deployed, typecheck_probe(policy, "typecheck-control"))
    assert len(warnings) == 1 and "undefined field 'noSuchField'" in warnings[0]["warning"], warnings


DRY_RUNS = {
    "the postgres overlay": lambda tmp: ["-k", str(DEPLOY / "overlays/postgres")],
    "the postgres overlay with the history-follow and journal-key components": lambda tmp: [
        "-k", str(composed(tmp / "both", "overlays/postgres", "components/history-follow", "components/journal-key"))],
    "the web view": lambda tmp: ["-k", str(DEPLOY / "ui")],
}


@pytest.mark.parametrize("name", DRY_RUNS)
def test_the_server_accepts_every_object_of(deployed: ControlPlane, name: str, tmp_path: Path) -> None:
    output = apply(deployed, *DRY_RUNS[name](tmp_path), dry_run=True)
    assert "serverside-applied (server dry run)" in output


def test_the_examples_are_accepted_in_a_team_namespace(deployed: ControlPlane) -> None:
    namespace = f"team-{uuid.uuid4().hex[:6]}"
    kubectl(deployed, "create", "namespace", namespace)
    for example in ("runtimed-serviceaccount.yaml", "runtime.yaml", "runs.yaml"):
        apply(deployed, "-n", namespace, "-f", str(DEPLOY / "examples" / example))
    runs = get(deployed, "runs.kruntimes.io", "-n", namespace)["items"]
    assert len(runs) == 3
