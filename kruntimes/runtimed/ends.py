"""Writing a Run's end until the API has it (SPEC §3.7, §4.1, amended 2026-12-04).

An end is kept in the `Outbox` before the first attempt, so neither an API hiccup nor
a restart loses it. It is written through the shared terminal helper with the time
the execution ended; a 409 is settled at once by a fresh read (someone else may have
ended the Run, or only changed it), anything else is retried with the claims'
`Backoff`, on a thread of its own, for as long as it takes. Until the API has the end
the Run keeps its capacity here: runtimed never admits another Run in its place
while the API (and so the scheduler) still counts this one as active.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from kruntimes.runtimed import outcomes
from kruntimes.runtimed.claims import Backoff
from kruntimes.runtimed.outbox import Outbox, PendingEnd
from kruntimes.runtimed.reading import assigned_run
from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo

log = logging.getLogger(__name__)

CONFLICTS_SETTLED_AT_ONCE = 5  # re-read and re-written without waiting; then the backoff applies


class StatusWriter(Protocol):
    def update_status(self, run: RunInfo, status: dict[str, Any]) -> None: ...


class RunReader(Protocol):
    def read_run(self, namespace: str, name: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class Seams:
    """What the writer needs of its owner: the newest object of a Run, and what to do once an end is written."""

    latest: Callable[[str], dict[str, Any] | None]  # uid -> newest object seen; None once ended or gone
    remember: Callable[[dict[str, Any]], object]
    written: Callable[[str], None]  # the API has the end (or the Run is gone): free what it held
    spawn: Callable[..., None]  # spawn(name, target, *args): a thread the owner joins at shutdown
    wait: Callable[[float], bool]  # sleep between attempts; True when runtimed is stopping


class EndWriter:
    """Each end: kept on disk, written, retried with backoff until written."""

    def __init__(self, writer: StatusWriter, reader: RunReader, outbox: Outbox, seams: Seams,
                 backoff: Backoff) -> None:
        self._writer, self._reader, self._outbox, self._seams, self._backoff = writer, reader, outbox, seams, backoff

    def write(self, pending: PendingEnd) -> None:
        """Keep the end, try once now; if the API does not take it, keep trying on a thread of its own."""
        self._outbox.put(pending)
        done, retry_after = self._attempt(pending)
        if not done:
            run = pending.ended.run
            self._seams.spawn(f"end {run.label}", self._retry, pending, retry_after)

    def _retry(self, pending: PendingEnd, retry_after: float | None) -> None:
        for number in itertools.count():
            if self._seams.wait(self._backoff.delay(number, retry_after)):
                return  # runtimed is stopping: the outbox keeps the end for its successor
            done, retry_after = self._attempt(pending)
            if done:
                return

    def _attempt(self, pending: PendingEnd) -> tuple[bool, float | None]:
        """(written or nothing left to write, the server's Retry-After)."""
        run = pending.ended.run
        for _ in range(CONFLICTS_SETTLED_AT_ONCE):
            obj = self._seams.latest(run.uid)
            if obj is None or assigned_run(obj)[1].terminal:
                return self._done(run.uid), None  # ended (by us or another writer), or gone
            info = assigned_run(obj)[1]
            status = outcomes.ended_status(obj.get("status"), pending.ended, pending.at)
            try:
                self._writer.update_status(info, status)
                return self._done(run.uid), None
            except st.Conflict:
                pass
            except Exception as exc:  # noqa: BLE001 - an API error or anything else: keep it, try again later
                log.warning("writing the end of Run %s failed: %s; kept, retried with backoff", run.label, exc)
                return False, getattr(exc, "retry_after", None)
            try:
                fresh = self._reader.read_run(run.namespace, run.name)
            except Exception as exc:  # noqa: BLE001
                log.warning("reading Run %s failed: %s; its end is kept, retried with backoff", run.label, exc)
                return False, getattr(exc, "retry_after", None)
            if fresh is None or (fresh.get("metadata") or {}).get("uid") != run.uid:
                return self._done(run.uid), None  # deleted (perhaps recreated): nothing left to end
            self._seams.remember(fresh)
        return False, None

    def _done(self, uid: str) -> bool:
        self._outbox.remove(uid)
        self._seams.written(uid)
        return True
