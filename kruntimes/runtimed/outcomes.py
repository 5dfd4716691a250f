"""How an execution ends, in words a person understands, and the status that records it (SPEC §3.7, §4.1).

The executor reports an `Ended` value; this module turns it into the Run's terminal
status through the one shared helper (`kruntimes.scheduler.status.terminal_status`),
so runtimed's terminal writes carry phase, conditions and `completionTime` exactly
as the scheduler's do. It also decides restart recovery: a Running Run whose process
this runtimed no longer has ends Failed, saying so.

Pure: no processes, no Kubernetes, no clock (callers pass `now`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Collection, Iterable, Sequence

from kruntimes.scheduler.status import terminal_status

#: Condition reasons (CamelCase, bounded). The message says the detail.
REASON_SUCCEEDED = "ProcessSucceeded"
REASON_FAILED = "ProcessFailed"
REASON_KILLED = "ProcessKilled"
REASON_START_FAILED = "StartFailed"
REASON_RELEASED = "Released"
REASON_EXECUTION_LOST = "ExecutionLost"
REASON_INTERRUPTED = "RuntimedStopped"
REASON_POD_LOST = "RuntimePodLost"  # the controller's reason for a Run whose pod is gone (SPEC §4.2)

MAX_MESSAGE_CHARS = 1000  # as the API layer's messages (kruntimes.api.errors)

EXECUTION_LOST = ("runtimed restarted and no longer has this Run's process, so it was interrupted "
                  "and its result is unknown; create the Run again to retry it")
PREDECESSOR_STOPPED = ("runtimed restarted after it was killed; the process it had started for this Run was still "
                       "running and was stopped, so its result is unknown; create the Run again to retry it")
INTERRUPTED = "runtimed was stopped while this Run was executing; create the Run again to retry it"


@dataclass(frozen=True, slots=True)
class RunRef:
    """Which Run an execution belongs to."""

    namespace: str
    name: str
    uid: str

    @property
    def label(self) -> str:
        """How the Run is named on every pod-log line and in messages."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Ended:
    """An execution's end: the terminal phase, a bounded reason and a person-readable message."""

    run: RunRef
    phase: str
    reason: str
    message: str
    exit_code: int | None = None
    released: bool = False


def describe_exit(code: int) -> tuple[str, str, str]:
    """(phase, reason, message) for a process's return code; negative means killed by a signal."""
    if code == 0:
        return "Succeeded", REASON_SUCCEEDED, "the process exited with code 0"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        return "Failed", REASON_KILLED, f"the process was killed by {name} (signal {-code})"
    return "Failed", REASON_FAILED, f"the process exited with code {code}"


def with_tail(message: str, tail: Sequence[str]) -> str:
    """`message` followed by the last output lines, cut from the front to stay bounded."""
    if not tail:
        return message
    head = f"{message}; last output:\n"
    text = "\n".join(tail)
    room = MAX_MESSAGE_CHARS - len(head)
    if len(text) > room:
        text = "..." + text[len(text) - room + 3:]
    return head + text


def exited(run: RunRef, code: int, tail: Sequence[str], *, function: bool = False) -> Ended:
    """The end of a process that exited by itself (a function Run exiting was not released)."""
    phase, reason, message = describe_exit(code)
    if function:
        message = f"{message} before the Run was released"
    return Ended(run, phase, reason, with_tail(message, tail), exit_code=code)


def unusable_argument(args: Sequence[str]) -> str | None:
    """Why no process can receive `args`, or None.

    The CRD accepts any string, but an argv is C strings of bytes: a NUL would end an
    argument early (Python refuses it), and a lone surrogate (which a JSON string can
    hold) has no UTF-8 form. Such a Run ends Failed saying which argument, never
    leaving its slot taken by a process that could not start.
    """
    for position, arg in enumerate(args, 1):
        if "\x00" in arg:
            return f"argument {position} contains a NUL character, which no process can receive"
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return f"argument {position} is not valid Unicode (it holds a lone surrogate)"
    return None


def start_refused(run: RunRef, problem: str) -> Ended:
    """A Run whose arguments no process can receive (`unusable_argument`)."""
    return Ended(run, "Failed", REASON_START_FAILED, f"could not start the process: {problem}; fix spec.mode args")


def start_failed(run: RunRef, args: Sequence[str], error: Exception) -> Ended:
    """The program could not be started: not found, not executable, or anything else `Popen` refused."""
    program = args[0] if args else ""
    detail = (error.strerror if isinstance(error, OSError) else None) or str(error) or type(error).__name__
    return Ended(run, "Failed", REASON_START_FAILED,
                 f"could not start {program!r}: {detail}; check spec.mode args and the Runtime's image")


def released(run: RunRef) -> Ended:
    return Ended(run, "Succeeded", REASON_RELEASED, "the function Run was released", released=True)


def interrupted(run: RunRef) -> Ended:
    return Ended(run, "Failed", REASON_INTERRUPTED, INTERRUPTED)


def pod_lost(run: RunRef, pod_name: str) -> Ended:
    """An execution stopped because its pod is being deleted: the reason the controller would write."""
    return Ended(run, "Failed", REASON_POD_LOST,
                 f"runtime pod {pod_name} is being deleted; the Run was stopped with it; create the Run again "
                 "to retry it")


def ended_status(previous: dict[str, Any] | None, ended: Ended, now: datetime) -> dict[str, Any]:
    """The Run's whole new status, through the shared terminal helper (SPEC §3.7)."""
    base = dict(previous or {})
    if ended.released:
        base["released"] = True  # the helper keeps the marker: a released function is not active
    return terminal_status(base, ended.phase, ended.reason, ended.message, now)


def lost_executions(running: Iterable[RunRef], has_process: Callable[[str], bool], *,
                    left_behind: Collection[str] = ()) -> list[Ended]:
    """Restart recovery: every Running Run of this pod whose process this runtimed does not have.

    Callers first count these Runs as admitted (they held capacity until now), then
    write each Failed, then release them; so capacity is never double-used meanwhile.
    """
    return [Ended(run, "Failed", REASON_EXECUTION_LOST,
                  PREDECESSOR_STOPPED if run.uid in left_behind else EXECUTION_LOST)
            for run in sorted(running, key=lambda r: (r.namespace, r.name, r.uid)) if not has_process(run.uid)]
