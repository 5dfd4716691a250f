"""The Run, Runtime and RuntimeDeviceClass CustomResourceDefinitions, generated from the pydantic models.

The models are the single source for the API (STYLE §5): this module turns
``Model.model_json_schema(by_alias=True)`` into the structural OpenAPI v3 schema an
``apiextensions.k8s.io/v1`` CRD requires, and adds what only a CRD says (names,
printer columns, the status subresource). ``kruntimes crds --write deploy/crds``
writes the files; a test fails when the committed files drift from the models.

Structural-schema rules followed here (Kubernetes "Specifying a structural schema"):
every node has a ``type`` unless it is int-or-string or preserves unknown fields; no
``$ref`` (every definition is inlined); ``anyOf`` only in the int-or-string form;
``additionalProperties`` never next to ``properties`` and never ``false`` (unknown fields
are pruned instead); ``metadata`` carries no constraints; OpenAPI v3.0 spellings
(``enum`` for ``const``, boolean ``exclusiveMinimum``). Anything the converter does not
know fails generation, so a new pydantic construct cannot slip into the CRD unchecked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from kruntimes.api import device_models, models
from kruntimes.api.fields import GROUP, VERSION

HEADER = (
    "# Generated from kruntimes/api/models.py by `kruntimes crds --write deploy/crds`.\n"
    "# Do not edit: change the models and regenerate.\n"
)

# Keywords copied as they are (all exist in apiextensions/v1 JSONSchemaProps).
_KEPT = frozenset({
    "description", "type", "format", "enum", "pattern", "minimum", "maximum",
    "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
    "multipleOf", "required", "x-kubernetes-validations", "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
})
# Pydantic annotations a CRD has no use for.
_DROPPED = frozenset({"title", "examples"})
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


class SchemaConversionError(ValueError):
    """The model's JSON schema uses a construct this converter cannot make structural."""


@dataclass(frozen=True)
class _Resource:
    model: type[BaseModel]
    plural: str
    singular: str
    short_names: tuple[str, ...]
    columns: tuple[dict[str, Any], ...]
    # apiextensions v1 `selectableFields` (beta in Kubernetes 1.31, GA in 1.32; a 1.30
    # server without the CustomResourceFieldSelectors gate drops the field on create).
    selectable_fields: tuple[str, ...] = ()
    scope: str = "Namespaced"


_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

_RESOURCES = (
    _Resource(
        model=models.Run, plural="runs", singular="run", short_names=("krun",),
        columns=(
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
             "description": "Lifecycle phase."},
            {"name": "Runtime", "type": "string", "jsonPath": ".spec.runtime",
             "description": "Runtime the Run asks for."},
            {"name": "Pod", "type": "string", "jsonPath": ".status.assignment.podName",
             "description": "Runtime Pod the Run is bound to."},
            _AGE,
            {"name": "Workspace", "type": "string", "jsonPath": ".spec.workspace",
             "priority": 1, "description": "Workspace whose Runs share one Runtime Pod."},
            # SPEC §7.6: what Bind wrote; kubectl joins the list with commas (`-o wide`).
            {"name": "Devices", "type": "string", "jsonPath": ".status.devices.results[*].device",
             "priority": 1, "description": "Devices allocated to the Run on its Runtime Pod, in result order."},
            {"name": "Message", "type": "string", "priority": 1,
             "jsonPath": '.status.conditions[?(@.type=="Scheduled")].message',
             "description": "Why the Run is not placed yet."},
            # A Failed Run's Scheduled condition still says where it was placed: why it ended is
            # the Completed condition's (SPEC §3.7, §4.1: exit code, RuntimePodLost, ExecutionLost, invalid).
            {"name": "Reason", "type": "string", "priority": 1,
             "jsonPath": '.status.conditions[?(@.type=="Completed")].reason',
             "description": "Why the Run ended (ProcessFailed, RuntimePodLost, ExecutionLost, InvalidConfiguration)."},
            {"name": "Ended", "type": "string", "priority": 1,
             "jsonPath": '.status.conditions[?(@.type=="Completed")].message',
             "description": "How the Run ended, in words (its exit code, the pod lost, ...)."},
        ),
        # runtimed may list only the Runs assigned to its pod (SPEC §4.1):
        # fieldSelector=status.assignment.podName=<pod>.
        selectable_fields=(".status.assignment.podName",),
    ),
    _Resource(
        model=models.Runtime, plural="runtimes", singular="runtime", short_names=("krt",),
        columns=(
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas",
             "description": "Desired Runtime Pods."},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas",
             "description": "Runtime Pods that are Ready."},
            _AGE,
        ),
    ),
    # SPEC §7.2: classes are cluster-wide, as upstream's DeviceClass; it has no status.
    _Resource(
        model=device_models.RuntimeDeviceClass, plural="runtimedeviceclasses", singular="runtimedeviceclass",
        short_names=("krdc",), columns=(_AGE,), scope="Cluster",
    ),
)


def generate() -> list[dict[str, Any]]:
    """The CRDs, Run first, as plain dicts ready to dump or to apply."""
    # Through JSON so that no two places share one dict: the caller may edit the
    # result, and YAML would otherwise print shared nodes as anchors.
    return json.loads(json.dumps([_crd(resource) for resource in _RESOURCES]))


