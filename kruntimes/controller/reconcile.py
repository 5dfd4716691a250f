"""The Runtime controller's decision: from one Runtime and its pods, what to change (SPEC §2.1, §4.2).

One pure function, `reconcile`, computes the whole desired change for a Runtime as
a `Plan`: pods to create from the template, pods to delete, capacity annotations to
re-project onto existing pods, active Runs whose pod is gone (to end Failed with
`RuntimePodLost`), and the Runtime's status. The adapter reads the inputs from its
caches and carries the plan out; keeping the decision pure makes every rule a table
test and keeps the Kubernetes client out of it (the layering test checks).

Rules:
- `spec.replicas` live pods: a pod that is terminating, Succeeded or Failed does not
  count (as a ReplicaSet's "active pods"); a finished pod is deleted and replaced.
  Pods created but not yet seen in the cache count, so a lagging cache never causes
  a second create (kube's controller expectations, reduced to a number).
- Scale down deletes idle pods first: fewest active Runs, then not Ready before
  Ready, then newest, then name (deterministic).
- New pods: `generateName: <runtime>-`, a controller owner reference to the Runtime
  (deletion cascades), the label `kruntimes.io/runtime`, the capacity as ONE JSON
  annotation with sorted keys (§2.1), a `runtimed` container that has its pod's
  identity from the downward API, and the Runs' `runtime` container beside it, the
  API token in runtimed's only (`tenancy`).
- Capacity changes are re-projected as an annotation merge patch; seed-style
  per-resource keys are removed, since the reader would union them with the JSON.
- Devices (SPEC §7.1) with `publisher: Controller` are projected like capacity, as
  the canonical `kruntimes.io/devices` annotation, in the same patch; a Runtime that
  declares no devices has the annotation removed; with `publisher: Runtimed` it is
  runtimed's and left alone (never written, never removed): runtimed gets the `discover`
  argv and the driver as `KRUNTIMES_DEVICE_DISCOVER` in its container's env, and
  publishes what it finds on its own pod. The env mapping reaches runtimed (which reads no Runtime;
  §7.7) as `KRUNTIMES_DEVICE_ENV` in its container's env, for either publisher: the
  SPEC's annotations are the inventory alone (§2.1, §7.1), so a mapping changed later
  applies to pods created after it, and the annotation earlier controllers wrote is
  removed. Invalid devices: no pod is created and no pod annotation is touched, and
  the `DevicesValid` condition says what to fix.
- Invalid capacity (the reader says what is wrong): no pod is created and no pod
  annotation is touched; the `CapacityValid` condition says what to fix.
- A template whose shape the controller cannot build pods from (`template.problem`):
  no pod is created; the `TemplateValid` condition says what to fix. Fields it does
  not know are left for the API server to judge.
- A Run is lost when the pod its assignment names (by UID; by name when the
  assignment has no UID) is not among the Runtime's pods. The adapter confirms with a
  direct read before failing it: a pod the cache has not seen yet is not lost.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from kruntimes import wire
from kruntimes.controller import template as templates
from kruntimes.controller import tenancy
from kruntimes.devices import runtime_spec
from kruntimes.scheduler.status import set_condition
from kruntimes.wire import (API_VERSION, CAPACITY_ANNOTATION, CAPACITY_ANNOTATION_PREFIX, DEVICES_ANNOTATION,
                            HEARTBEAT_ANNOTATION, LEGACY_DEVICE_ENV_ANNOTATION, RUNTIME_LABEL)

DEVICE_ENV_VARIABLE = runtime_spec.DEVICE_ENV_VARIABLE
DEVICE_DISCOVER_VARIABLE = runtime_spec.DEVICE_DISCOVER_VARIABLE
RUNTIMED_CONTAINER = "runtimed"
WORK_VOLUME = "kruntimes-work"
WORK_DIR = "/var/lib/kruntimes/runs"
#: runtimed's own files (Run ends not yet written, pid files): an emptyDir outlives a runtimed restart, and
#: only the runtimed container mounts it.
STATE_VOLUME = "kruntimes-runtimed-state"
STATE_DIR = "/var/lib/kruntimes/runtimed"
#: Downward-API environment every runtimed gets (SPEC §4.1: it knows its own pod).
POD_ENV = (("KRUNTIMES_POD_NAME", "metadata.name"), ("KRUNTIMES_POD_NAMESPACE", "metadata.namespace"),
           ("KRUNTIMES_POD_UID", "metadata.uid"))

REASON_POD_LOST = "RuntimePodLost"
CONDITION_CAPACITY = wire.CONDITION_CAPACITY_VALID
CONDITION_AVAILABLE = wire.CONDITION_AVAILABLE
CONDITION_DEVICES = wire.CONDITION_DEVICES_VALID


@dataclass(frozen=True, slots=True)
class RuntimeSpecView:
    """One Runtime as the controller needs it; `capacity` is None when `capacity_problem` says why,
    and no pod is built from `template` while `template_problem` says why not (`template.problem`)."""

    namespace: str
    name: str
    uid: str
    generation: int
    replicas: int
    template: Mapping[str, Any]
    capacity: Mapping[str, int] | None
    capacity_problem: str | None = None
    conditions: tuple[Mapping[str, Any], ...] = ()  # the current status conditions, to keep transition times
    template_problem: str | None = None
    # SPEC §7.1: "none" (no spec.devices: the annotation is removed), "controller" (project
    # `devices_text`), "runtimed" (runtimed publishes; left alone), or "invalid" (`devices_problem`).
    devices: str = "none"
    devices_text: str | None = None
    devices_problem: str | None = None
    device_env_text: str | None = None  # runtimed's `KRUNTIMES_DEVICE_ENV`, either publisher; None: no mapping
    device_discover_text: str | None = None  # runtimed's `KRUNTIMES_DEVICE_DISCOVER`, publisher Runtimed only


@dataclass(frozen=True, slots=True)
class RuntimePod:
    """One pod labelled for the Runtime; only `owned` pods (controller reference) are managed."""

    name: str
    uid: str
    owned: bool = True
    phase: str = "Pending"
    ready: bool = False
    terminating: bool = False
    created: str = ""  # RFC 3339; newer pods go first on scale down
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return not self.terminating and self.phase not in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class ActiveRun:
    """A Scheduled or Running (not released) Run of this Runtime, with its assignment."""

    namespace: str
    name: str
    uid: str
    pod_name: str
    pod_uid: str | None
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class LostRun:
    run: ActiveRun
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    create: tuple[dict[str, Any], ...] = ()
    delete: tuple[RuntimePod, ...] = ()
    patch: tuple[tuple[RuntimePod, dict[str, Any]], ...] = ()
    lost: tuple[LostRun, ...] = ()
    status: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodDefaults:
    """What the controller adds when the template lacks it."""

    runtimed_image: str = "ghcr.io/kruntimes/kruntimes:0.1.0"
    max_creates: int = 50  # per pass, so a typo like replicas: 10000 ramps up instead of flooding


def capacity_annotation(capacity: Mapping[str, int]) -> str:
    """The JSON form of SPEC §2.1: sorted keys, quantities as strings, no spaces (idempotent)."""
    return json.dumps({name: str(amount) for name, amount in capacity.items()}, sort_keys=True,
                      separators=(",", ":"))


def reconcile(runtime: RuntimeSpecView, pods: list[RuntimePod], runs: list[ActiveRun], now: datetime, *,
              unobserved_creates: int = 0, defaults: PodDefaults = PodDefaults()) -> Plan:
    """Everything that should change for `runtime`, given its pods and its active Runs."""
    owned = [p for p in pods if p.owned]
    live = sorted((p for p in owned if p.live), key=lambda p: p.name)
    finished = sorted((p for p in owned if not p.terminating and not p.live), key=lambda p: p.name)
    busy = _active_counts(runs, pods)

    # 1. Scale: create the missing, delete the surplus (idle first) and the finished.
    missing = runtime.replicas - len(live) - unobserved_creates
    creates: list[dict[str, Any]] = []
    if missing > 0 and runtime.capacity is not None and runtime.template_problem is None \
            and runtime.devices != "invalid":
        creates = [pod_body(runtime, runtime.capacity, defaults) for _ in range(min(missing, defaults.max_creates))]
    surplus = max(len(live) - runtime.replicas, 0)
    victims = sorted(live, key=lambda p: (busy.get(p.uid, 0), p.ready, _newest_first(p.created), p.name))[:surplus]
    deletes = tuple(finished) + tuple(sorted(victims, key=lambda p: p.name))

    # 2. Re-project capacity and devices onto the pods that stay, in one patch per pod.
    patches: list[tuple[RuntimePod, dict[str, Any]]] = []
    staying = [p for p in live if p not in victims]
    for pod in staying:
        changes = dict(devices_changes(pod, runtime))
        if runtime.capacity is not None:
            changes.update((capacity_patch(pod, runtime.capacity) or {"metadata": {"annotations": {}}})
                           ["metadata"]["annotations"])
        if changes:
            patches.append((pod, {"metadata": {"annotations": dict(sorted(changes.items()))}}))

    # 3. Runs whose pod is gone.
    lost = tuple(LostRun(run, REASON_POD_LOST, _lost_message(run)) for run in sorted(runs, key=lambda r: r.name)
                 if _pod_of(run, pods) is None)

    status = runtime_status(runtime, live, now)
    return Plan(tuple(creates), deletes, tuple(patches), lost, status)


def pod_body(runtime: RuntimeSpecView, capacity: Mapping[str, int], defaults: PodDefaults) -> dict[str, Any]:
    """A new Runtime Pod from the template, with everything kruntimes owns set (SPEC §4.2)."""
    template = copy.deepcopy(dict(runtime.template))
    meta = dict(template.get("metadata") or {})
    labels = {**(meta.get("labels") or {}), RUNTIME_LABEL: runtime.name}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if not _owned_annotation(k)}
    annotations[CAPACITY_ANNOTATION] = capacity_annotation(capacity)
    if runtime.devices == "controller" and runtime.devices_text is not None:
        annotations[DEVICES_ANNOTATION] = runtime.devices_text
    spec = dict(template.get("spec") or {})
    spec["containers"] = _with_runtimed([dict(c) for c in spec.get("containers") or []], defaults,
                                        runtime.device_env_text, runtime.device_discover_text)
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") not in (WORK_VOLUME, STATE_VOLUME)]
    spec["volumes"] = volumes + [{"name": WORK_VOLUME, "emptyDir": {}}, {"name": STATE_VOLUME, "emptyDir": {}}]
    tenancy.split(spec, runtimed=RUNTIMED_CONTAINER, work_volume=WORK_VOLUME, work_dir=WORK_DIR)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": f"{runtime.name}-", "namespace": runtime.namespace,
            "labels": dict(sorted(labels.items())), "annotations": dict(sorted(annotations.items())),
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Runtime", "name": runtime.name,
                                 "uid": runtime.uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
    }


def capacity_patch(pod: RuntimePod, capacity: Mapping[str, int]) -> dict[str, Any] | None:
    """A JSON merge patch that makes `pod` declare `capacity`; None when it already does."""
    wanted = capacity_annotation(capacity)
    changes: dict[str, Any] = {k: None for k in sorted(pod.annotations) if k.startswith(CAPACITY_ANNOTATION_PREFIX)}
    if pod.annotations.get(CAPACITY_ANNOTATION) != wanted:
        changes[CAPACITY_ANNOTATION] = wanted
    return {"metadata": {"annotations": changes}} if changes else None


def devices_changes(pod: RuntimePod, runtime: RuntimeSpecView) -> dict[str, str | None]:
    """The annotation changes that make `pod` carry the Runtime's projected inventory (SPEC §7.1)."""
    if runtime.devices == "invalid":
        return {}
    changes: dict[str, str | None] = {}
    current = pod.annotations.get(DEVICES_ANNOTATION)
    if runtime.devices == "controller" and current != runtime.devices_text:
        changes[DEVICES_ANNOTATION] = runtime.devices_text
    if runtime.devices == "none" and current is not None:
        changes[DEVICES_ANNOTATION] = None
    if LEGACY_DEVICE_ENV_ANNOTATION in pod.annotations:  # an earlier controller's; the mapping is in runtimed's env
        changes[LEGACY_DEVICE_ENV_ANNOTATION] = None
    return changes


