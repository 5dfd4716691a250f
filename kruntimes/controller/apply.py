"""Carrying out a reconcile `Plan` through a small API seam (SPEC §4.2).

The plan says what should change; this module changes it, one write at a time,
with the care each write needs:
- a pod is deleted only with its UID as precondition, so a replacement that took
  its name is never deleted by mistake; a pod already gone is fine;
- a Run is failed `RuntimePodLost` only after a direct read shows its pod really
  gone (the controller's cache may not have seen a brand-new pod yet) and a fresh
  read of the Run shows it still active on that same pod; the write is guarded by
  that read's resourceVersion, and a conflict leaves it to the next pass;
- a pod the API server refuses (its template is wrong in a way only the server can
  tell) turns the status's `TemplateValid` condition False with the server's message;
  the next created pod turns it True again;
- `Runtime.status` is written only when it changed.
One failed write does not stop the others: every error is collected, and the
adapter requeues the Runtime with backoff when there were any.

The seam (`ControllerApi`) is what a Kubernetes implementation provides; no client here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Protocol

from kruntimes import wire
from kruntimes.controller import template as templates
from kruntimes.controller.reconcile import LostRun, Plan, RuntimeSpecView
from kruntimes.scheduler import status as st


class ControllerApi(Protocol):
    def create_pod(self, namespace: str, body: dict[str, Any]) -> str:
        """Create a pod from `body` (generateName); return the name the server gave it."""

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod with that name only if it still has that UID; a missing pod is not an error."""

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Apply a JSON merge patch to the pod's metadata."""

    def pod_present(self, namespace: str, name: str, uid: str | None) -> bool:
        """A direct read: is there a pod of that name (and, when given, that UID)?"""

    def read_run(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def write_run_status(self, run: Mapping[str, Any], status: dict[str, Any]) -> None:
        """Replace the Run's status at `run`'s resourceVersion; `status.Conflict` when it changed."""

    def write_runtime_status(self, runtime: RuntimeSpecView, status: dict[str, Any]) -> None: ...


@dataclass
class Applied:
    """What one pass changed, and what failed (the adapter requeues the Runtime when `errors`)."""

    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    failed_runs: list[str] = field(default_factory=list)
    status_written: bool = False
    errors: list[str] = field(default_factory=list)
    lost: list[LostRun] = field(default_factory=list)  # the Runs of `failed_runs`, with why
    status: dict[str, Any] = field(default_factory=dict)  # the status this pass wanted (written if it changed)


def apply(plan: Plan, runtime: RuntimeSpecView, current_status: Mapping[str, Any] | None, api: ControllerApi,
          now: datetime) -> Applied:
    """Carry out `plan` for `runtime`; `current_status` is the Runtime's status as observed."""
    done = Applied()
    ns = runtime.namespace
    for pod in plan.delete:
        _try(done, f"deleting pod {pod.name}", lambda p=pod: (api.delete_pod(ns, p.name, p.uid),
                                                              done.deleted.append(p.name)))
    refused: str | None = None
    for body in plan.create:
        try:
            done.created.append(api.create_pod(ns, body))
        except st.Refused as exc:
            refused = str(exc)
            done.errors.append(f"creating a pod: {exc}")
            break  # the next pod would be refused the same way
        except (st.ApiError, st.Conflict) as exc:
            done.errors.append(f"creating a pod: {exc}")
    for pod, patch in plan.patch:
        _try(done, f"re-projecting capacity onto pod {pod.name}",
             lambda p=pod, m=patch: (api.patch_pod(ns, p.name, m), done.patched.append(p.name)))
    for lost in plan.lost:
        _try(done, f"failing Run {lost.run.namespace}/{lost.run.name}", lambda x=lost: _fail_lost(x, api, now, done))
    status = _with_creates(plan.status, runtime, refused, bool(done.created), now)
    done.status = status
    if _changed(status, current_status or {}):
        _try(done, "writing the Runtime's status",
             lambda: (api.write_runtime_status(runtime, status), setattr(done, "status_written", True)))
    return done


def _with_creates(status: dict[str, Any], runtime: RuntimeSpecView, refused: str | None, created: bool,
                  now: datetime) -> dict[str, Any]:
    """The planned status, with `TemplateValid` as the server's answers to this pass's creates say."""
    if refused is not None:
        condition = ("False", templates.REASON_REFUSED,
                     templates.bounded(f"the API server refused a Runtime Pod built from spec.template: {refused}"))
    elif created:
        condition = ("True", templates.REASON_VALID, "Runtime Pods are created from spec.template")
    else:
        return status
    conditions = st.set_condition(status.get("conditions") or [], templates.CONDITION_TEMPLATE, *condition, now)
    for c in conditions:
        c.setdefault("observedGeneration", runtime.generation)
    return {**status, "conditions": conditions}


def _fail_lost(lost: LostRun, api: ControllerApi, now: datetime, done: Applied) -> None:
    run = lost.run
    if api.pod_present(run.namespace, run.pod_name, run.pod_uid):
        return  # the cache had not seen it yet: not lost
    fresh = api.read_run(run.namespace, run.name)
    if fresh is None or (fresh.get("metadata") or {}).get("uid") != run.uid:
        return  # gone or recreated: nothing of this Run is active any more
    status = fresh.get("status") or {}
    assignment = status.get("assignment") or {}
    still_active = status.get("phase") in wire.ACTIVE_PHASES and not status.get("released")
    same_pod = assignment.get("podName") == run.pod_name and assignment.get("podUID") == run.pod_uid
    if not (still_active and same_pod):
        return
    try:
        api.write_run_status(fresh, st.terminal_status(status, "Failed", lost.reason, lost.message, now))
    except st.Conflict:
        return  # it changed meanwhile; the next pass sees the new version
    done.failed_runs.append(f"{run.namespace}/{run.name}")
    done.lost.append(lost)


def _changed(wanted: Mapping[str, Any], observed: Mapping[str, Any]) -> bool:
    # observedGeneration is compared only when the server kept it: the Runtime CRD's
    # status schema does not declare it yet, so a server prunes it, and comparing it
    # then would rewrite an unchanged status on every pass.
    keys = ["replicas", "readyReplicas", "conditions"] + (["observedGeneration"] if "observedGeneration" in observed
                                                          else [])
    return any(wanted.get(k) != observed.get(k) for k in keys)


def _try(done: Applied, what: str, action: Any) -> None:
    try:
        action()
    except (st.ApiError, st.Conflict) as exc:  # a conflict too: the next pass plans on the newer version
        done.errors.append(f"{what}: {exc}")
