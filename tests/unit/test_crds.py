"""The CRDs in deploy/crds: generated from the models, structural, and accepting our examples.

The structural checker below encodes the rules of the Kubernetes documentation
("Specifying a structural schema", and the v1 CRD validation the API server applies),
so a schema the API server would refuse fails here first, without a cluster.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, Field

from kruntimes.api import crds
from kruntimes.cli import crds_cmd

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "crds"
EXAMPLES = ROOT / "docs" / "examples" / "cohort.yaml"

# Fields of apiextensions.k8s.io/v1 JSONSchemaProps that a structural schema may use.
# ($ref, definitions, $schema, id, patternProperties, dependencies, additionalItems and
# uniqueItems are rejected by the API server in v1 CRDs; const/$defs do not exist there.)
JSON_SCHEMA_PROPS = {
    "description", "type", "format", "title", "default", "maximum", "exclusiveMaximum",
    "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems",
    "minItems", "multipleOf", "enum", "maxProperties", "minProperties", "required", "items",
    "allOf", "oneOf", "anyOf", "not", "properties", "additionalProperties", "nullable",
    "example", "externalDocs", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations",
}
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """Every violation of the structural-schema rules in one openAPIV3Schema."""
    problems: list[str] = []

    def node(s: dict[str, Any], path: str, in_metadata: bool = False) -> None:
        for key in s:
            if key not in JSON_SCHEMA_PROPS:
                problems.append(f"{path}: {key!r} is not a JSONSchemaProps field")
        free = s.get("x-kubernetes-int-or-string") or s.get("x-kubernetes-preserve-unknown-fields")
        if not s.get("type") and not free:
            problems.append(f"{path}: no type")
        for flag in ("x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields"):
            if flag in s and s[flag] is not True:
                problems.append(f"{path}: {flag} must be true or absent")
        for junctor in JUNCTORS:
            if junctor in s and not (junctor == "anyOf" and s["anyOf"] == INT_OR_STRING
                                     and s.get("x-kubernetes-int-or-string")):
                problems.append(f"{path}: {junctor} other than the int-or-string form")
        if "additionalProperties" in s:
            if "properties" in s:
                problems.append(f"{path}: additionalProperties and properties are mutually exclusive")
            if s["additionalProperties"] is False:
                problems.append(f"{path}: additionalProperties must not be false")
        if "default" in s:
            if s["default"] is None and not s.get("nullable"):
                problems.append(f"{path}: null default on a non-nullable field")
            if in_metadata:
                problems.append(f"{path}: defaults are not allowed in metadata")
        for rule in s.get("x-kubernetes-validations", []):
            if not isinstance(rule.get("rule"), str) or set(rule) - {"rule", "message", "messageExpression",
                                                                  "reason", "fieldPath", "optionalOldSelf"}:
                problems.append(f"{path}: malformed x-kubernetes-validations entry {rule}")
        for name, child in s.get("properties", {}).items():
            node(child, f"{path}.{name}", in_metadata)
        if isinstance(s.get("additionalProperties"), dict):
            node(s["additionalProperties"], f"{path}[*]", in_metadata)
        if "items" in s:
            node(s["items"], f"{path}[]", in_metadata)

    node(schema, "<root>")
    metadata = schema.get("properties", {}).get("metadata")
    if metadata is not None and set(metadata) - {"type", "properties"} \
            or set((metadata or {}).get("properties", {})) - {"name", "generateName"}:
        problems.append("metadata: only name and generateName may be constrained")
    return problems


def _crd_by_kind(kind: str) -> dict[str, Any]:
    return next(crd for crd in crds.generate() if crd["spec"]["names"]["kind"] == kind)


def _schema(kind: str) -> dict[str, Any]:
    return _crd_by_kind(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# --- the committed files are the generated ones ----------------------------------------

def test_the_committed_crds_equal_what_the_models_generate() -> None:
    for name, text in crds.render_files().items():
        path = CRD_DIR / name
        committed = path.read_text(encoding="utf-8") if path.exists() else None
        assert committed == text, (
            f"{path.relative_to(ROOT)} is out of date with kruntimes/api/models.py: "
            "run `kruntimes crds --write deploy/crds` and commit the result")


def test_render_yaml_is_every_crd_as_one_stream() -> None:
    documents = list(yaml.safe_load_all(crds.render_yaml()))
    assert documents == crds.generate()
    assert [d["metadata"]["name"] for d in documents] == ["runs.kruntimes.io", "runtimes.kruntimes.io",
                                                      "runtimedeviceclasses.kruntimes.io"]


def test_the_cli_writes_the_committed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    crds_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["crds", "--write", str(tmp_path / "crds")])
    assert args.run(args) == 0
    for name in crds.render_files():
        assert (tmp_path / "crds" / name).read_text() == (CRD_DIR / name).read_text()
    args = parser.parse_args(["crds"])
    assert args.run(args) == 0
    assert capsys.readouterr().out == crds.render_yaml()


# --- what an operator gets -------------------------------------------------------------

@pytest.mark.parametrize("kind, plural, short", [("Run", "runs", "krun"), ("Runtime", "runtimes", "krt")])
def test_each_crd_is_a_namespaced_v1alpha1_resource_with_a_status_subresource(
        kind: str, plural: str, short: str) -> None:
    crd = _crd_by_kind(kind)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{plural}.kruntimes.io"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == ("kruntimes.io", "Namespaced")
    assert spec["names"]["plural"] == plural and short in spec["names"]["shortNames"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_kubectl_get_runs_shows_phase_runtime_pod_and_age() -> None:
    columns = _crd_by_kind("Run")["spec"]["versions"][0]["additionalPrinterColumns"]
    default = [(c["name"], c["jsonPath"]) for c in columns if c.get("priority", 0) == 0]
    assert default == [("Phase", ".status.phase"), ("Runtime", ".spec.runtime"),
                       ("Pod", ".status.assignment.podName"), ("Age", ".metadata.creationTimestamp")]


def test_kubectl_get_runs_wide_says_why_a_run_waits_and_why_it_ended_and_which_devices_it_got() -> None:
    columns = _crd_by_kind("Run")["spec"]["versions"][0]["additionalPrinterColumns"]
    wide = [(c["name"], c["jsonPath"]) for c in columns if c.get("priority", 0) == 1]
    assert wide == [("Workspace", ".spec.workspace"),
                    ("Devices", ".status.devices.results[*].device"),
                    ("Message", '.status.conditions[?(@.type=="Scheduled")].message'),
                    ("Reason", '.status.conditions[?(@.type=="Completed")].reason'),
                    ("Ended", '.status.conditions[?(@.type=="Completed")].message')]


def test_kubectl_get_runtimes_shows_replicas_ready_and_age() -> None:
    columns = _crd_by_kind("Runtime")["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"]) for c in columns] == [
        ("Replicas", ".spec.replicas"), ("Ready", ".status.readyReplicas"),
        ("Age", ".metadata.creationTimestamp")]


def test_runs_are_selectable_by_the_pod_they_are_assigned_to() -> None:
    # runtimed lists only its pod's Runs where the server allows it (SPEC §4.1). The API
    # server accepts a selectable field only on a string, integer or boolean in the schema.
    [version] = _crd_by_kind("Run")["spec"]["versions"]
    assert version["selectableFields"] == [{"jsonPath": ".status.assignment.podName"}]
    node = _schema("Run")
    for name in ("status", "assignment", "podName"):
        node = node["properties"][name]
    assert node["type"] == "string"
    assert "selectableFields" not in _crd_by_kind("Runtime")["spec"]["versions"][0]


def test_the_runtime_status_keeps_its_observed_generation() -> None:
    # Not in the schema, the server would prune what the controller writes (SPEC §4.2).
    status = _schema("Runtime")["properties"]["status"]["properties"]
    assert status["observedGeneration"]["type"] == "integer"


@pytest.mark.parametrize("kind", ["Run", "Runtime"])
def test_the_schema_is_structural(kind: str) -> None:
    assert structural_problems(_schema(kind)) == []


def test_the_structural_checker_catches_what_the_api_server_refuses() -> None:
    bad = {"type": "object", "properties": {
        "a": {"$ref": "#/x"},
        "b": {"type": "object", "properties": {"c": {"type": "string"}}, "additionalProperties": False},
        "d": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "e": {"type": "string", "default": None},
        "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
    }}
    problems = "\n".join(structural_problems(bad))
    for expected in ("'$ref' is not", "<root>.a: no type", "mutually exclusive", "must not be false",
                     "anyOf other than", "null default", "only name and generateName"):
        assert expected in problems


def test_spec_resources_is_immutable_through_a_transition_rule() -> None:
    spec = _schema("Run")["properties"]["spec"]
    assert {"rule": "self == oldSelf", "message": "spec.resources is immutable"} in \
        spec["properties"]["resources"]["x-kubernetes-validations"]
    assert any("oldSelf.resources" in rule["rule"] for rule in spec["x-kubernetes-validations"])


def test_quantities_are_int_or_string_with_the_quantity_pattern_and_weights_are_bounded() -> None:
    spec = _schema("Run")["properties"]["spec"]["properties"]
    quantity = spec["resources"]["properties"]["requests"]["additionalProperties"]
    assert quantity["x-kubernetes-int-or-string"] is True and quantity["pattern"].startswith("^")
    preferred = spec["affinity"]["properties"]["runAffinity"]["properties"]["preferred"]
    weight = preferred["items"]["properties"]["weight"]
    assert (weight["minimum"], weight["maximum"]) == (1, 100)


def test_free_form_parts_preserve_unknown_fields() -> None:
    run_mode = _schema("Run")["properties"]["spec"]["properties"]["mode"]["properties"]
    assert run_mode["function"]["x-kubernetes-preserve-unknown-fields"] is True
    template = _schema("Runtime")["properties"]["spec"]["properties"]["template"]
    assert template == {"description": template["description"], "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True}


def test_status_carries_no_defaults_and_spec_keeps_its_own() -> None:
    runtime = _schema("Runtime")["properties"]
    assert runtime["spec"]["properties"]["replicas"]["default"] == 1
    assert "default" not in str(runtime["status"])
    assert "default" not in str(_schema("Run")["properties"]["status"])


def test_the_crds_pass_the_kubernetes_openapi_schema_strictly() -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is not installed (pip install kubernetes-validate)")
    for crd in crds.generate():
        kubernetes_validate.validate(crd, kubernetes_validate.latest_version(), strict=True)


# --- the example Runs against the generated schema --------------------------------------

def _validator(kind: str) -> Any:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    # OpenAPI v3.0 schemas are JSON Schema draft 4 in the parts a CRD uses (boolean
    # exclusiveMinimum, no const); the x-kubernetes-* keys are ignored by it.
    return jsonschema.Draft4Validator(_schema(kind))


def _example_runs() -> list[dict[str, Any]]:
    documents = [d for d in yaml.safe_load_all(EXAMPLES.read_text()) if d]
    return [d for d in documents if d.get("kind") == "Run"]


def test_every_example_run_is_accepted_by_the_schema() -> None:
    validator = _validator("Run")
    runs = _example_runs()
    assert len(runs) >= 5
    for run in runs:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(run)]
        assert errors == [], run["metadata"]["name"]


class _Case(BaseModel):
    name: str
    patch: dict[str, Any]
    accepted: bool


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


@pytest.mark.parametrize("case", [
    _Case(name="a whole quantity string is accepted", patch={"resources": {"requests": {"gpu": "2"}}},
          accepted=True),
    _Case(name="an integer quantity is accepted", patch={"resources": {"requests": {"gpu": 2}}}, accepted=True),
    # Fractions are quantities; the scheduler fails such a Run with a reason (SPEC §3.2 step 2).
    _Case(name="a fractional quantity is left to the scheduler", patch={"resources": {"requests": {"gpu": "0.5"}}},
          accepted=True),
    _Case(name="a word is not a quantity", patch={"resources": {"requests": {"gpu": "abc"}}}, accepted=False),
    _Case(name="a weight above 100 is refused", accepted=False, patch={"affinity": {"runAffinity": {"preferred": [
        {"weight": 101, "term": {"topologyKey": "kruntimes.io/runtime-pod"}}]}}}),
    _Case(name="a weight of 0 is refused", accepted=False, patch={"affinity": {"runAffinity": {"preferred": [
        {"weight": 0, "term": {"topologyKey": "kruntimes.io/runtime-pod"}}]}}}),
    _Case(name="an unknown selector operator is refused", accepted=False, patch={"affinity": {"runAffinity": {
        "required": [{"topologyKey": "kruntimes.io/runtime-pod",
                      "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt"}]}}]}}}),
    _Case(name="a task without args is refused", patch={"mode": {"task": {"args": []}}}, accepted=False),
    _Case(name="function settings are free-form", patch={"mode": {"function": {"anything": {"x": 1}}}},
          accepted=True),
    _Case(name="an empty runtime is refused", patch={"runtime": ""}, accepted=False),
    # Loose types (issue 12 defect 5): the schema says integer, so no string and no boolean.
    _Case(name="a weight written as a string is refused", accepted=False, patch={"affinity": {"runAffinity": {
        "preferred": [{"weight": "10", "term": {"topologyKey": "kruntimes.io/runtime-pod"}}]}}}),
    _Case(name="a boolean weight is refused", accepted=False, patch={"affinity": {"runAffinity": {
        "preferred": [{"weight": True, "term": {"topologyKey": "kruntimes.io/runtime-pod"}}]}}}),
    # Bounds (issue 12 defect 9, docs/api-bounds.md): the API server refuses what PreFilter would fail.
    _Case(name="eight required terms are accepted", accepted=True, patch={"affinity": {"runAffinity": {
        "required": [{"topologyKey": "kruntimes.io/runtime-pod"}] * 8}}}),
    _Case(name="nine required terms are refused", accepted=False, patch={"affinity": {"runAffinity": {
        "required": [{"topologyKey": "kruntimes.io/runtime-pod"}] * 9}}}),
    _Case(name="seventeen matchExpressions are refused", accepted=False, patch={"affinity": {"runAffinity": {
        "required": [{"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {
            "matchExpressions": [{"key": "a", "operator": "Exists"}] * 17}}]}}}),
    _Case(name="seventeen values are refused", accepted=False, patch={"affinity": {"runAffinity": {
        "required": [{"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {
            "matchExpressions": [{"key": "a", "operator": "In", "values": [str(i) for i in range(17)]}]}}]}}}),
    _Case(name="a 64-character label value is refused", accepted=False, patch={"affinity": {"runAffinity": {
        "required": [{"topologyKey": "kruntimes.io/runtime-pod",
                      "labelSelector": {"matchLabels": {"a": "v" * 64}}}]}}}),
    _Case(name="a 63-character label value is accepted", accepted=True, patch={"affinity": {"runAffinity": {
        "required": [{"topologyKey": "kruntimes.io/runtime-pod",
                      "labelSelector": {"matchLabels": {"a": "v" * 63}}}]}}}),
    _Case(name="another topologyKey is refused", accepted=False, patch={"affinity": {"runAffinity": {
        "required": [{"topologyKey": "kubernetes.io/hostname"}]}}}),
    _Case(name="a 64-character workspace is refused", patch={"workspace": "w" * 64}, accepted=False),
    _Case(name="a runtime name that is not a DNS subdomain is refused", patch={"runtime": "Py_1"}, accepted=False),
    _Case(name="thirty-three requests are refused", accepted=False,
          patch={"resources": {"requests": {f"r{i}": "1" for i in range(33)}}}),
    _Case(name="257 args are refused", patch={"mode": {"task": {"args": ["x"] * 257}}}, accepted=False),
    _Case(name="an argument over 4096 characters is refused", patch={"mode": {"task": {"args": ["x" * 4097]}}},
          accepted=False),
], ids=lambda case: case.name)
def test_the_schema_judges_run_specs(case: _Case) -> None:
    run = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": "r"},
           "spec": _merge({"runtime": "python"}, case.patch)}
    assert _validator("Run").is_valid(run) is case.accepted


def test_a_run_without_spec_runtime_is_refused() -> None:
    run = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": "r"}, "spec": {}}
    assert not _validator("Run").is_valid(run)


# --- the converter refuses what it cannot make structural -------------------------------

class _Loose(BaseModel):
    either: int | str = Field(description="A union that is not int-or-string.")


class _FreeForm(BaseModel):
    settings: dict[str, Any] = Field(description="Free-form without preserve-unknown-fields.")


class _Positive(BaseModel):
    apiVersion: Literal["x/v1"] = "x/v1"
    count: int = Field(gt=0, description="Exclusive bound.")


@pytest.mark.parametrize("model, message", [
    (_Loose, r"only Optional\[X\] unions"),
    (_FreeForm, "x-kubernetes-preserve-unknown-fields"),
], ids=["a plain union", "a free-form dict"])
def test_constructs_without_a_structural_form_fail_generation(model: type[BaseModel], message: str) -> None:
    with pytest.raises(crds.SchemaConversionError, match=message):
        crds.openapi_schema(model)


def test_an_exclusive_bound_becomes_the_openapi_v3_0_flag() -> None:
    count = crds.openapi_schema(_Positive)["properties"]["count"]
    assert (count["minimum"], count["exclusiveMinimum"]) == (0, True)
