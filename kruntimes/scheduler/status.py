"""Run status bodies: the only shapes the scheduler (and runtimed) ever write.

Status is written as whole `status` objects in Kubernetes form. Every terminal
transition (Succeeded, Failed) goes through `terminal_status`, so phase,
conditions and completionTime are always set together and consistently (SPEC §3.7).
Conditions keep their lastTransitionTime unless their status really changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kruntimes import wire
from kruntimes.wire import rfc3339  # noqa: F401 - runtimed writes its times with it from here

SCHEDULED = wire.CONDITION_SCHEDULED
COMPLETED = wire.CONDITION_COMPLETED
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_INVALID = "InvalidConfiguration"


class Conflict(Exception):
    """The object changed since it was read (HTTP 409): re-read and retry, not an error."""


class ApiError(Exception):
    """Any other failure to write; retried with backoff (not before `retry_after` seconds when
    the server said so, as a throttling API server does)."""

    retry_after: float | None = None


class Refused(ApiError):
    """The server refused the object as written (a 400, 403 or 422 for the body itself): sending
    it again gets the same answer until someone changes what it is built from."""


class Late(ApiError):
    """A write not sent because the deadline it carried had passed: the leader fence it was
    handed over under may have closed since (SPEC §3.6). Nothing reached the server."""


class Ambiguous(ApiError):
    """The write may or may not have landed (a timeout, a lost connection): only a later
    observation of the object can tell. Never a reason to re-send blindly (SPEC §3.2 step 6)."""


@dataclass(frozen=True)
class Observed:
    """A Run as a read returned it: what settles a bind whose outcome was unknown."""

    uid: str
    resource_version: str
    phase: str
    pod_uid: str | None  # status.assignment.podUID, whatever the phase


def set_condition(conditions: list[dict[str, Any]], type_: str, status: str, reason: str,
                  message: str, now: datetime) -> list[dict[str, Any]]:
    """Return conditions with `type_` set; keeps lastTransitionTime when status is unchanged."""
    out = [dict(c) for c in conditions if c.get("type") != type_]
    previous = next((c for c in conditions if c.get("type") == type_), None)
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else None
    out.append({"type": type_, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": since or rfc3339(now)})
    return sorted(out, key=lambda c: c["type"])


def scheduled_status(previous: dict[str, Any] | None, pod_name: str, pod_uid: str, now: datetime,
                     term: int | None = None) -> dict[str, Any]:
    """The bind's status; `term` is the writer's leadership term, which the server's fence checks (SPEC §3.6)."""
    conditions = set_condition((previous or {}).get("conditions", []), SCHEDULED, "True", SCHEDULED,
                               f"assigned to runtime pod {pod_name}", now)
    assignment: dict[str, Any] = {"podName": pod_name, "podUID": pod_uid}
    if term is not None:
        assignment["term"] = term
    return {"phase": "Scheduled", "assignment": assignment, "conditions": conditions}


def pending_status(previous: dict[str, Any] | None, message: str, now: datetime) -> dict[str, Any]:
    conditions = set_condition((previous or {}).get("conditions", []), SCHEDULED, "False",
                               REASON_UNSCHEDULABLE, message, now)
    return {"phase": "Pending", "conditions": conditions}


#: How much of a terminal message the scheduler keeps (and journals) for people.
ENDED_MESSAGE_CHARS = 300


def ended(phase: str, conditions: Any) -> tuple[str, str] | None:
    """(reason, message) of a terminal Run's Completed condition, for people (history, the UI).

    The message is its first line without the process's output tail (``; last output:``,
    runtimed's ``with_tail``), cut to ``ENDED_MESSAGE_CHARS``: what a Run printed stays in
    the Run, never in the journal. None while the Run is not terminal or says nothing.
    """
    if phase not in wire.TERMINAL_PHASES or not isinstance(conditions, list):
        return None
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == COMPLETED and isinstance(c.get("reason"), str):
            message = c.get("message") if isinstance(c.get("message"), str) else ""
            first = message.split("\n", 1)[0].split("; last output", 1)[0]
            return c["reason"][:ENDED_MESSAGE_CHARS], first[:ENDED_MESSAGE_CHARS]
    return None


def terminal_status(previous: dict[str, Any] | None, phase: str, reason: str, message: str,
                    now: datetime) -> dict[str, Any]:
    """The one helper for every terminal transition (scheduler and runtimed alike)."""
    if phase not in wire.TERMINAL_PHASES:
        raise ValueError(f"terminal phase must be one of {wire.TERMINAL_PHASES}, not {phase!r}")
    prev = dict(previous or {})
    conditions = set_condition(prev.get("conditions", []), COMPLETED, "True", reason, message, now)
    if phase == "Failed" and reason == REASON_INVALID:
        conditions = set_condition(conditions, SCHEDULED, "False", REASON_INVALID, message, now)
    status = {"phase": phase, "conditions": conditions, "completionTime": rfc3339(now)}
    if prev.get("assignment"):
        status["assignment"] = prev["assignment"]
    if prev.get("released"):
        status["released"] = True
    if "devices" in prev:  # the devices it held stay on record with the assignment (SPEC §7.6), as written
        status["devices"] = prev["devices"]
    return status
