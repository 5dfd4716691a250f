"""API objects into the reconcile step's inputs, validated by the project's own models (SPEC §2.1, §4.2).

The capacity of a Runtime is judged exactly as the API layer judges it (the same
pydantic model the CRD is generated from), and a problem is kept as that layer's
message, which names the field and says what a valid value looks like. Pods and
Runs are read leniently: a field that is missing or of the wrong type reads as
absent, never as an exception in the controller's loop.
"""

from __future__ import annotations

from typing import Any, Mapping

import pydantic

from kruntimes.api import ingest, models
from kruntimes.api.errors import describe_validation_error
from kruntimes.controller import template as templates
from kruntimes.devices import runtime_spec
from kruntimes.controller.reconcile import ActiveRun, RuntimePod, RuntimeSpecView


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def runtime_view(obj: Mapping[str, Any]) -> RuntimeSpecView:
    """A Runtime; an invalid `spec.capacity` becomes `capacity_problem`, never a partial capacity."""
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    capacity: dict[str, int] | None = None
    problem: str | None = None
    try:
        only_capacity = {"template": {}, **({"capacity": spec["capacity"]} if "capacity" in spec else {})}
        # Validated under its own name: a name the label cannot carry is a problem to report too.
        checked = models.Runtime.model_validate({"metadata": {"name": str(meta.get("name") or "")},
                                                 "spec": only_capacity})
        capacity = dict(checked.spec.capacity.resources)
    except pydantic.ValidationError as exc:
        problem = describe_validation_error(exc, kind="Runtime").removeprefix("invalid Runtime: ")
    devices, devices_text, devices_problem, device_env, discover = _devices(spec)
    replicas = spec.get("replicas", 1)
    conditions = _mapping(obj.get("status")).get("conditions")
    return RuntimeSpecView(
        namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""), generation=int(meta.get("generation") or 0),
        replicas=replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 0 else 0,
        template=_mapping(spec.get("template")), capacity=capacity, capacity_problem=problem,
        conditions=tuple(c for c in conditions or [] if isinstance(c, Mapping)),
        template_problem=templates.problem(spec.get("template", {})),
        devices=devices, devices_text=devices_text, devices_problem=devices_problem, device_env_text=device_env,
        device_discover_text=discover,
    )


def _devices(spec: Mapping[str, Any]) -> tuple[str, str | None, str | None, str | None, str | None]:
    """How the Runtime's pods get their inventory (SPEC §7.1): kind, annotation text, problem, env text,
    and runtimed's discover text (publisher Runtimed).

    Judged by `kruntimes.devices.runtime_spec`, the parser the API model runs too, so the
    condition says what `kubectl apply` would have said.
    """
    if spec.get("devices") is None:
        return "none", None, None, None, None
    try:
        parsed = runtime_spec.parse(spec["devices"])
    except runtime_spec.InvalidRuntimeDevices as exc:
        return "invalid", None, str(exc), None, None
    env = runtime_spec.env_text(parsed.env)
    if parsed.publisher == "Runtimed":
        return "runtimed", None, None, env, runtime_spec.discover_text(parsed)
    assert parsed.inventory is not None
    return "controller", parsed.inventory.text, None, env, None


def runtime_pod(obj: Mapping[str, Any], runtime_uid: str) -> RuntimePod:
    """A pod labelled for the Runtime; `owned` when the Runtime is its controller."""
    meta, status = _mapping(obj.get("metadata")), _mapping(obj.get("status"))
    owned = any(isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("uid") == runtime_uid
                for ref in meta.get("ownerReferences") or [])
    ready = any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    annotations = {k: v for k, v in _mapping(meta.get("annotations")).items()
                   if isinstance(k, str) and isinstance(v, str)}
    return RuntimePod(name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""), owned=owned,
                      phase=str(status.get("phase") or "Pending"), ready=ready,
                      terminating=meta.get("deletionTimestamp") is not None,
                      created=str(meta.get("creationTimestamp") or ""), annotations=annotations)


def active_run(obj: Mapping[str, Any]) -> ActiveRun | None:
    """The Run when it is active (Scheduled or Running, assigned, not released), else None."""
    info = ingest.run_info(obj)
    if not info.active or info.pod_name is None:
        return None
    return ActiveRun(namespace=info.namespace, name=info.name, uid=info.uid, pod_name=info.pod_name,
                     pod_uid=info.pod_uid, resource_version=info.resource_version)
