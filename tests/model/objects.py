"""Reading `simulate`'s input as the SPEC describes it: Runtime Pods (§2.1, §2.3) and Runs (§2.2).

Plain dicts in, plain dicts out. A Run is read twice over, on purpose:
- `problems` says whether it is malformed as a whole (a Pending Run with any
  problem becomes Failed, §3.2 step 2);
- `counted`, `affinity`, `labels` and `workspace` are its parts "judged one by one"
  (§2.2, amended), which is what an old active Run still contributes.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tests.model import syntax

RUNTIME_LABEL = "kruntimes.io/runtime"
CAPACITY_JSON = "kruntimes.io/capacity"
CAPACITY_PREFIX = "kruntimes.io/capacity."
HEARTBEAT = "kruntimes.io/runtimed-heartbeat"
TOPOLOGY = "kruntimes.io/runtime-pod"
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _map(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def namespace_of(meta: dict[str, Any]) -> str:
    ns = meta.get("namespace")
    return ns if isinstance(ns, str) and ns else "default"


# -- Runtime Pods -------------------------------------------------------------------------

def read_capacity(annotations: dict[str, Any], json_form: bool = True) -> dict[str, int] | None:
    """The declared capacity (both annotation forms, §2.1 amended), or None when malformed."""
    declared: dict[str, int] = {}
    if CAPACITY_JSON in annotations and json_form:
        text = annotations[CAPACITY_JSON]
        if not isinstance(text, str):
            return None
        try:
            obj = json.loads(text)
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        for name, value in obj.items():
            if not isinstance(value, str) or not syntax.is_qualified_name(name):
                return None
            amount = syntax.count(value)
            if amount is None:
                return None
            declared[name] = amount
    for key, value in annotations.items():
        if not isinstance(key, str) or not key.startswith(CAPACITY_PREFIX):
            continue
        name = key[len(CAPACITY_PREFIX):]
        amount = syntax.count(value) if isinstance(value, str) else None
        if not syntax.is_qualified_name(name) or amount is None:
            return None
        # "One resource declared in both forms with different values": values, so
        # "1k" and "1000" agree (a quantity is judged by its value, §2.2).
        if name in declared and declared[name] != amount:
            return None
        declared[name] = amount
    return declared


def _heartbeat(value: Any, iso8601: bool) -> Any:
    parsed = syntax.instant(value)
    if parsed is None and iso8601 and isinstance(value, str) and value:
        try:  # quirk: Python's ISO 8601 parser, as kruntimes uses it
            dt = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            return None
        parsed = syntax.instant(dt)
    return parsed


def read_pod(doc: dict[str, Any], quirks: frozenset[str] = frozenset()) -> dict[str, Any]:
    meta = _map(doc.get("metadata"))
    labels = _map(meta.get("labels"))
    annotations = _map(meta.get("annotations"))
    conditions = _map(doc.get("status")).get("conditions")
    ready = isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    uid = meta.get("uid")
    return {
        "namespace": namespace_of(meta),
        "name": meta.get("name"),
        "uid": uid if isinstance(uid, str) and uid else None,
        "runtime": labels.get(RUNTIME_LABEL),
        "ready": ready,
        "terminating": meta.get("deletionTimestamp") is not None,
        "heartbeat": _heartbeat(annotations.get(HEARTBEAT), "iso8601-heartbeats" in quirks),
        "capacity": read_capacity(annotations, "capacity-json-ignored" not in quirks),  # None: malformed
    }


# -- Runs -----------------------------------------------------------------------------

def _requests(spec: dict[str, Any], problems: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(validated request, counted request). Zero entries are dropped from both (§2.2)."""
    resources = spec.get("resources")
    if resources is not None and not isinstance(resources, dict):
        problems.append("spec.resources is not a mapping")
        resources = {}
    requests = _map(resources).get("requests")
    if requests is not None and not isinstance(requests, dict):
        problems.append("spec.resources.requests is not a mapping")
        requests = {}
    validated: dict[str, int] = {"runs": 1}
    counted: dict[str, int] = {"runs": 1}
    for name, value in _map(requests).items():
        amount = syntax.count(value)
        if not syntax.is_qualified_name(name):
            problems.append(f"resource name {name!r}")
            continue
        if amount is None:
            problems.append(f"request {name!r}")
            continue
        validated[name] = amount
        counted[name] = amount
    return ({k: v for k, v in validated.items() if v > 0}, {k: v for k, v in counted.items() if v > 0})


