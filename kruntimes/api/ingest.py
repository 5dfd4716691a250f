"""Turning Kubernetes objects into the planner's projections.

This is the one place where API objects (plain dicts as the client, YAML or the
emulator deliver them) meet the planner, and the live informer calls it too, so
nothing here may raise, whatever the object holds: a Run whose spec breaks a rule
becomes a projection with `problems` (PreFilter then fails it with that message),
and a pod with malformed capacity annotations (SPEC §2.1, read by `capacity`)
becomes a projection with a bounded `capacity_problem`.

Metadata and status are read leniently and separately from the spec. An old active
Run's spec parts are judged one by one (SPEC §2.2): each malformed request entry
counts as nothing (a malformed or missing `runs` counts as 1), a malformed affinity
is ignored as a whole while a valid one applies even when the requests are
malformed, and its labels always make it a target.
"""

from __future__ import annotations

import logging
from datetime import date
from typing import Any, Mapping

import pydantic

from kruntimes import wire
from kruntimes.api import capacity as capacity_annotations
from kruntimes.api import device_models
from kruntimes.api import models
from kruntimes.api.errors import describe_validation_error
from kruntimes.api.names import qualified_name_error
from kruntimes.api.quantity import InvalidQuantity, parse_count
from kruntimes.devices import inventory_codec
from kruntimes.scheduler import status as status_bodies
from kruntimes.scheduler import validation as bounds
from kruntimes.scheduler.projection import (NO_AFFINITY, Affinity, PodInfo, Requirement, RunInfo, Selector,
                                            Term, WeightedTerm, amounts)

log = logging.getLogger(__name__)

#: An RFC 3339 time in an object, or None (runtimed and the simulator read theirs through ingest too).
parse_time = wire.parse_rfc3339

#: The common start of every bounded capacity reason (`capacity.PROBLEMS`).
MALFORMED_CAPACITY = capacity_annotations.MALFORMED
#: The problem of a spec the models could not even judge (never expected; logged).
UNREADABLE_SPEC = "spec could not be read; check that it is a mapping of the documented fields"

