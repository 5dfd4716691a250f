"""JournalWriter: the producer appends, a background thread makes records durable.

``append`` is a lock-protected deque push, called under the lock that assigned the
record's LSN (which keeps the buffer in LSN order). The thread takes up to
``max_batch`` records as soon as there are any, builds deferred payloads and encodes
(a bad record is rejected and counted, its batch goes on), writes each batch in one
transaction, and on a failed or too slow write spills this and every later batch in
order to the spool (fsync'd per batch), retrying with backoff; once the database
answers it drains the spool first (``skip_existing``: a crash mid-drain never
duplicates). A call the database has not answered within ``write_timeout`` counts as
failed (``deadline``), so a record is durable within that bound whatever the database does. If the spool fails too, ``policy="block"`` holds the batch and the
buffer fills; ``"drop"`` drops and counts. docs/journal.md has the whole picture.

The chain (SPEC §5 "Integrity"): the thread links every record to the one before it
in its epoch (``linker.Linker``: ``chain.link``, an HMAC with a key) as it encodes it, keeps each epoch's
head in memory, and stores the link with the record, in the database or the spool;
the database moves the epoch's head in the same transaction. A record of an epoch
whose head it does not know (a restarted writer process mid-epoch) goes without a
link and is linked from the stored head when it reaches the database.

What becomes of spooled records - the drain, the checks that keep a forged or
mismatched record out of the database, the quarantine - and the closing of epochs a
killed process left open are in ``spool_drain``: a ``SpoolDrain`` the writer builds with what it needs.

State is kept in memory only: a killed process loses what was still buffered;
everything spooled or committed survives.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from kruntimes.journal import chain, errors, linker, payloads, records
from kruntimes.journal.write import backoff, handover, intake, metrics, spool, spool_drain
from kruntimes.journal.store import backends, deadline

log = logging.getLogger("kruntimes.journal.writer")  # the name operators' log configuration knows

Policy = intake.Policy


#: A moving head is published (log line) at most this often; an ended epoch's at once.
HEAD_LOG_INTERVAL = 60.0
#: How long ``last_lsn`` waits for the database when the spool already knows an LSN.
LAST_LSN_PROBE_SECONDS = 1.0
#: Closing, once the database has had its time: the rest goes to the spool, and the
#: close waits for it as long as a batch settles at least this long after a call in
#: flight (the write timeout) has been given up on; a spool that takes nothing for that
#: long loses the rest, counted and logged.
SPOOL_AT_CLOSE_SECONDS = 5.0
Record = records.JournalRecord | records.EncodedRecord | payloads.DeferredRecord


class JournalWriter:
    """Buffered, batching, spilling writer in front of one ``Journal``."""

    #: The recorder may hand over ``DeferredRecord`` s: their payloads are built here.
    accepts_deferred = True

    def __init__(
        self,
        journal: backends.Journal,
        *,
        spool_path: str | os.PathLike[str],
        buffer_size: int = 100_000,
        max_batch: int = 1_000,
        max_payload_bytes: int = records.DEFAULT_MAX_PAYLOAD_BYTES,
        slow_write_seconds: float = 5.0,
        retry_interval: float = 0.5,
        max_retry_interval: float = 30.0,
        policy: Policy = "block",
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        observe_latency: Callable[[float], None] | None = None,
        spool_wait: float = 0.0,
        commit_interval: float = 0.0,
        key_file: str | None = None,
        epoch: str | None = None,
        recover_all: bool = False,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        write_timeout: float = deadline.DEFAULT_SECONDS,
    ) -> None:
        if max_batch < 1:
            raise ValueError("buffer_size and max_batch must be positive")
        self._in = intake.Intake(buffer_size, policy, bound_unsettled=False)
        self._journal = journal
        # Every database call answers within write_timeout or counts as failed (SPEC §5 "Availability").
        self._deadline = deadline.Deadline(getattr(journal, "engine", None), write_timeout)
        if isinstance(journal, backends.Journal):
            journal.statement_seconds = write_timeout
        self._max_batch = max_batch
        self._max_payload_bytes = max_payload_bytes
        self._slow_write_seconds = slow_write_seconds
        self._backoff = backoff.Backoff(clock, retry_interval, max_retry_interval)
        self._policy = policy
        self._clock = clock
        # Fewer than max_batch records wait this long after the last batch began before
        # the next one: a commit costs about what inserting ~50 records does, and a
        # writer that keeps up would otherwise commit every trickle on its own.
        self._commit_interval = commit_interval
        self._last_batch = float("-inf")
        self._hurry_until = 0  # records appended before a flush asked for them: no lingering for those
        self._spool_rest = False  # closing, the database had its time: every batch goes to the spool

        # Opening the spool now (not in start) truncates a torn tail and tells
        # last_lsn() about spooled records before the scheduler picks its first LSN.
        self._spool = spool.Spool.open(spool_path, wait=spool_wait)
        self._thread: threading.Thread | None = None
        try:
            self._key = chain.load_key(key_file)
            self._linker = linker.Linker(self._key)
        except BaseException:
            self._spool.close()
            raise
        self._wall_clock = wall_clock
        self._epoch = epoch

        # The chain, owned by the writer thread: each epoch's last link computed (spooled
        # or stored), the epochs whose head it does not know (their records go without a
        # link until the database links them), and the heads the database holds.
        self._heads: dict[str, tuple[int, str]] = {
            epoch: (h.lsn, h.chain_hash) for epoch, h in self._spool.heads.items() if h.chain_hash
        }
        self._unlinked: set[str] = {epoch for epoch, h in self._spool.heads.items() if not h.chain_hash}
        self._stored_heads: dict[str, tuple[int, str]] = {}
        self._ended = False  # this writer's epoch's end record is durable
        self._head_logged_at = float("-inf")
        self._head_logged: tuple[int, str] | None = None
        # The counts so far, in the shape stats() reports (which fills in the rest); the drain counts here too.
        self._tally = metrics.WriterStats()
        self._drain = spool_drain.SpoolDrain(
            self._spool, journal, self._deadline, self._linker, self._backoff, self._tally, store=self._write,
            log_head=self._log_head, wall_clock=wall_clock, max_batch=max_batch, epoch=epoch, recover_all=recover_all)

        # Owned by the writer thread (read by stats() without a lock: ints only).
        self._spilling = len(self._spool) > 0  # older records wait in the spool
        self._held: list[records.EncodedRecord] = []  # neither the database nor the spool took them

        self._metrics = metrics.for_registry(registry)
        self._metrics.collector.attach(self)
        self._observe_latency = observe_latency or self._metrics.write_latency.observe
        if self._spilling:
            log.warning(
                "journal spool %s holds %d records from an earlier run; draining them first",
                self._spool.path,
                len(self._spool),
            )

    # -- producer side -------------------------------------------------------------

    def start(self) -> JournalWriter:
        """Start the background thread (idempotent); returns self."""
        with self._in.lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kruntimes-journal-writer", daemon=True)
                self._thread.start()
        return self

    def __enter__(self) -> JournalWriter:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def last_lsn(self, timeout: float | None = None) -> int | None:
        """The highest durable LSN known (spool and database): a new epoch numbers on after it.

        With records in the spool the database gets a bounded probe
        (``LAST_LSN_PROBE_SECONDS``) and is left out if it does not answer in time: the
        epoch's keys cannot collide with another's whatever it numbers from (SPEC §5).
        Raises ``JournalUnavailable`` when the spool is empty and the database cannot answer
        (within ``timeout`` seconds, if given: a term must not wait for the database).
        Each earlier epoch to close (``end`` recovered, after its head) is counted in, so
        the new epoch's LSNs stay clear of those end records too.
        """
        spooled = self._spool.last_lsn
        if spooled is None:
            known = self._journal.last_lsn() if timeout is None else self._journal.last_lsn(timeout)
        else:
            try:
                known = max(spooled, self._journal.last_lsn(LAST_LSN_PROBE_SECONDS) or 0)
            except errors.JournalError:  # unreachable or slow: the spool's last LSN is enough
                known = spooled
        # Each epoch this writer will close takes the LSN after its head for its end record - or after
        # the last one its scheduler handed over (``handover``), when that is higher.
        if known is None:
            return None
        handed = [handover.handed(self._spool.path, epoch) or 0 for epoch in self._drain.to_recover]
        return max([known + len(self._drain.to_recover), *(lsn + 1 for lsn in handed)])

    def append(self, record: Record) -> bool:
        """Queue ``record``; return False if the drop policy dropped it (buffer full).

        Under the block policy a full buffer blocks until the writer frees room.
        ``record`` may be pre-encoded (``records.encode``) to move encoding off the
        writer thread.
        """
        return self._in.append(record)

    def extend(self, batch: list[Record]) -> int:
        """Queue ``batch`` in order, as ``append`` would; return how many the drop policy dropped."""
        return self._in.extend(batch)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record appended so far is durable (database or spool), rejected or dropped."""
        if self._thread is None:  # nothing would ever settle them
            return self._in.settled >= self._in.appended
        self.hurry()
        return self._in.flush(timeout)

    def hurry(self) -> None:
        """Write what is appended so far without waiting out the commit interval: someone waits for it."""
        with self._in.lock:
            self._hurry_until = self._in.appended
            self._in.has_work.notify_all()

    def progress(self, after: int, timeout: float | None = None) -> int:
        """How many appended records have settled, once more than ``after`` have (or on timeout)."""
        return self._in.wait_progress(after, timeout)

    def drain(self, timeout: float | None = None) -> bool:
        """Like ``flush``, but wait until the records are in the database (spool empty)."""
        i = self._in
        with i.lock:
            target = i.appended
            if self._thread is None:
                return False
            return i.progress.wait_for(
                lambda: (i.settled >= target and not self._spilling and not self._held) or i.abandon, timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush, stop the thread and close the spool.

        Records the database has not taken within ``timeout`` go to the spool (SPEC §5:
        every record handed over is in the database or the spool once the writer has
        closed); only those neither could take (the spool failing too, under the block
        policy) are counted as dropped and logged.
        """
        flushed = self.flush(timeout) if self._thread is not None else True
        if not flushed:
            flushed = self._spool_the_rest()
        self._in.stop(abandon=not flushed)
        if self._thread is not None:
            # Settled, it stops at once - unless a drain or recovery call is in flight: bounded by the deadline.
            wait = None if timeout is None else self._deadline.seconds + SPOOL_AT_CLOSE_SECONDS
            self._thread.join(wait)
            if self._thread.is_alive():
                log.error("journal writer thread did not stop within %.1fs (a database call hangs?)", wait)
                return  # the thread still uses the spool
        self._deadline.close()
        lost = len(self._in.buffer) + len(self._held)
        if lost:
            log.error("journal writer closed with %d records neither in the database nor in the spool", lost)
            self._tally.dropped += lost
            self._in.buffer.clear()
            self._held = []
        if self._ended:  # this epoch is closed: nothing for the next writer to recover
            spool_drain.write_note(self._drain.note_path, self._drain.to_recover)
        self._publish_head()
        self._spool.close()
        self._metrics.collector.retire(self)

    def _spool_the_rest(self) -> bool:
        """(Closing.) Send every record not yet durable to the spool; True once all have settled.

        Waits as long as records keep settling: a call in flight answers (or is given
        up on) within the write timeout, and the spool then takes a batch per fsync.
        """
        i = self._in
        with i.lock:
            self._spool_rest = True
            target, settled = i.appended, i.settled
            i.has_work.notify_all()
        log.warning("journal writer closing: %d records the database has not taken yet go to the spool %s",
                    target - settled, self._spool.path)
        window = self._deadline.seconds + SPOOL_AT_CLOSE_SECONDS
        while settled < target:
            with i.lock:
                before = settled
                i.progress.wait_for(lambda: i.settled > before or i.abandon, window)
                settled = i.settled
            if settled == before:  # the spool took nothing for a whole window
                return False
        return True

    def stats(self) -> metrics.WriterStats:
        """Totals so far (what the Prometheus metrics report for this writer)."""
        return metrics.WriterStats(
            appended=self._in.appended,
            written=self._tally.written,
            spilled=self._tally.spilled,
            dropped=self._tally.dropped + self._in.dropped,
            rejected=dict(self._tally.rejected),
            write_errors=self._tally.write_errors,
            buffer_depth=len(self._in.buffer),
            head_lsn=self._head_lsn(),
            quarantined=self._tally.quarantined,
            history_deferred=int(self._journal.history_deferred),
        )

    def _head_lsn(self) -> int:
        if self._epoch is None:
            return max((lsn for lsn, _ in self._stored_heads.values()), default=0)
        return self._stored_heads.get(self._epoch, (0, ""))[0]

    @property
    def quarantine_path(self) -> Path:
        """Where records a drain refused to store are kept (spool format)."""
        return self._drain.quarantine_path

    @property
    def ended(self) -> bool:
        """This writer's epoch's end record is durable (database or spool)."""
        return self._ended

    @property
    def recovering(self) -> bool:
        """Earlier epochs found in the spool (or its note) are still to be closed."""
        return bool(self._drain.to_recover)

    @property
    def spooled(self) -> int:
        """Records currently waiting in the spool file."""
        return len(self._spool)

    # -- writer thread ----------------------------------------------------------------

    def _run(self) -> None:
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
            if i.buffer and not self._held:
                linger = self._last_batch + self._commit_interval - self._clock()
                if (linger <= 0 or i.stopping or self._spool_rest or len(i.buffer) >= self._max_batch
                        or i.settled < self._hurry_until):
                    self._last_batch = self._clock()
                    return i.take(self._max_batch)
                i.consumer_waiting = True  # a full batch must not wait: appends wake us to count again
                try:
                    i.has_work.wait(linger)
                finally:
                    i.consumer_waiting = False
                continue
            if i.stopping and not self._held:
                return None  # a non-empty spool stays for the next start to drain
            retrying = self._spilling or bool(self._held) or bool(self._drain.to_recover)
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
        rows = self._held + self._linked(encoded)
        sources: list[Any] | None = [None] * len(self._held) + built if self._held else built
        unsettled_before = len(self._held) + len(batch)
        spool_first = self._spilling and not self._held  # (held: the spool failed them, the database may not)
        self._held = []
        try:
            # Behind the spooled ones, and durable before any database call; or closing,
            # the database had its time: the spool takes the rest, for the next writer to drain.
            if rows and (spool_first or self._spool_rest):
                outcome = self._spill(rows)
                if outcome == "dropped":
                    self._heads = before  # the chain goes on from the last durable record
                self._spilling = self._spilling or outcome == "spooled"
                rows = []
            if self._spilling and not self._spool_rest:
                if self._drain.drain():
                    self._spilling = False
            if rows and not self._spilling and self._write(rows, skip_existing=False, payloads=sources):
                rows = []
            if rows and self._spill(rows) == "dropped":
                self._heads = before  # the chain goes on from the last durable record
            if not self._spilling and not self._held:
                self._settle_chain()
                if self._drain.to_recover and self._clock() >= self._backoff.next_at and not self._spool_rest:
                    self._drain.recover()
        except Exception:  # a bug must not kill the thread silently: keep the rows, retry later
            log.exception("journal writer: unexpected error; retrying the batch")
            self._tally.write_errors += 1
            self._held = rows
            self._backoff.fail()
        self._publish_head()
        return unsettled_before - len(self._held)

    def _linked(self, rows: list[records.EncodedRecord]) -> list[records.EncodedRecord]:
        """``rows`` with their links, in order; a row of an epoch whose head is unknown goes without one."""
        return self._linker.onto(rows, self._heads, self._unlinked)

    def _settle_chain(self) -> None:
        """(Nothing waits in the spool.) Epochs the database linked continue from its heads."""
        for epoch in list(self._unlinked):
            head = self._stored_heads.get(epoch)
            if head is not None:
                self._heads[epoch] = head
                self._unlinked.discard(epoch)

    def _durable(self, rows: list[records.EncodedRecord]) -> None:
        """``rows`` are in the database or the spool: note this epoch's end."""
        if self._epoch is not None and not self._ended:
            for r in rows:
                if r.kind == "end" and r.incarnation == self._epoch:
                    self._ended = True

    def _write(self, rows: list[records.EncodedRecord], *, skip_existing: bool,
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
            rows[:] = self._drain.quarantine_from(rows, {epoch: lsn for epoch, lsn in reversed(exc.keys)}, "conflict",
                                            "is stored with other content or link")
            return self._write(rows, skip_existing=True) if rows else True
        except Exception as exc:
            self._tally.write_errors += 1
            log.warning("journal database write of %d records failed, spilling to %s: %s", len(rows), self._spool.path, exc)
            self._spilling = True
            self._backoff.fail()
            return False
        for epoch, head in heads.items():
            if head[0] > self._stored_heads.get(epoch, (-1, ""))[0]:
                self._stored_heads[epoch] = head
        elapsed = self._clock() - started
        self._observe_latency(elapsed)
        self._tally.written += len(rows)
        self._durable(rows)
        if elapsed > self._slow_write_seconds:
            # Written, but the database is struggling: spill what comes next and
            # let it recover instead of stalling behind it.
            self._tally.write_errors += 1
            log.warning("journal database write took %.1fs (> %.1fs); spilling for a while", elapsed, self._slow_write_seconds)
            self._spilling = True
            self._backoff.fail()
        return True

    def _append(self, rows: list[records.EncodedRecord], skip_existing: bool, heads: dict[str, tuple[int, str]],
                payloads: list[Any] | None) -> None:
        self._deadline.call("write", self._journal.append_batch, rows, skip_existing=skip_existing, key=self._key,
                            heads=heads, payloads=payloads)

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
            self._held = rows
            log.error("journal: holding %d records, neither database nor spool writable: %s", len(rows), exc)
            self._backoff.fail()
            return "held"
        self._tally.spilled += len(rows)
        self._durable(rows)
        return "spooled"

    # -- epochs: the published head (their recovery: spool_drain) -----------------------

    def _publish_head(self) -> None:
        """Log this epoch's stored head when it ended, and at most every HEAD_LOG_INTERVAL while it moves."""
        epoch = self._epoch
        if epoch is None:
            return
        head = self._stored_heads.get(epoch)
        if head is None or head == self._head_logged:
            return
        ended = self._ended and not self._spilling
        if ended or self._clock() - self._head_logged_at >= HEAD_LOG_INTERVAL:
            self._log_head(epoch, *head)
            self._head_logged, self._head_logged_at = head, self._clock()

    @staticmethod
    def _log_head(epoch: str, lsn: int, link: str) -> None:
        log.info("journal head", extra={"epoch": epoch, "lsn": lsn, "hash": link})