def _selector(sel: Any, problems: list[str], quirks: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """A label selector as {labels: {...}, exprs: [(key, op, set)]}; None is the missing one."""
    if sel is None:
        return None
    if not isinstance(sel, dict):
        problems.append("labelSelector is not a mapping")
        return None
    labels = sel.get("matchLabels")
    exprs = sel.get("matchExpressions")
    out: dict[str, Any] = {"labels": {}, "exprs": []}
    if labels is not None:
        if not isinstance(labels, dict):
            problems.append("matchLabels is not a mapping")
        else:
            for k, v in labels.items():
                if not syntax.is_qualified_name(k) or not syntax.is_label_value(v):
                    problems.append("matchLabels entry")
                out["labels"][k] = v
    if exprs is not None:
        if not isinstance(exprs, list):
            problems.append("matchExpressions is not a list")
            exprs = []
        for e in exprs:
            if not isinstance(e, dict):
                problems.append("matchExpressions entry is not a mapping")
                continue
            key, op, values = e.get("key"), e.get("operator"), e.get("values")
            if "null-as-malformed" in quirks and "values" in e and values is None:
                problems.append("values: null (quirk)")
            if values is None:
                values = []
            if not syntax.is_qualified_name(key):
                problems.append("matchExpressions key")
            if op not in OPERATORS:
                problems.append("matchExpressions operator")
            if not isinstance(values, list) or not all(syntax.is_label_value(v) for v in values):
                problems.append("matchExpressions values")
                values = []
            # Kubernetes (LabelSelectorAsSelector): In/NotIn need values, Exists/DoesNotExist take none.
            if op in ("In", "NotIn") and not values:
                problems.append("In/NotIn without values")
            if op in ("Exists", "DoesNotExist") and values:
                problems.append("Exists/DoesNotExist with values")
            out["exprs"].append((key, op, frozenset(values)))
    return out


def _term(term: Any, problems: list[str], quirks: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    if not isinstance(term, dict):
        problems.append("term is not a mapping")
        return None
    if term.get("topologyKey") != TOPOLOGY:
        problems.append("topologyKey")
    return _selector(term.get("labelSelector"), problems, quirks)


def _affinity(aff: Any, problems: list[str], quirks: frozenset[str] = frozenset()) -> dict[str, list[Any]]:
    """{required, required_anti, preferred, preferred_anti}: selectors, (weight, selector) pairs."""
    out: dict[str, list[Any]] = {"required": [], "required_anti": [], "preferred": [], "preferred_anti": []}
    if aff is None:
        return out
    if not isinstance(aff, dict):
        problems.append("spec.affinity is not a mapping")
        return out
    for field, suffix in (("runAffinity", ""), ("runAntiAffinity", "_anti")):
        rules = aff.get(field)
        if rules is None:
            continue
        if not isinstance(rules, dict):
            problems.append(f"{field} is not a mapping")
            continue
        required = rules.get("required")
        preferred = rules.get("preferred")
        if "null-as-malformed" in quirks and any(k in rules and rules[k] is None for k in ("required", "preferred")):
            problems.append("null list (quirk)")
        for term in required if isinstance(required, list) else []:
            out["required" + suffix].append(_term(term, problems, quirks))
        if required is not None and not isinstance(required, list):
            problems.append("required is not a list")
        for wt in preferred if isinstance(preferred, list) else []:
            if not isinstance(wt, dict):
                problems.append("preferred entry is not a mapping")
                continue
            weight = wt.get("weight")
            loose = "loose-weights" in quirks
            if loose and (isinstance(weight, (str, float)) and not isinstance(weight, bool)):
                try:  # quirk: pydantic's lax int
                    weight = int(weight) if float(weight) == int(float(weight)) and "e" not in str(weight) else weight
                except ValueError:
                    pass
            elif loose and isinstance(weight, bool):
                weight = int(weight)
            # The CRD says `type: integer, 1..100`: a bool or a string is not one (§2.2 amended).
            if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                problems.append("weight")
            out["preferred" + suffix].append((weight, _term(wt.get("term"), problems, quirks)))
        if preferred is not None and not isinstance(preferred, list):
            problems.append("preferred is not a list")
    return out


def read_run(doc: dict[str, Any], quirks: frozenset[str] = frozenset()) -> dict[str, Any]:
    meta = _map(doc.get("metadata"))
    raw_spec = doc.get("spec")
    spec = _map(raw_spec)
    status = _map(doc.get("status"))
    problems: list[str] = []
    if not isinstance(raw_spec, dict):
        problems.append("spec is not a mapping")
    runtime = spec.get("runtime")
    if not isinstance(runtime, str) or not runtime:
        problems.append("spec.runtime is required")
    validated, counted = _requests(spec, problems)
    affinity_problems: list[str] = []
    affinity = _affinity(spec.get("affinity"), affinity_problems, quirks)
    problems += affinity_problems
    mode = spec.get("mode")
    if mode is not None and (not isinstance(mode, dict) or sorted(mode) not in (["task"], ["function"])):
        problems.append("spec.mode must set exactly one of task or function")
    workspace = spec.get("workspace")
    if workspace is not None and not isinstance(workspace, str):
        problems.append("spec.workspace is not a string")
    assignment = _map(status.get("assignment"))
    phase = status.get("phase") or "Pending"
    labels = {k: v for k, v in _map(meta.get("labels")).items() if isinstance(k, str) and isinstance(v, str)}
    pod_name, pod_uid = assignment.get("podName"), assignment.get("podUID")
    return {
        "namespace": namespace_of(meta),
        "name": meta.get("name"),
        "created": meta.get("creationTimestamp"),
        "labels": labels,
        "runtime": runtime,
        "problems": problems,
        "request": validated,
        "counted": counted,
        # Judged one by one (§2.2): a malformed affinity is ignored as a whole.
        "affinity": affinity if not (affinity_problems or ("affinity-lost-with-spec" in quirks and problems))
        else _affinity(None, []),
        "workspace": workspace if isinstance(workspace, str) and workspace else None,
        "phase": phase,
        "pod_name": pod_name if isinstance(pod_name, str) and pod_name else None,
        "pod_uid": pod_uid if isinstance(pod_uid, str) and pod_uid else None,
        "released": status.get("released") is True,
        "deleting": meta.get("deletionTimestamp") is not None,
    }


def matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics: missing matches nothing, {} matches everything."""
    if selector is None:
        return False
    for k, v in selector["labels"].items():
        if labels.get(k) != v:
            return False
    for key, op, values in selector["exprs"]:
        if op == "In" and not (key in labels and labels[key] in values):
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in OPERATORS:
            return False
    return True