def runtime_status(runtime: RuntimeSpecView, live: list[RuntimePod], now: datetime) -> dict[str, Any]:
    """Runtime.status: counts, observedGeneration and conditions that keep their transition times."""
    ready = sum(1 for p in live if p.ready)
    conditions = [dict(c) for c in runtime.conditions]
    if runtime.capacity_problem is not None:
        conditions = set_condition(conditions, CONDITION_CAPACITY, "False", "InvalidCapacity",
                                   f"{runtime.capacity_problem}; no Runtime Pod is created or re-projected "
                                   f"until spec.capacity.resources is fixed", now)
    else:
        conditions = set_condition(conditions, CONDITION_CAPACITY, "True", "Valid",
                                   "capacity is projected onto every Runtime Pod", now)
    conditions = _template_condition(runtime, conditions, len(live), now)
    conditions = _devices_condition(runtime, conditions, now)
    if ready >= runtime.replicas:
        conditions = set_condition(conditions, CONDITION_AVAILABLE, "True", "ReplicasReady",
                                   f"{ready} of {runtime.replicas} runtime pods ready", now)
    else:
        conditions = set_condition(conditions, CONDITION_AVAILABLE, "False", "ReplicasNotReady",
                                   f"{ready} of {runtime.replicas} runtime pods ready", now)
    for condition in conditions:
        condition["observedGeneration"] = runtime.generation
    return {"replicas": len(live), "readyReplicas": ready, "observedGeneration": runtime.generation,
            "conditions": conditions}


