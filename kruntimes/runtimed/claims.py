"""What a claim's uncertain answer means, and how long runtimed waits before trying again (SPEC §4.1).

A claim (`phase: Running`, guarded by the observed resourceVersion) can be refused
(409), fail (500; 429 or 503 with `Retry-After`) or go unanswered (a timeout: it may
have landed). runtimed never guesses: it reads the Run back and `settle` says what
that read means. While it cannot tell, it keeps the reservation (the claim may have
landed, so the Run may be running here by its hand) and tries again after a
`Backoff` delay, in a loop on a thread of its own: a claim answered 500 for minutes
costs a few dozen requests, never recursion, and the Run runs once the API answers.

Pure: no threads, no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kruntimes.runtimed.admission import AssignedRun
from kruntimes.runtimed.reading import assigned_run

#: Verdicts on a claim attempt. Each says what runtimed does next.
CLAIMED = "Claimed"  # Running here by this runtimed's claim: execute it
RETRY = "Retry"      # still Scheduled here, or unknown: keep the reservation, try again after the backoff
DROPPED = "Dropped"  # ended, deleted, moved, or set Running by another writer: release it, look at it afresh

MAX_RETRY_AFTER = 300.0  # seconds; a server asking for longer is asked again sooner


def settle(reserved: AssignedRun, fresh: Mapping[str, Any] | None, *, is_mine: Callable[[AssignedRun], bool],
           may_have_landed: bool) -> str:
    """The verdict of a read taken after a claim was refused or went unanswered.

    `fresh` is the Run as read (None: it is gone). `may_have_landed` says whether some
    earlier attempt of this claim went unanswered: only then can a Running Run on
    this pod be this runtimed's own claim; otherwise someone else set it Running.
    """
    if fresh is None:
        return DROPPED
    run, info = assigned_run(fresh)
    if run.uid != reserved.uid or info.terminal or info.deleting or not is_mine(run):
        return DROPPED
    if info.phase == "Running":
        return CLAIMED if may_have_landed else DROPPED
    if info.phase == "Scheduled" and not info.problems:
        return RETRY
    return DROPPED


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential delays with a cap, never shorter than a server's `Retry-After`.

    No jitter: one runtimed retries one claim at a time per Run, so there is no herd
    of its own to spread, and deterministic delays keep the tests exact.
    """

    first: float = 0.25  # seconds before the first retry
    factor: float = 2.0
    cap: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `attempt` (0 for the first)."""
        wait = min(self.cap, self.first * self.factor ** min(attempt, 64))
        if retry_after is not None and retry_after > 0:
            wait = max(wait, min(retry_after, MAX_RETRY_AFTER))
        return wait
