"""What a reconcile pass tells people through Kubernetes Events (`kubectl describe runtime`, `... run`).

As a ReplicaSet's controller does for its pods: a Runtime Pod created or deleted is a
Normal Event on its Runtime (``SuccessfulCreate``, ``SuccessfulDelete``); a template the
controller or the API server refuses is a Warning on the Runtime, once when its
``TemplateValid`` condition turns False (or its reason changes), not on every pass; a Run
failed because its pod is gone is a Warning on the Run (``RuntimePodLost``). Pure: the
adapter (``runner``) emits what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kruntimes.controller import template as templates
from kruntimes.controller.apply import Applied
from kruntimes.controller.reconcile import RuntimeSpecView

NORMAL, WARNING = "Normal", "Warning"
CREATED, DELETED = "SuccessfulCreate", "SuccessfulDelete"


@dataclass(frozen=True, slots=True)
class Tell:
    """One Event: about a ``kind`` (Runtime or Run) ``namespace/name``, with its reason, note and type."""

    kind: str
    namespace: str
    name: str
    uid: str
    reason: str
    note: str
    type: str = NORMAL


def _template(status: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return next((c for c in (status or {}).get("conditions") or () if c.get("type") == templates.CONDITION_TEMPLATE),
                {})


def tell(runtime: RuntimeSpecView, applied: Applied, before: Mapping[str, Any] | None) -> list[Tell]:
    """The Events one pass calls for, given the Runtime's status ``before`` it."""
    about = ("Runtime", runtime.namespace, runtime.name, runtime.uid)
    out = [Tell(*about, CREATED, f"Created Runtime Pod: {name}") for name in applied.created]
    out += [Tell(*about, DELETED, f"Deleted Runtime Pod: {name}") for name in applied.deleted]
    now, then = _template(applied.status), _template(before)
    if now.get("status") == "False" and (then.get("status") != "False" or then.get("reason") != now.get("reason")):
        out.append(Tell(*about, str(now.get("reason") or templates.REASON_INVALID), str(now.get("message") or ""),
                        WARNING))
    out += [Tell("Run", lost.run.namespace, lost.run.name, lost.run.uid, lost.reason, lost.message, WARNING)
            for lost in applied.lost]
    return out
