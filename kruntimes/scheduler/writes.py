"""How a cycle's status write or read leaves it: handed to a `Sender`, answered through a callback.

The scheduling cycle plans and reserves; the write that follows is the slow, remote
part. Like kube-scheduler's binding cycle it runs apart from the scheduling loop, so
the loop plans the next Run while earlier writes are out. A `Sender` takes a write
(or, to settle an unanswered bind, a read) and calls `done` once with its answer,
now or later, from any thread: the loop (`loop`; a bind's answer: `binding`) gives
every answer the meaning SPEC §3.2 step 6 gives it, wherever the HTTP request was made.

Each write carries a deadline on `time.monotonic()`'s clock, which on Linux is one
clock for every process of the machine: the moment after which it must not be sent,
because the leader lease it was handed over under may have been lost by then
(`kruntimes.cluster.binder.kube`). A write still waiting at its deadline is answered
`status.Late` and never sent.

`Inline` answers at once, in the caller's thread, through a synchronous `Binder`:
the in-memory API of the tests and the demo. `kruntimes.cluster.binder.processes` sends from
binder processes, so the scheduling process's interpreter never waits for HTTP.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Protocol

from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo

#: The deadline of a write no fence limits (no leader election, tests).
NO_DEADLINE = math.inf

WriteDone = Callable[[BaseException | None], None]
ReadDone = Callable[[st.Observed | None, BaseException | None], None]


class Binder(Protocol):
    """Writes a Run's whole status, guarded by the resourceVersion the Run was read at.

    Raises `status.Conflict` when the Run changed meanwhile (HTTP 409),
    `status.Ambiguous` when the write may have landed (sent, not answered) and
    `status.ApiError` (or any exception) for other failures. `observe` reads the Run
    (None when it is gone); it is only called after an ambiguous bind.
    """

    def update_status(self, run: RunInfo, status: dict[str, Any]) -> None: ...

    def observe(self, run: RunInfo) -> st.Observed | None: ...


class Sender(Protocol):
    def write(self, run: RunInfo, body: dict[str, Any], deadline: float, done: WriteDone) -> None:
        """Send `body` as the Run's status, guarded by `run.resource_version`, unless `deadline`
        (monotonic) has passed; `done(None)` on success, else `done(exc)` with the
        `status` exception that says what happened (Conflict, Ambiguous, Late, ApiError)."""

    def read(self, run: RunInfo, done: ReadDone) -> None:
        """Read the Run: `done(observed, None)` (observed is None when the Run is gone),
        or `done(None, exc)` when the read failed."""

    def wait_for_room(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds until another write can be handed over without queueing
        behind more than the sender can send soon; False if there is still no room.

        The loop asks before each cycle, so that it plans no faster than writes leave: a write
        queued too long would pass its deadline unsent and its Run be planned again."""


class Inline:
    """A `Sender` that calls a synchronous `Binder` in the caller's thread and answers at once.

    `binder` is looked up on every call, so that replacing a scheduler's binder
    (as tests do) takes effect.
    """

    def __init__(self, binder: Callable[[], Binder], clock: Callable[[], float] = time.monotonic) -> None:
        self._binder = binder
        self._clock = clock

    def write(self, run: RunInfo, body: dict[str, Any], deadline: float, done: WriteDone) -> None:
        if self._clock() >= deadline:
            done(late(run))
            return
        try:
            self._binder().update_status(run, body)
        except Exception as exc:  # noqa: BLE001 - every failure is the loop's to settle
            done(exc)
            return
        done(None)

    def wait_for_room(self, timeout: float) -> bool:
        return True  # every write is answered before `write` returns

    def read(self, run: RunInfo, done: ReadDone) -> None:
        try:
            seen = self._binder().observe(run)
        except Exception as exc:  # noqa: BLE001
            done(None, exc)
            return
        done(seen, None)


def late(run: RunInfo) -> st.Late:
    return st.Late(f"status write of Run {run.namespace}/{run.name} not sent: its deadline passed "
                   "(the leader lease may have been lost since it was handed over)")