def file_name(crd: dict[str, Any]) -> str:
    """``<group>_<plural>.yaml``, the name controller-gen would give the file."""
    return f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"


def _crd_files() -> dict[str, str]:
    return {file_name(crd): HEADER + _dump(crd) for crd in generate()}


def render_files() -> dict[str, str]:
    """File name → file text, exactly as committed under ``deploy/crds``.

    Includes a ``kustomization.yaml`` listing the CRDs, so that a kustomization
    elsewhere can reference the directory (kustomize refuses single files outside
    its own root) and ``kubectl apply -k`` works without relaxing load restrictions.
    """
    files = _crd_files()
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": sorted(files)}
    return {**files, "kustomization.yaml": HEADER + _dump(kustomization)}


def render_yaml() -> str:
    """Every CRD in one multi-document YAML stream (what ``kruntimes crds`` prints)."""
    return "---\n".join(_crd_files().values())


def write(directory: Path) -> list[Path]:
    """Write one file per CRD into ``directory`` (created if missing); the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_files().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural ``openAPIV3Schema`` of one top-level model (Run or Runtime)."""
    source = model.model_json_schema(by_alias=True)
    defs = source.get("$defs", {})
    root = _convert(source, defs, path=model.__name__, under_spec=False)
    properties = root["properties"]
    # The API server owns these three; a CRD may not constrain metadata beyond
    # name/generateName, and apiVersion/kind are checked before the schema runs.
    properties["apiVersion"] = {"type": "string", "description": "Always kruntimes.io/v1alpha1."}
    properties["kind"] = {"type": "string", "description": f"Always {model.__name__}."}
    properties["metadata"] = {"type": "object"}
    required = [name for name in root.pop("required", []) if name not in ("apiVersion", "kind", "metadata")]
    if required:  # the API server drops an empty list, so a CRD written with one never equals what it serves
        root["required"] = required
    return root


def _crd(resource: _Resource) -> dict[str, Any]:
    kind = resource.model.__name__
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        **({"subresources": {"status": {}}} if "status" in resource.model.model_fields else {}),
        "additionalPrinterColumns": [dict(column) for column in resource.columns],
        "schema": {"openAPIV3Schema": openapi_schema(resource.model)},
    }
    if resource.selectable_fields:
        version["selectableFields"] = [{"jsonPath": path} for path in resource.selectable_fields]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": resource.plural,
                "singular": resource.singular,
                "shortNames": list(resource.short_names),
                "categories": ["kruntimes"],
            },
            "scope": resource.scope,
            "versions": [version],
        },
    }


def _convert(node: dict[str, Any], defs: dict[str, Any], path: str, under_spec: bool) -> dict[str, Any]:
    node = _resolve(node, defs, path)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or key == "$defs":
            continue
        if key == "default":
            # Defaults stay in the models, which apply them on every read. The server
            # would write status defaults into stored objects, so what kruntimes wrote
            # and what it reads back would differ ("write status only when it changes"
            # would never settle). Spec defaults are kept: they document the contract
            # and make `kubectl get` show them. A null default means "omitted".
            if value is not None and under_spec:
                out["default"] = value
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            # JSON Schema 2020-12 gives the bound; OpenAPI v3.0 wants a flag on it.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "properties":
            if value:
                out["properties"] = {
                    name: _convert(child, defs, f"{path}.{name}",
                                   under_spec or (name == "spec" and "." not in path))
                    for name, child in value.items()
                }
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = _convert(value, defs, f"{path}[*]", under_spec)
            elif value is True and not node.get("x-kubernetes-preserve-unknown-fields"):
                raise SchemaConversionError(
                    f"{path}: a free-form mapping needs x-kubernetes-preserve-unknown-fields "
                    "(use fields.PRESERVE_UNKNOWN) or a typed value")
            # False: unknown fields are pruned by the server; the models reject them.
        elif key == "items":
            out["items"] = _convert(value, defs, f"{path}[]", under_spec)
        elif key == "anyOf":
            if value != _INT_OR_STRING or not node.get("x-kubernetes-int-or-string"):
                raise SchemaConversionError(f"{path}: anyOf is only allowed as int-or-string")
            out["anyOf"] = [dict(branch) for branch in value]
        elif key in _KEPT:
            out[key] = value
        else:
            raise SchemaConversionError(f"{path}: JSON schema keyword {key!r} has no CRD equivalent")
    if "type" not in out and not (out.get("x-kubernetes-int-or-string")
                                  or out.get("x-kubernetes-preserve-unknown-fields")):
        raise SchemaConversionError(f"{path}: a structural schema needs a type here")
    return out


def _resolve(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Inline ``$ref`` and fold ``Optional`` (``anyOf [X, null]``) into X.

    Keys written beside the reference (description, validations, default) win over the
    definition's, as they describe the field rather than its type.
    """
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**_resolve(target, defs, path), **siblings}
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        branches = [b for b in node["anyOf"] if b != {"type": "null"}]
        if len(branches) == len(node["anyOf"]) or len(branches) != 1:
            raise SchemaConversionError(f"{path}: only Optional[X] unions can be expressed")
        siblings = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_resolve(branches[0], defs, path), **siblings}
    return node


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=True, default_flow_style=False,
                          allow_unicode=True, width=120)
