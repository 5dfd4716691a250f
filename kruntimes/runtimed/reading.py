"""API objects into the admission guard's inputs, through the project's own readers (SPEC §2.1, §2.2, §4.1).

runtimed must count a Run's request and a pod's capacity exactly as the scheduler
does, or the two guards would disagree about what fits. So nothing is parsed here:
requests come from `kruntimes.api.ingest.run_info` (validated, or the lenient
reading that an old active Run with a malformed entry still counts) and capacity
from `kruntimes.api.ingest.pod_info` (every capacity annotation form it accepts),
plus the same default `runs` capacity the scheduler applies. Devices (SPEC §7.7) are
read by `runtimed.devices`, through `kruntimes.devices`' own parsers.
"""

from __future__ import annotations

from typing import Any, Mapping

import pydantic

from kruntimes.api import ingest, models
from kruntimes.runtimed import devices
from kruntimes.runtimed.admission import AssignedRun, Capacity
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.views import effective_capacity

NOT_A_RUNTIME_POD = "the pod carries no kruntimes.io/runtime label, so it declares no capacity"


def pod_capacity(pod: Mapping[str, Any], default_runs_capacity: int = 1) -> Capacity:
    """The pod's effective capacity; a malformed annotation is a problem, never a guess."""
    info = ingest.pod_info(pod)
    if info is None:
        return Capacity(problem=NOT_A_RUNTIME_POD)
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    pod_devices = devices.pod_devices(annotations if isinstance(annotations, Mapping) else {}, devices.device_env(pod))
    if info.capacity_problem is not None:
        return Capacity(problem=info.capacity_problem, devices=pod_devices)
    # Zero capacities are kept: a declared 0 admits no positive request (SPEC §2.3).
    return Capacity(tuple(sorted(effective_capacity(info, default_runs_capacity).items())), devices=pod_devices)


def assigned_run(run: Mapping[str, Any]) -> tuple[AssignedRun, RunInfo]:
    """The guard's view of a Run, and the full projection (phase, problems) beside it."""
    info = ingest.run_info(run)
    return AssignedRun(
        namespace=info.namespace, name=info.name, uid=info.uid, requests=info.requests,
        pod_name=info.pod_name, pod_uid=info.pod_uid, assigned_at=_assigned_at(run),
        resource_version=info.resource_version, devices=devices.run_devices(run),
    ), info


def execution_mode(run: Mapping[str, Any]) -> tuple[str, list[str] | None] | None:
    """("task", args) or ("function", args or None) from `spec.mode`; None when there is nothing to execute.

    A function's settings belong to the Runtime Server; the one runtimed uses is an
    optional `args` list, the process kept until the Run is released.
    """
    try:
        mode = models.Run.model_validate({"metadata": {"name": "-"}, "spec": run.get("spec")}).spec.mode
    except pydantic.ValidationError:
        return None
    if mode is None:
        return None
    if mode.task is not None:
        return "task", list(mode.task.args)
    args = (mode.function.model_extra or {}).get("args") if mode.function is not None else None
    if isinstance(args, list) and args and all(isinstance(a, str) for a in args):
        return "function", list(args)
    return "function", None


def _assigned_at(run: Mapping[str, Any]) -> Any:
    """When the scheduler assigned the Run: its `Scheduled=True` condition's transition time."""
    status = run.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == "Scheduled" \
                and condition.get("status") == "True":
            return ingest.parse_time(condition.get("lastTransitionTime"))
    return None