def _template_condition(runtime: RuntimeSpecView, conditions: list[dict[str, Any]], live: int,
                        now: datetime) -> list[dict[str, Any]]:
    """`TemplateValid`: False while the template cannot be built, or while the server refuses this
    generation's pods (set by `apply`); else True.

    A refusal stands while pods are missing: until a create is taken (`apply` says so in the
    same status write), the spec changes, or every wanted pod is live. The last is what clears
    it when the status write after the create that was taken is lost: no later pass creates
    anything, and the condition would otherwise stay False for good."""
    if runtime.template_problem is not None:
        return set_condition(conditions, templates.CONDITION_TEMPLATE, "False", templates.REASON_INVALID,
                             templates.bounded(f"{runtime.template_problem}; no Runtime Pod is created until "
                                               f"spec.template is fixed"), now)
    refused = next((c for c in conditions if c.get("type") == templates.CONDITION_TEMPLATE
                    and c.get("reason") == templates.REASON_REFUSED
                    and c.get("observedGeneration") == runtime.generation), None)
    if refused is not None and live < runtime.replicas:
        return conditions
    return set_condition(conditions, templates.CONDITION_TEMPLATE, "True", templates.REASON_VALID,
                         "Runtime Pods are created from spec.template", now)


def _devices_condition(runtime: RuntimeSpecView, conditions: list[dict[str, Any]],
                       now: datetime) -> list[dict[str, Any]]:
    """`DevicesValid`, only for a Runtime that declares devices (others keep the conditions they had)."""
    if runtime.devices == "none":
        return [c for c in conditions if c.get("type") != CONDITION_DEVICES]
    if runtime.devices_problem is not None:
        return set_condition(conditions, CONDITION_DEVICES, "False", "InvalidDevices",
                             templates.bounded(f"{runtime.devices_problem}; no Runtime Pod is created and no "
                                               f"inventory re-projected until spec.devices is fixed"), now)
    how = ("projected onto every Runtime Pod" if runtime.devices == "controller"
           else "published by runtimed in each Runtime Pod")
    return set_condition(conditions, CONDITION_DEVICES, "True", "Valid", f"the device inventory is {how}", now)


