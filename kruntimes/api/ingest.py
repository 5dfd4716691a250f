"""Turning Kubernetes objects into the planner's projections.

This is the one place where API objects (plain dicts as the client, YAML or the
emulator deliver them) meet the planner. A malformed object never raises here:
a Run whose spec breaks a rule becomes a projection with `problems` (PreFilter
then fails it with that message), and a pod with a bad capacity annotation
becomes a projection with a bounded `capacity_problem`. Metadata and status are
read leniently and separately from the spec, because an old active Run with a
malformed request must still count (as its `runs` default) against its pod.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Mapping

import pydantic

from kruntimes.api import models
from kruntimes.api.errors import describe_validation_error
from kruntimes.api.names import qualified_name_error
from kruntimes.api.quantity import InvalidQuantity, parse_count
from kruntimes.scheduler.projection import (NO_AFFINITY, Affinity, PodInfo, Requirement, RunInfo, Selector,
                                            Term, WeightedTerm, amounts)

log = logging.getLogger(__name__)

MALFORMED_CAPACITY = "malformed capacity annotation"


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime, or None when missing or unparsable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else None
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str_items(value: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in _mapping(value).items() if isinstance(k, str) and isinstance(v, str)))


def pod_info(obj: Mapping[str, Any]) -> PodInfo | None:
    """The projection of a Runtime Pod; None when the pod carries no runtime label."""
    meta = _mapping(obj.get("metadata"))
    labels = _mapping(meta.get("labels"))
    runtime = labels.get(models.RUNTIME_LABEL)
    if not isinstance(runtime, str) or not runtime:
        return None
    annotations = _mapping(meta.get("annotations"))
    capacity: dict[str, int] = {}
    problem = None
    for key in sorted(k for k in annotations if isinstance(k, str)):
        if not key.startswith(models.CAPACITY_ANNOTATION_PREFIX):
            continue
        resource = key[len(models.CAPACITY_ANNOTATION_PREFIX):]
        try:
            if qualified_name_error(resource) is not None:
                raise InvalidQuantity(f"resource name {resource!r} is not a qualified name")
            capacity[resource] = parse_count(annotations[key])
        except InvalidQuantity as exc:
            # Bounded reason on the projection; the detail goes to the log only.
            problem = MALFORMED_CAPACITY
            log.warning("runtime pod %s/%s: annotation %s: %s",
                        meta.get("namespace"), meta.get("name"), key, exc)
    status = _mapping(obj.get("status"))
    ready = any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    return PodInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        runtime=runtime,
        resource_version=str(meta.get("resourceVersion") or ""),
        ready=ready,
        terminating=meta.get("deletionTimestamp") is not None,
        heartbeat=parse_time(annotations.get(models.HEARTBEAT_ANNOTATION)),
        capacity=tuple(sorted(capacity.items())),
        capacity_problem=problem,
    )


def run_info(obj: Mapping[str, Any]) -> RunInfo:
    """The projection of a Run; validation problems are carried, never raised."""
    meta = _mapping(obj.get("metadata"))
    raw_spec = obj.get("spec")
    status = _mapping(obj.get("status"))
    problems: list[str] = []
    spec: models.RunSpec | None = None
    try:
        # Validated inside a Run so that messages carry the user's full path
        # (spec.resources...); metadata is checked leniently on its own below.
        spec = models.Run.model_validate({"metadata": {"name": "-"}, "spec": raw_spec}).spec
    except pydantic.ValidationError as exc:
        problems.append(describe_validation_error(exc, kind="Run").removeprefix("invalid Run: "))
    labels = _str_items(meta.get("labels"))
    if spec is not None:
        runtime = spec.runtime
        requests = amounts(spec.resources.requests)
        affinity = _affinity(spec.affinity)
        workspace = spec.workspace
    else:
        raw = _mapping(raw_spec)
        runtime = raw.get("runtime") if isinstance(raw.get("runtime"), str) else ""
        requests = _lenient_requests(raw)
        affinity = NO_AFFINITY
        workspace = raw.get("workspace") if isinstance(raw.get("workspace"), str) else None
    assignment = _mapping(status.get("assignment"))
    phase = status.get("phase") if status.get("phase") in ("Pending", "Scheduled", "Running",
                                                            "Succeeded", "Failed") else "Pending"
    pending = next((c.get("message") for c in status.get("conditions") or []
                    if isinstance(c, Mapping) and c.get("type") == "Scheduled" and c.get("status") == "False"),
                   None)
    return RunInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        runtime=runtime or "",
        resource_version=str(meta.get("resourceVersion") or ""),
        labels=labels,
        requests=requests,
        affinity=affinity,
        workspace=workspace,
        phase=phase,
        pod_name=assignment.get("podName") if isinstance(assignment.get("podName"), str) else None,
        pod_uid=assignment.get("podUID") if isinstance(assignment.get("podUID"), str) else None,
        released=status.get("released") is True,
        deleting=meta.get("deletionTimestamp") is not None,
        created=str(meta.get("creationTimestamp") or ""),
        pending_message=pending if isinstance(pending, str) else None,
        problems=tuple(problems),
    )


def _lenient_requests(raw_spec: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """What an active Run with a malformed spec still counts: `runs` default plus valid entries."""
    requests = _mapping(_mapping(raw_spec.get("resources")).get("requests"))
    counted: dict[str, int] = {"runs": 1}
    for name, value in requests.items():
        if not isinstance(name, str) or qualified_name_error(name) is not None:
            continue
        try:
            counted[name] = parse_count(value)
        except InvalidQuantity:
            continue
    return amounts(counted)


def _selector(sel: models.LabelSelector | None) -> Selector | None:
    if sel is None:
        return None
    return Selector(
        match_labels=tuple(sorted((sel.match_labels or {}).items())),
        match_expressions=tuple(Requirement(key=r.key, operator=r.operator, values=tuple(sorted(r.values or [])))
                                for r in (sel.match_expressions or [])),
    )


def _affinity(spec: models.RunAffinitySpec | None) -> Affinity:
    if spec is None:
        return NO_AFFINITY
    pos, neg = spec.run_affinity, spec.run_anti_affinity

    def terms(rules: models.RunAffinityRules | None) -> tuple[Term, ...]:
        return tuple(Term(_selector(t.label_selector)) for t in (rules.required if rules else []))

    def weighted(rules: models.RunAffinityRules | None) -> tuple[WeightedTerm, ...]:
        return tuple(WeightedTerm(w.weight, Term(_selector(w.term.label_selector)))
                     for w in (rules.preferred if rules else []))

    return Affinity(required=terms(pos), required_anti=terms(neg), preferred=weighted(pos),
                    preferred_anti=weighted(neg))
