"""The writer thread: takes batches from the intake and makes them durable, in the database or the spool.

A ``JournalWriter`` hands its ``Committer`` the intake its producers fill and the parts
both sides share (spool, journal behind its deadline, ``Linker``, ``Backoff``, counts);
the committer runs on the writer's thread and owns everything only that thread changes:
the chain's heads, whether it spills, the records neither database nor spool took.

Each turn (``run``): wait for records (up to ``max_batch``, lingering ``commit_interval``
for a fuller batch unless someone waits for them) or for a due retry; build deferred
payloads and encode (a bad record is rejected and counted, its batch goes on); link each
record to the one before it in its epoch (``linker.Linker``); write the batch in one
transaction, or on a failed or too slow write spill it and every later one in order to
the spool, retrying with backoff. Once the database answers, its ``SpoolDrain`` moves
the spool in first and closes epochs a killed process left open.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kruntimes.journal import errors, linker, payloads, records
from kruntimes.journal.store import backends, deadline
from kruntimes.journal.write import backoff, intake, metrics, settings, spool, spool_drain

log = logging.getLogger("kruntimes.journal.writer")  # the writer's lines: operators' log configuration knows the name

#: A moving head is published (log line) at most this often; an ended epoch's at once.
HEAD_LOG_INTERVAL = 60.0
Record = records.JournalRecord | records.EncodedRecord | payloads.DeferredRecord


class Committer:
    """The writer thread's side of a ``JournalWriter``: batches in, durable records out.

    The writer reads ``spilling``, ``held``, ``ended`` and ``drain`` (ints, lists and
    flags, without a lock), and sets ``hurry_until`` and ``spool_rest`` under the
    intake's lock.
    """

    def __init__(self, intake: intake.Intake, spool: spool.Spool, journal: backends.Journal,
                 deadline: deadline.Deadline, linker: linker.Linker, backoff: backoff.Backoff,
                 tally: metrics.WriterStats, *, batching: settings.Batching, patience: settings.Patience,
                 epochs: settings.Epochs, observe_latency: Callable[[float], None],
                 wall_clock: Callable[[], datetime]) -> None:
        self._in = intake
        self._spool = spool
        self._journal = journal
        self._deadline = deadline
        self._linker = linker
        self._backoff = backoff
        self._tally = tally
        self._clock = backoff.clock
        self._observe_latency = observe_latency
        self._max_batch = batching.max_batch
        self._max_payload_bytes = batching.max_payload_bytes
        # Fewer than max_batch records wait this long after the last batch began before
        # the next one: a commit costs about what inserting ~50 records does, and a
        # writer that keeps up would otherwise commit every trickle on its own.
        self._commit_interval = batching.commit_interval or 0.0
        self._policy = batching.policy
        self._slow_write_seconds = patience.slow_write_seconds
        self._epoch = epochs.epoch
        self._last_batch = float("-inf")
        self.hurry_until = 0  # records appended before a flush asked for them: no lingering for those
        self.spool_rest = False  # closing, the database had its time: every batch goes to the spool

        # The chain: each epoch's last link computed (spooled or stored), the epochs whose
        # head it does not know (their records go without a link until the database links
        # them), and the heads the database holds.
        self._heads: dict[str, tuple[int, str]] = {
            epoch: (h.lsn, h.chain_hash) for epoch, h in spool.heads.items() if h.chain_hash
        }
        self._unlinked: set[str] = {epoch for epoch, h in spool.heads.items() if not h.chain_hash}
        self.stored_heads: dict[str, tuple[int, str]] = {}
        self.ended = False  # this writer's epoch's end record is durable
        self._head_logged_at = float("-inf")
        self._head_logged: tuple[int, str] | None = None
        self.drain = spool_drain.SpoolDrain(
            spool, journal, deadline, linker, backoff, tally, store=self.write, log_head=log_head,
            wall_clock=wall_clock, max_batch=batching.max_batch, epochs=epochs)
        self.spilling = len(spool) > 0  # older records wait in the spool
        self.held: list[records.EncodedRecord] = []  # neither the database nor the spool took them

    def head_lsn(self) -> int:
        """The stored head's LSN of this writer's epoch (of any epoch, without one)."""
        if self._epoch is None:
            return max((lsn for lsn, _ in self.stored_heads.values()), default=0)
        return self.stored_heads.get(self._epoch, (0, ""))[0]

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """The writer thread: batch after batch until the intake stops (or is abandoned)."""
        while True:
            with self._in.lock:
                batch = self._next_batch()
                if batch is None:
                    self._in.progress.notify_all()
                    return
            settled = self._process(batch)
            with self._in.lock:
                self._in.settle(self._in.settled + settled)

    def _next_batch(self) -> list[Record] | None:
        """Wait (lock held) for records or a due retry; None means stop."""
        i = self._in
        while True:
            if i.abandon:
                return None
            if i.buffer and not self.held:
                linger = self._last_batch + self._commit_interval - self._clock()
                if (linger <= 0 or i.stopping or self.spool_rest or len(i.buffer) >= self._max_batch
                        or i.settled < self.hurry_until):
                    self._last_batch = self._clock()
                    return i.take(self._max_batch)
                i.consumer_waiting = True  # a full batch must not wait: appends wake us to count again
                try:
                    i.has_work.wait(linger)
                finally:
                    i.consumer_waiting = False
                continue
            if i.stopping and not self.held:
                return None  # a non-empty spool stays for the next start to drain
            retrying = self.spilling or bool(self.held) or bool(self.drain.to_recover)
            if retrying and self._clock() >= self._backoff.next_at:
                return []
            i.consumer_waiting = True
            try:
                i.has_work.wait(max(0.0, self._backoff.next_at - self._clock()) if retrying else None)
            finally:
                i.consumer_waiting = False

    def _process(self, batch: list[Record]) -> int:
        """Make ``batch`` (after any held records) durable; return how many records settled."""
        before = dict(self._heads)
        encoded, built = payloads.encode_batch(batch, self._max_payload_bytes, self._tally.rejected)
        rows = self.held + self._linked(encoded)
        sources: list[Any] | None = [None] * len(self.held) + built if self.held else built
        unsettled_before = len(self.held) + len(batch)
        spool_first = self.spilling and not self.held  # (held: the spool failed them, the database may not)
        self.held = []
        try:
            # Behind the spooled ones, and durable before any database call; or closing,
            # the database had its time: the spool takes the rest, for the next writer to drain.
            if rows and (spool_first or self.spool_rest):
                outcome = self._spill(rows)
                if outcome == "dropped":
                    self._heads = before  # the chain goes on from the last durable record
                self.spilling = self.spilling or outcome == "spooled"
                rows = []
            if self.spilling and not self.spool_rest:
                if self.drain.drain():
                    self.spilling = False
            if rows and not self.spilling and self.write(rows, skip_existing=False, payloads=sources):
                rows = []
            if rows and self._spill(rows) == "dropped":
                self._heads = before  # the chain goes on from the last durable record
            if not self.spilling and not self.held:
                self._settle_chain()
                if self.drain.to_recover and self._clock() >= self._backoff.next_at and not self.spool_rest:
                    self.drain.recover()
        except Exception:  # a bug must not kill the thread silently: keep the rows, retry later
            log.exception("journal writer: unexpected error; retrying the batch")
            self._tally.write_errors += 1
            self.held = rows
            self._backoff.fail()
        self.publish_head()
        return unsettled_before - len(self.held)

    # -- the chain ----------------------------------------------------------------------------

    def _linked(self, rows: list[records.EncodedRecord]) -> list[records.EncodedRecord]:
        """``rows`` with their links, in order; a row of an epoch whose head is unknown goes without one."""
        return self._linker.onto(rows, self._heads, self._unlinked)

    def _settle_chain(self) -> None:
        """(Nothing waits in the spool.) Epochs the database linked continue from its heads."""
        for epoch in list(self._unlinked):
            head = self.stored_heads.get(epoch)
            if head is not None:
                self._heads[epoch] = head
                self._unlinked.discard(epoch)

    def _durable(self, rows: list[records.EncodedRecord]) -> None:
        """``rows`` are in the database or the spool: note this epoch's end."""
        if self._epoch is not None and not self.ended:
            for r in rows:
                if r.kind == "end" and r.incarnation == self._epoch:
                    self.ended = True

    # -- database and spool ---------------------------------------------------------------------

    def write(self, rows: list[records.EncodedRecord], *, skip_existing: bool,
              payloads: list[Any] | None = None) -> bool:
        """One transaction; False (and spill mode) if the database failed or was too slow.

        Rows stored under their key with other content or link are moved to the
        quarantine (with the rest of their epoch in ``rows``), never stored. ``payloads``,
        aligned with ``rows``, are their payload dicts where the writer still has them
        (the history tables are derived from them instead of the JSON text).
        """
        started = self._clock()
        heads: dict[str, tuple[int, str]] = {}  # filled by the call's thread once it commits
        try:
            try:
                self._append(rows, skip_existing, heads, payloads)
            except errors.DuplicateRecord:
                if skip_existing:
                    raise
                # Usually a commit whose acknowledgement was lost: store what is missing.
                self._append(rows, True, heads, payloads)
        except errors.DuplicateRecord as exc:
            if not exc.keys:
                raise
            rows[:] = self.drain.quarantine_from(rows, {epoch: lsn for epoch, lsn in reversed(exc.keys)}, "conflict",
                                                 "is stored with other content or link")
            return self.write(rows, skip_existing=True) if rows else True
        except Exception as exc:
            self._tally.write_errors += 1
            log.warning("journal database write of %d records failed, spilling to %s: %s", len(rows), self._spool.path, exc)
            self.spilling = True
            self._backoff.fail()
            return False
        for epoch, head in heads.items():
            if head[0] > self.stored_heads.get(epoch, (-1, ""))[0]:
                self.stored_heads[epoch] = head
        elapsed = self._clock() - started
        self._observe_latency(elapsed)
        self._tally.written += len(rows)
        self._durable(rows)
        if elapsed > self._slow_write_seconds:
            # Written, but the database is struggling: spill what comes next and
            # let it recover instead of stalling behind it.
            self._tally.write_errors += 1
            log.warning("journal database write took %.1fs (> %.1fs); spilling for a while", elapsed, self._slow_write_seconds)
            self.spilling = True
            self._backoff.fail()
        return True

    def _append(self, rows: list[records.EncodedRecord], skip_existing: bool, heads: dict[str, tuple[int, str]],
                payloads: list[Any] | None) -> None:
        self._deadline.call("write", self._journal.append_batch, rows, skip_existing=skip_existing,
                            key=self._linker.key, heads=heads, payloads=payloads)

    def _spill(self, rows: list[records.EncodedRecord]) -> str:
        """Spool ``rows``: "spooled", "held" (block policy, retried) or "dropped" (drop policy)."""
        try:
            self._spool.append(rows)
        except errors.SpoolUnwritable as exc:
            self._tally.write_errors += 1
            if self._policy == "drop":
                self._tally.dropped += len(rows)
                log.error("journal: dropped %d records, neither database nor spool writable: %s", len(rows), exc)
                return "dropped"
            self.held = rows
            log.error("journal: holding %d records, neither database nor spool writable: %s", len(rows), exc)
            self._backoff.fail()
            return "held"
        self._tally.spilled += len(rows)
        self._durable(rows)
        return "spooled"

    # -- epochs: the published head (their recovery: spool_drain) ---------------------------------

    def publish_head(self) -> None:
        """Log this epoch's stored head when it ended, and at most every HEAD_LOG_INTERVAL while it moves."""
        epoch = self._epoch
        if epoch is None:
            return
        head = self.stored_heads.get(epoch)
        if head is None or head == self._head_logged:
            return
        ended = self.ended and not self.spilling
        if ended or self._clock() - self._head_logged_at >= HEAD_LOG_INTERVAL:
            log_head(epoch, *head)
            self._head_logged, self._head_logged_at = head, self._clock()


def log_head(epoch: str, lsn: int, link: str) -> None:
    """The head operators read from the log: an epoch's last stored record and its link."""
    log.info("journal head", extra={"epoch": epoch, "lsn": lsn, "hash": link})