_AFFINITY = pydantic.TypeAdapter(models.RunAffinitySpec)
_RUNTIME = pydantic.TypeAdapter(models.RuntimeName)
_WORKSPACE = pydantic.TypeAdapter(models.WorkspaceName)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any, default: str = "") -> str:
    """A metadata string; a number or time (unquoted YAML) as its text; anything else `default`."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, date)) and not isinstance(value, bool):
        try:
            return str(value)
        except ValueError:  # an int past Python's 4,300-digit conversion limit
            return default
    return default


def _str_items(value: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in _mapping(value).items() if isinstance(k, str) and isinstance(v, str)))


def pod_info(obj: Any) -> PodInfo | None:
    """The projection of a Runtime Pod; None when the pod carries no runtime label."""
    meta = _mapping(_mapping(obj).get("metadata"))
    labels = _mapping(meta.get("labels"))
    runtime = labels.get(models.RUNTIME_LABEL)
    if not isinstance(runtime, str) or not runtime:
        return None
    annotations = _mapping(meta.get("annotations"))
    reading = capacity_annotations.read(annotations)
    if reading.problem is not None:
        # Bounded reason on the projection; the detail goes to the log only.
        log.warning("runtime pod %s/%s: %s", _text(meta.get("namespace"))[:253], _text(meta.get("name"))[:253],
                    reading.detail)
    status = _mapping(_mapping(obj).get("status"))
    ready = any(isinstance(c, Mapping) and c.get("type") == wire.CONDITION_READY and c.get("status") == "True"
                for c in _list(status.get("conditions")))
    return PodInfo(
        namespace=_text(meta.get("namespace")) or "default",
        name=_text(meta.get("name")),
        uid=_text(meta.get("uid")),
        runtime=runtime,
        resource_version=_text(meta.get("resourceVersion")),
        ready=ready,
        terminating=meta.get("deletionTimestamp") is not None,
        heartbeat=parse_time(annotations.get(models.HEARTBEAT_ANNOTATION)),
        capacity=tuple(sorted(reading.resources.items())),
        capacity_problem=reading.problem,
        devices=_device_annotation(annotations.get(device_models.DEVICES_ANNOTATION)),
    )


def _device_annotation(value: Any) -> str | None:
    """The inventory annotation, cut one byte past its bound (SPEC §7.1) so a huge one is kept small and still malformed."""
    if not isinstance(value, str):
        return None if value is None else ""
    return value if len(value) <= inventory_codec.MAX_TEXT_BYTES else value[:inventory_codec.MAX_TEXT_BYTES + 1]


def run_info(obj: Any) -> RunInfo:
    """The projection of a Run; validation problems are carried, never raised."""
    meta = _mapping(_mapping(obj).get("metadata"))
    raw_spec = _mapping(obj).get("spec")
    status = _mapping(_mapping(obj).get("status"))
    problems: list[str] = []
    spec = _validated_spec(raw_spec, problems)
    if spec is not None:
        runtime = spec.runtime
        requests = amounts(spec.resources.requests)
        affinity = _affinity(spec.affinity)
        workspace = spec.workspace
    else:
        raw = _mapping(raw_spec)
        runtime = _valid(_RUNTIME, raw.get("runtime")) or ""
        requests = _lenient_requests(raw)
        affinity = _lenient_affinity(raw)
        workspace = _valid(_WORKSPACE, raw.get("workspace"))
    assignment = _mapping(status.get("assignment"))
    phase = status.get("phase")
    pending = next((c.get("message") for c in _list(status.get("conditions")) if isinstance(c, Mapping)
                    and c.get("type") == wire.CONDITION_SCHEDULED and c.get("status") == "False"), None)
    phase = phase if isinstance(phase, str) and phase in wire.PHASES else wire.PENDING
    ended = status_bodies.ended(phase, status.get("conditions"))
    return RunInfo(
        namespace=_text(meta.get("namespace")) or "default",
        name=_text(meta.get("name")),
        uid=_text(meta.get("uid")),
        runtime=runtime,
        resource_version=_text(meta.get("resourceVersion")),
        labels=_str_items(meta.get("labels")),
        requests=requests,
        affinity=affinity,
        workspace=workspace,
        phase=phase,
        pod_name=assignment.get("podName") if isinstance(assignment.get("podName"), str) else None,
        pod_uid=assignment.get("podUID") if isinstance(assignment.get("podUID"), str) else None,
        released=status.get("released") is True,
        deleting=meta.get("deletionTimestamp") is not None,
        created=_text(meta.get("creationTimestamp")),
        pending_message=pending if isinstance(pending, str) else None,
        problems=tuple(problems),
        end_reason=ended[0] if ended else None,
        end_message=ended[1] if ended else None,
        devices=_canonical(_mapping(raw_spec).get("devices")) if spec is not None and spec.devices else None,
        device_results=_canonical(status.get("devices")) if isinstance(status.get("devices"), Mapping) else None,
    )


def _canonical(value: Any) -> str | None:
    """Canonical JSON of a device claim or result as written (SPEC §7.6); None when it cannot be encoded."""
    try:
        return inventory_codec.canonical_text(value)
    except (TypeError, ValueError, RecursionError):  # this module never raises, whatever the object holds
        return None


def _validated_spec(raw_spec: Any, problems: list[str]) -> models.RunSpec | None:
    try:
        # Validated inside a Run so that messages carry the user's full path
        # (spec.resources...); metadata is checked leniently on its own.
        return models.Run.model_validate({"metadata": {"name": "-"}, "spec": raw_spec}).spec
    except pydantic.ValidationError as exc:
        problems.append(describe_validation_error(exc, kind="Run").removeprefix("invalid Run: "))
    except (TypeError, ValueError, RecursionError):
        # Not expected from the models; caught so that one odd object cannot stop the informer.
        log.exception("a Run spec could not be validated")
        problems.append(UNREADABLE_SPEC)
    return None


def _valid(adapter: pydantic.TypeAdapter[Any], value: Any) -> Any:
    """``value`` if it passes ``adapter``, else None: one part judged on its own."""
    if value is None:
        return None
    try:
        return adapter.validate_python(value)
    except (pydantic.ValidationError, TypeError, ValueError, RecursionError):
        return None


def _lenient_requests(raw_spec: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """What a Run with a malformed spec counts: each valid entry, and `runs` 1 unless validly given.

    A map over the bound of `bounds.MAX_RESOURCES` entries (one made before the CRD had
    that bound) is judged by its `runs` entry alone, so the projection stays bounded.
    """
    requests = _mapping(_mapping(raw_spec.get("resources")).get("requests"))
    if len(requests) > bounds.MAX_RESOURCES:
        requests = {models.RUNS_RESOURCE: requests[models.RUNS_RESOURCE]} if models.RUNS_RESOURCE in requests else {}
    counted: dict[str, int] = {models.RUNS_RESOURCE: 1}
    for name, value in requests.items():
        if not isinstance(name, str) or qualified_name_error(name) is not None:
            continue
        try:
            counted[name] = parse_count(value)
        except InvalidQuantity:
            continue
    return amounts(counted)


def _lenient_affinity(raw_spec: Mapping[str, Any]) -> Affinity:
    """The affinity of a Run whose spec is malformed elsewhere: valid as a whole, or none."""
    spec = _valid(_AFFINITY, raw_spec.get("affinity"))
    return _affinity(spec) if isinstance(spec, models.RunAffinitySpec) else NO_AFFINITY


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
