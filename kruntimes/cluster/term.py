"""A leadership term: what a scheduler does when it takes the lease, and when it loses it.

Begin (SPEC §3.6 "a new leader rebuilds its queue from Pending Runs and its usage
from active Runs"):

1. relist Runs and Runtime Pods (diffed, so only changes are applied): the term
   plans on everything written before it took the lease, including the last binds
   of the leader before it, even if a watch lags;
2. open the journal. Only the leader journals. A term is a new epoch (SPEC §5: its
   records are keyed by (epoch, LSN), so a killed leader's spool drained later never
   competes with this term's keys) numbering on from the highest LSN this process
   knows; its first records are the incarnation record, a checkpoint of the whole
   cache (what replay starts from, since the standby's changes were not journaled)
   and `leader` {acquired}. Opening it never waits for the database (SPEC §5
   "Availability"): the highest LSN known is its spool's, its previous term's, or the
   database's if it answers at once, and the records wait in the spool until the
   database answers;
3. start with an empty assumed cache (dropping whatever a previous term left);
4. route events through the scheduler, enqueue every Pending Run, start the
   scheduling loop (its writes go to the binder processes, `binder.processes`).

End (lost, or shutting down):

1. route events straight into the cache again, so nothing more is enqueued;
2. pause the scheduler: cycles in flight finish - their writes, sent only before
   the deadline they carry (the fence, while the lease is certainly held), are
   answered - and the scheduling loop is joined;
3. drop this term's assumptions (recorded as releases, reason `aborted`), journal
   `leader` {lost, reason} and the epoch's `end` {reason}, and close the journal,
   which flushes it - before the lease is released on shutdown.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

from kruntimes.cluster.intake import Intake
from kruntimes.cluster.leader import LeaseRecord
from kruntimes.cluster.settings import ClusterSettings
from kruntimes.journal.write.session import JournalSession
from kruntimes.scheduler import assumed as assumed_mod
from kruntimes.scheduler.recording import CountingRecorder, Recorder
from kruntimes.scheduler.loop import Scheduler

log = logging.getLogger(__name__)


class Resyncable(Protocol):
    def resync(self, timeout: float) -> bool: ...


class TermError(Exception):
    """A term could not start; the elector steps down and campaigns again."""


class Terms:
    def __init__(self, scheduler: Scheduler, intake: Intake, settings: ClusterSettings, *,
                 resync: list[Resyncable], identity: str,
                 open_journal: Callable[[], JournalSession | None],
                 standby_recorder: Recorder | None = None) -> None:
        self.scheduler = scheduler
        self.cache = scheduler.cache
        self.intake = intake
        self.settings = settings
        self.identity = identity
        self._resync = resync
        self._open_journal = open_journal
        self._standby_recorder: Recorder = standby_recorder or CountingRecorder()
        self.session: JournalSession | None = None
        self.leading = False
        self.started = 0  # terms begun, for tests and logs
        self.last_journal_lsn = 0  # the last LSN a term of this process journaled: the next numbers on after it

    def begin(self, lease: LeaseRecord) -> None:
        timeout = self.settings.request_timeout
        for informer in self._resync:
            if not informer.resync(timeout):
                raise TermError(f"could not relist within {timeout}s before leading")
        session = self._open_journal()
        cache = self.cache
        with cache.lock:
            self._drop_assumptions()
            if session is not None:
                session.attach(cache)
                cache.recorder = session.recorder
                cache.lsn = session.recorder.checkpoint()
            cache.record("leader", {"event": "acquired", "identity": self.identity,
                                    "lease": f"{self.settings.lease.namespace}/{self.settings.lease.name}",
                                    "transitions": lease.transitions})
            self.session = session
            self.intake.set_leading(True)
            self.leading = True
        self.started += 1
        # Every assignment of this term carries it; the server refuses other terms' (SPEC §3.6).
        self.scheduler.lease_term = lease.transitions if self.settings.leader_elect else None
        self.scheduler.enqueue_pending()
        self.scheduler.start()
        journal = None if session is None else {"epoch": session.epoch, "first_lsn": session.first_lsn}
        log.info("leading: scheduling, writes sent by %d binder processes", self.settings.binders,
                 extra={"pending": len(self.cache.pending_keys()), "identity": self.identity, "journal": journal})

    def end(self, reason: str) -> None:
        self.intake.set_leading(False)
        if not self.scheduler.pause(self.settings.shutdown_timeout):
            log.error("a scheduling cycle did not finish within %.1fs of the end of the term",
                      self.settings.shutdown_timeout)
        cache = self.cache
        with cache.lock:
            dropped = self._drop_assumptions()
            if self.leading:
                cache.record("leader", {"event": "lost", "identity": self.identity, "reason": reason,
                                        "assumptions_dropped": dropped})
            if self.session is not None:
                self.session.end(reason)
            self._detach()
            session, self.session = self.session, None
            self.leading = False
        journal = None
        if session is not None:
            session.close(self.settings.shutdown_timeout, reason=reason)
            journal = {"epoch": session.epoch, "last_lsn": session.recorder.lsn, "spooled": session.writer.spooled}
        log.info("term ended: %s", reason, extra={"identity": self.identity, "assumptions_dropped": dropped,
                                                  "journal": journal})

    def crash(self) -> None:
        """Stop as a killed process would, for tests: no records, no release; only the threads end."""
        self.intake.set_leading(False)
        self.scheduler.pause(1.0)
        with self.cache.lock:
            self._detach()
            session, self.session = self.session, None
            self.leading = False
        if session is not None:
            session.close(self.settings.shutdown_timeout, reason=None)  # no end record: a later writer recovers it

    def _drop_assumptions(self) -> int:
        """Release every assumption (a term starts and ends with an empty assumed cache)."""
        leftovers = list(self.cache.assumed)
        for a in leftovers:
            self.cache.release(a.namespace, a.run_uid, assumed_mod.RELEASE_ABORTED)
        return len(leftovers)

    def _detach(self) -> None:
        """Back to the standby recorder, numbering on from where the term stopped."""
        if self.session is not None:
            self.last_journal_lsn = max(self.last_journal_lsn, self.session.recorder.lsn)
        standby = self._standby_recorder
        if isinstance(standby, CountingRecorder):
            standby.lsn = max(standby.lsn, self.cache.lsn)
        self.cache.recorder = standby