def _with_runtimed(containers: list[dict[str, Any]], defaults: PodDefaults,
                   device_env: str | None = None, device_discover: str | None = None) -> list[dict[str, Any]]:
    runtimed = next((c for c in containers if c.get("name") == RUNTIMED_CONTAINER), None)
    if runtimed is None:
        runtimed = {"name": RUNTIMED_CONTAINER, "image": defaults.runtimed_image}
        containers.append(runtimed)
    runtimed.setdefault("command", ["kruntimes", "runtimed"])
    # The template's own values of these are dropped: a template that set KRUNTIMES_DEVICE_DISCOVER
    # would let its runtimed publish an inventory the Runtime does not say runtimed publishes.
    ours = {name for name, _ in POD_ENV} | {"KRUNTIMES_WORK_DIR", "KRUNTIMES_STATE_DIR", DEVICE_ENV_VARIABLE,
                                            DEVICE_DISCOVER_VARIABLE}
    env = [e for e in runtimed.get("env") or [] if e.get("name") not in ours]
    env += [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in POD_ENV]
    env.append({"name": "KRUNTIMES_WORK_DIR", "value": WORK_DIR})
    env.append({"name": "KRUNTIMES_STATE_DIR", "value": STATE_DIR})
    if device_env is not None:  # SPEC §7.7: the variables a Run's process gets from its devices' attributes
        env.append({"name": DEVICE_ENV_VARIABLE, "value": device_env})
    if device_discover is not None:  # SPEC §7.1 publisher Runtimed: what runtimed runs at start, and the driver
        env.append({"name": DEVICE_DISCOVER_VARIABLE, "value": device_discover})
    runtimed["env"] = env
    mounts = [m for m in runtimed.get("volumeMounts") or [] if m.get("name") not in (WORK_VOLUME, STATE_VOLUME)]
    runtimed["volumeMounts"] = mounts + [{"name": WORK_VOLUME, "mountPath": WORK_DIR},
                                         {"name": STATE_VOLUME, "mountPath": STATE_DIR}]
    return containers


