"""What runtimed says about a Run: the status it writes when it claims or holds one, and its Events.

`Lifecycle` decides what happens to a Run; this module says it to the API. A claim sets
`phase: Running` with `Admitted=True`; a Run waiting for room stays Scheduled with
`Admitted=False` saying why (SPEC §4.1). Each step also tells `kubectl describe run`
through an Event (`Tell`): Admitted, Started, and the end as Completed (Normal), Failed
or Lost (Warnings), as the controller tells its own (`controller.telling`). Pure.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Mapping

from kruntimes.runtimed import outcomes
from kruntimes.runtimed.outcomes import Ended, RunRef
from kruntimes.scheduler import status as st

#: The condition runtimed sets on a Run it admitted (True) or holds waiting (False).
ADMITTED = "Admitted"
REASON_WAITING = "InsufficientCapacity"


def running_status(previous: Mapping[str, Any] | None, pod_name: str, now: datetime) -> dict[str, Any]:
    """The claim: phase Running, assignment kept, `Admitted=True`."""
    status = dict(previous or {})
    status["phase"] = "Running"
    status["conditions"] = st.set_condition(list(status.get("conditions") or []), ADMITTED, "True", ADMITTED,
                                            f"admitted by runtimed on runtime pod {pod_name}", now)
    return status


def waiting_status(previous: Mapping[str, Any] | None, reason: str, now: datetime) -> dict[str, Any]:
    """Still Scheduled (assignment kept), with `Admitted=False` saying why."""
    status = dict(previous or {})
    status["conditions"] = st.set_condition(list(status.get("conditions") or []), ADMITTED, "False",
                                            REASON_WAITING, f"waiting for room on its runtime pod: {reason}", now)
    return status


#: What runtimed tells `kubectl describe run` (Events on the Run): (run, reason, note, warning).
Tell = Callable[[RunRef, str, str, bool], None]
#: Event reasons; an admitted Run's Event is named as its condition.
STARTED, COMPLETED, FAILED, LOST = "Started", "Completed", "Failed", "Lost"
_LOST_REASONS = (outcomes.REASON_EXECUTION_LOST, outcomes.REASON_POD_LOST)


def end_event(ended: Ended) -> tuple[str, str, bool]:
    """The Event of a Run's end: Completed (Normal), Failed, or Lost (its process or pod went; Warnings)."""
    note = f"{ended.reason}: {ended.message}" if ended.message else ended.reason
    if ended.phase == "Succeeded":
        return COMPLETED, note, False
    return (LOST if ended.reason in _LOST_REASONS else FAILED), note, True
