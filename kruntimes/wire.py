"""The ground floor: the names kruntimes writes on Kubernetes objects, and how it reads and writes times.

Every layer below the CLI speaks these: the API models and the CRDs, the planner's
projections and status bodies, the Runtime controller, the cluster adapter, runtimed,
the journal's history, the UI and replay. Each name is defined here once, so two
places can no longer disagree about a label (as `api.fields` and
`controller.reconcile` each spelled them until 2026-12-05). This module imports
nothing of kruntimes and no third-party library (no pydantic, no Kubernetes client),
so importing it costs nothing and never pulls a layer in.

Times come in two forms, read by two functions on purpose:
- in Kubernetes objects (`parse_rfc3339`, `rfc3339`): RFC 3339 with a zone, strictly,
  as the API server reads and writes them;
- typed by a person (`parse_when`, `parse_duration`): on the command line and in the
  UI's query parameters, RFC 3339 / ISO 8601 (no zone means UTC; a date alone is its
  midnight UTC), ``now``, or an age before now such as ``90m``, ``2h``, ``1d``, ``1w``
  or a sum like ``1h30m`` or ``1d 12h``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Literal

# -- the API group -----------------------------------------------------------------------------
GROUP = "kruntimes.io"
VERSION = "v1alpha1"
# Final, so that type checkers see the literal the `apiVersion` Literal fields expect.
API_VERSION: Final = "kruntimes.io/v1alpha1"

# -- labels and annotations on Runtime Pods (SPEC §2.1) -------------------------------------------
#: The Runtime a pod belongs to (the controller sets it; the scheduler watches by it).
RUNTIME_LABEL = "kruntimes.io/runtime"
#: The pod's capacity: the controller writes ONE JSON object; readers also accept per-resource keys.
CAPACITY_ANNOTATION = "kruntimes.io/capacity"
CAPACITY_ANNOTATION_PREFIX = "kruntimes.io/capacity."
#: runtimed's heartbeat, an RFC 3339 time (SPEC §3.3: unparsable counts as stale).
HEARTBEAT_ANNOTATION = "kruntimes.io/runtimed-heartbeat"
#: The one pod annotation devices have (SPEC §7.1): the inventory alone, as canonical JSON.
DEVICES_ANNOTATION = "kruntimes.io/devices"
#: Written by earlier controllers (the device env mapping); removed from the pods they made, never written again.
LEGACY_DEVICE_ENV_ANNOTATION = "kruntimes.io/device-env"
#: A function Run is released by this annotation set to "true" on the Run (runtimed then ends it).
RELEASE_ANNOTATION = "kruntimes.io/release"
#: The one topology key of Run affinity: the Runtime Pod (SPEC §3.3).
RUNTIME_POD_TOPOLOGY = "kruntimes.io/runtime-pod"
#: The built-in resource every Run requests (SPEC §2.2) and every pod declares (§2.3).
RUNS_RESOURCE = "runs"
#: The reporting controllers of each component's Events (events.k8s.io/v1); runtimed's policy names its own.
EVENTS_REPORTER = "kruntimes.io/scheduler"
CONTROLLER_EVENTS_REPORTER = "kruntimes.io/runtime-controller"
RUNTIMED_EVENTS_REPORTER = "kruntimes.io/runtimed"

# -- Run phases (SPEC §2.2) ---------------------------------------------------------------------------
PENDING, SCHEDULED, RUNNING, SUCCEEDED, FAILED = "Pending", "Scheduled", "Running", "Succeeded", "Failed"
Phase = Literal["Pending", "Scheduled", "Running", "Succeeded", "Failed"]
PHASES: tuple[Phase, ...] = (PENDING, SCHEDULED, RUNNING, SUCCEEDED, FAILED)
#: A Run in these holds capacity on its pod (unless released).
ACTIVE_PHASES = frozenset({SCHEDULED, RUNNING})
#: A Run in these is over; nothing changes it again. In this order in messages.
TERMINAL_PHASES: tuple[Phase, ...] = (SUCCEEDED, FAILED)

# -- condition types ------------------------------------------------------------------------------------
#: On a Run: placed (True) or why not (False, with the Pending message); ended (SPEC §3.7).
CONDITION_SCHEDULED = "Scheduled"
CONDITION_COMPLETED = "Completed"
#: On a pod, as the kubelet writes it.
CONDITION_READY = "Ready"
#: On a Runtime, as the controller writes them.
CONDITION_CAPACITY_VALID = "CapacityValid"
CONDITION_AVAILABLE = "Available"
CONDITION_DEVICES_VALID = "DevicesValid"
CONDITION_TEMPLATE_VALID = "TemplateValid"


# -- times in Kubernetes objects --------------------------------------------------------------------
# RFC 3339 §5.6 date-time, as Kubernetes (Go's time.Parse with time.RFC3339) reads it:
# seconds required, any fraction, a zone always. `fromisoformat` alone would also take
# ISO 8601 forms a real server never writes (week dates, basic format, no seconds), and
# a heartbeat in such a form would count as fresh where SPEC §3.3 says unparsable is stale.
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})",
                      re.ASCII)


def rfc3339(t: datetime) -> str:
    """An aware time as an object field: RFC 3339, UTC written ``Z``."""
    return t.isoformat().replace("+00:00", "Z")


def parse_rfc3339(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime, or None when missing or unparsable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else None
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None


# -- times a person types -------------------------------------------------------------------------------
_AGE = re.compile(r"(?:[0-9]+\s*[smhdw]\s*)+", re.ASCII)
_AGE_PART = re.compile(r"([0-9]+)\s*([smhdw])", re.ASCII)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class NotATime(ValueError):
    """Text that is none of the accepted forms; the message names the option and shows them."""


def parse_when(text: str, *, now: datetime | None = None, what: str = "time") -> datetime:
    """The instant ``text`` names, in UTC; ages count back from ``now`` (default: the clock)."""
    value = text.strip()
    now = now or datetime.now(timezone.utc)
    try:
        if value == "now":
            return now.astimezone(timezone.utc)
        if _AGE.fullmatch(value):
            return (now - _length(value)).astimezone(timezone.utc)
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: beyond the calendar, such as 99999999d
        raise NotATime(f"{what} {text!r} is not a time: use RFC 3339 (2026-11-29T10:00:00Z;"
                       " no zone means UTC) or an age such as 30m, 2h, 1h30m, 1d") from None


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """A length of time written as an age: ``90s``, ``30m``, ``1h30m``, ``2d``."""
    value = text.strip()
    try:
        if _AGE.fullmatch(value):
            return _length(value)
    except OverflowError:
        pass
    raise NotATime(f"{what} {text!r} is not a duration: use a number with a unit, such as 90s, 30m, 1h30m, 2d")


def _length(value: str) -> timedelta:
    total = timedelta()
    for amount, unit in _AGE_PART.findall(value):
        total += timedelta(**{_UNITS[unit]: int(amount)})
    return total
