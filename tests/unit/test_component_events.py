"""Which Events the controller's passes and runtimed's Run ends call for (the pure halves; the emulator
tests in tests/integration/test_component_events.py send them)."""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.controller import telling
from kruntimes.controller.apply import Applied
from kruntimes.controller.reconcile import ActiveRun, LostRun, RuntimeSpecView
from kruntimes.runtimed import outcomes
from kruntimes.runtimed.telling import end_event
from kruntimes.runtimed.outcomes import Ended, RunRef

RUNTIME = RuntimeSpecView(namespace="team-a", name="python", uid="rt-1", generation=1, replicas=2, template={},
                          capacity={"runs": 2})
RUN = RunRef("team-a", "batch-1", "run-1")


def invalid(reason: str = "InvalidTemplate") -> dict[str, Any]:
    return {"conditions": [{"type": "TemplateValid", "status": "False", "reason": reason, "message": "fix it"}]}


VALID = {"conditions": [{"type": "TemplateValid", "status": "True", "reason": "Valid", "message": "ok"}]}
LOST = LostRun(ActiveRun("team-a", "batch-2", "run-2", "python-x", "p-1"), "RuntimePodLost", "runtime pod python-x")

CASES = [
    ("a pass that changed nothing tells nothing", Applied(status=VALID), VALID, []),
    ("each pod created or deleted is a Normal Event on the Runtime",
     Applied(created=["python-a"], deleted=["python-b"], status=VALID), VALID,
     [("Runtime", "SuccessfulCreate", "Created Runtime Pod: python-a", "Normal"),
      ("Runtime", "SuccessfulDelete", "Deleted Runtime Pod: python-b", "Normal")]),
    ("a template turning invalid is a Warning", Applied(status=invalid()), VALID,
     [("Runtime", "InvalidTemplate", "fix it", "Warning")]),
    ("a template still invalid for the same reason is not told again", Applied(status=invalid()), invalid(), []),
    ("a template refused for another reason is told", Applied(status=invalid("PodRefused")), invalid(),
     [("Runtime", "PodRefused", "fix it", "Warning")]),
    ("a Run failed because its pod is gone is a Warning on the Run", Applied(lost=[LOST], status=VALID), VALID,
     [("Run", "RuntimePodLost", "runtime pod python-x", "Warning")]),
]


@pytest.mark.parametrize("why,applied,before,told", CASES, ids=[c[0] for c in CASES])
def test_what_a_controller_pass_tells(why: str, applied: Applied, before: dict[str, Any],
                                      told: list[tuple[str, str, str, str]]) -> None:
    assert [(t.kind, t.reason, t.note, t.type) for t in telling.tell(RUNTIME, applied, before)] == told


@pytest.mark.parametrize("ended,event", [
    (Ended(RUN, "Succeeded", "Completed", "exit code 0", 0), ("Completed", "Completed: exit code 0", False)),
    (Ended(RUN, "Failed", "ProcessFailed", "the process exited with code 3", 3),
     ("Failed", "ProcessFailed: the process exited with code 3", True)),
    (Ended(RUN, "Failed", outcomes.REASON_EXECUTION_LOST, "its process is gone"),
     ("Lost", "ExecutionLost: its process is gone", True)),
    (outcomes.pod_lost(RUN, "python-x"), ("Lost", None, True)),
], ids=["succeeded", "failed", "execution lost", "pod lost"])
def test_a_runs_end_is_completed_failed_or_lost(ended: Ended, event: tuple[str, str | None, bool]) -> None:
    reason, note, warning = end_event(ended)
    assert (reason, warning) == (event[0], event[2])
    assert note == (event[1] or f"{ended.reason}: {ended.message}")