def _owned_annotation(key: str) -> bool:
    return (key in (CAPACITY_ANNOTATION, DEVICES_ANNOTATION, LEGACY_DEVICE_ENV_ANNOTATION, HEARTBEAT_ANNOTATION)
            or key.startswith(CAPACITY_ANNOTATION_PREFIX))


def _active_counts(runs: list[ActiveRun], pods: list[RuntimePod]) -> dict[str, int]:
    """Active Runs per pod UID, each Run on the pod its assignment names (SPEC §2.2)."""
    counts: dict[str, int] = {}
    for run in runs:
        pod = _pod_of(run, pods)
        if pod is not None:
            counts[pod.uid] = counts.get(pod.uid, 0) + 1
    return counts


def _pod_of(run: ActiveRun, pods: list[RuntimePod]) -> RuntimePod | None:
    if run.pod_uid:
        return next((p for p in pods if p.uid == run.pod_uid), None)
    return next((p for p in pods if p.name == run.pod_name), None)


def _lost_message(run: ActiveRun) -> str:
    return (f"runtime pod {run.pod_name} is gone (deleted or replaced) while this Run was active; "
            f"its execution, if any, ended with the pod; create the Run again to retry it")


def _newest_first(created: str) -> tuple[int, ...]:
    # RFC 3339 timestamps in one format sort as text; invert each character to sort newest first.
    return tuple(-ord(ch) for ch in created)
