"""JournalWriter: the producer appends, a background thread makes records durable.

``append`` is a lock-protected deque push, called under the lock that assigned the
record's LSN (which keeps the buffer in LSN order). The thread takes up to
``max_batch`` records as soon as there are any, builds deferred payloads and encodes
(a bad record is rejected and counted, its batch goes on), writes each batch in one
transaction, and on a failed or too slow write spills this and every later batch in
order to the spool (fsync'd per batch), retrying with backoff; once the database
answers it drains the spool first (``skip_existing``: a crash mid-drain never
duplicates). If the spool fails too, ``policy="block"`` holds the batch and the
buffer fills; ``"drop"`` drops and counts. docs/journal.md has the whole picture.

State is kept in memory only: a killed process loses what was still buffered;
everything spooled or committed survives.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from kruntimes.journal import backends, errors, intake, metrics, payloads, records, spool

log = logging.getLogger(__name__)

Policy = intake.Policy
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
    ) -> None:
        if max_batch < 1:
            raise ValueError("buffer_size and max_batch must be positive")
        self._in = intake.Intake(buffer_size, policy, bound_unsettled=False)
        self._journal = journal
        self._max_batch = max_batch
        self._max_payload_bytes = max_payload_bytes
        self._slow_write_seconds = slow_write_seconds
        self._min_retry = retry_interval
        self._max_retry = max_retry_interval
        self._policy = policy
        self._clock = clock
        # Fewer than max_batch records wait this long after the last batch began before
        # the next one: a commit costs about what inserting ~50 records does, and a
        # writer that keeps up would otherwise commit every trickle on its own.
        self._commit_interval = commit_interval
        self._last_batch = float("-inf")
        self._hurry_until = 0  # records appended before a flush asked for them: no lingering for those

        # Opening the spool now (not in start) truncates a torn tail and tells
        # last_lsn() about spooled records before the scheduler picks its first LSN.
        self._spool = spool.Spool.open(spool_path, wait=spool_wait)
        self._thread: threading.Thread | None = None

        # Owned by the writer thread (read by stats() without a lock: ints only).
        self._spilling = len(self._spool) > 0  # older records wait in the spool
        self._drain_offset = 0
        self._held: list[records.EncodedRecord] = []  # neither the database nor the spool took them
        self._next_retry = 0.0
        self._retry = retry_interval
        self._written = self._spilled = self._dropped = self._write_errors = 0
        self._rejected = dict.fromkeys(metrics.REJECT_REASONS, 0)

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

    def last_lsn(self) -> int | None:
        """The last durable LSN (spool first, else database): a new incarnation starts after it.

        Raises ``JournalUnavailable`` when the spool is empty and the database cannot answer.
        """
        spooled = self._spool.last_lsn
        return spooled if spooled is not None else self._journal.last_lsn()

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

        Records still not durable after ``timeout`` (database and spool both failing
        under the block policy) are counted as dropped and logged.
        """
        flushed = self.flush(timeout) if self._thread is not None else True
        self._in.stop(abandon=not flushed)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("journal writer thread did not stop within %.1fs (a database call hangs?)", timeout)
                return  # the thread still uses the spool
        lost = len(self._in.buffer) + len(self._held)
        if lost:
            log.error("journal writer closed with %d records neither in the database nor in the spool", lost)
            self._dropped += lost
            self._in.buffer.clear()
            self._held = []
        self._spool.close()
        self._metrics.collector.retire(self)

    def stats(self) -> metrics.WriterStats:
        """Totals so far (what the Prometheus metrics report for this writer)."""
        return metrics.WriterStats(
            appended=self._in.appended,
            written=self._written,
            spilled=self._spilled,
            dropped=self._dropped + self._in.dropped,
            rejected=dict(self._rejected),
            write_errors=self._write_errors,
            buffer_depth=len(self._in.buffer),
        )

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
                if (linger <= 0 or i.stopping or len(i.buffer) >= self._max_batch
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
            retrying = self._spilling or bool(self._held)
            if retrying and self._clock() >= self._next_retry:
                return []
            i.consumer_waiting = True
            try:
                i.has_work.wait(max(0.0, self._next_retry - self._clock()) if retrying else None)
            finally:
                i.consumer_waiting = False

    def _process(self, batch: list[Record]) -> int:
        """Make ``batch`` (after any held records) durable; return how many records settled."""
        encoded, built = self._encode(batch)
        rows = self._held + encoded
        sources = [None] * len(self._held) + built if self._held else built
        unsettled_before = len(self._held) + len(batch)
        self._held = []
        try:
            if self._spilling:
                self._drain_spool()
            if rows and not self._spilling and self._write(rows, skip_existing=False, payloads=sources):
                return unsettled_before
            if rows:
                self._spill(rows)
        except Exception:  # a bug must not kill the thread silently: keep the rows, retry later
            log.exception("journal writer: unexpected error; retrying the batch")
            self._write_errors += 1
            self._held = rows
            self._schedule_retry()
        return unsettled_before - len(self._held)

    def _encode(self, batch: list[Record]) -> tuple[list[records.EncodedRecord], list[Any]]:
        """The stored form of each record (rejected ones counted and left out), with its payload dict.

        The payload dicts (None for records that came encoded) go with the rows to the
        journal, which derives the history tables from them without parsing the JSON again.
        """
        rows: list[records.EncodedRecord] = []
        built: list[Any] = []
        first: Exception | None = None
        rejected = self._rejected
        deferred, journal_record, limit = payloads.DeferredRecord, records.JournalRecord, self._max_payload_bytes
        for record in batch:
            try:
                if type(record) is deferred:
                    row, payload = payloads.encoded_with_payload(record, max_payload_bytes=limit)  # type: ignore[arg-type]
                elif type(record) is journal_record:
                    row, payload = records.encode(record, max_payload_bytes=limit), record.payload  # type: ignore[arg-type]
                else:
                    row, payload = record, None  # type: ignore[assignment]
            except Exception as exc:  # an encoder or builder bug is still this record's problem only
                reason = exc.reason if isinstance(exc, errors.RecordRejected) else "malformed"
                rejected[reason] = rejected.get(reason, 0) + 1
                first = first or exc
                continue
            rows.append(row)
            built.append(payload)
        if first is not None:
            log.error("journal writer rejected %d record(s) of a batch of %d; first: %s",
                      len(batch) - len(rows), len(batch), first)
        return rows, built

    def _write(self, rows: list[records.EncodedRecord], *, skip_existing: bool,
               payloads: list[Any] | None = None) -> bool:
        """One transaction; False (and spill mode) if the database failed or was too slow."""
        started = self._clock()
        try:
            try:
                self._journal.append_batch(rows, skip_existing=skip_existing, payloads=payloads)
            except errors.DuplicateRecord:
                if skip_existing:
                    raise
                # Usually a commit whose acknowledgement was lost: store what is missing.
                self._journal.append_batch(rows, skip_existing=True)
        except errors.DuplicateRecord as exc:
            rows[:] = self._without_conflicts(rows, exc)
            return self._write(rows, skip_existing=True) if rows else True
        except Exception as exc:
            self._write_errors += 1
            log.warning("journal database write of %d records failed, spilling to %s: %s", len(rows), self._spool.path, exc)
            self._spilling = True
            self._schedule_retry()
            return False
        elapsed = self._clock() - started
        self._observe_latency(elapsed)
        self._written += len(rows)
        if elapsed > self._slow_write_seconds:
            # Written, but the database is struggling: spill what comes next and
            # let it recover instead of stalling behind it.
            self._write_errors += 1
            log.warning("journal database write took %.1fs (> %.1fs); spilling for a while", elapsed, self._slow_write_seconds)
            self._spilling = True
            self._schedule_retry()
        return True

    def _without_conflicts(
        self, rows: list[records.EncodedRecord], exc: errors.DuplicateRecord
    ) -> list[records.EncodedRecord]:
        conflicts = set(exc.lsns)
        if not conflicts:
            raise exc
        self._rejected["conflict"] += len(conflicts)
        log.error(
            "journal: %d record(s) have LSNs already stored with other content (first %d); they are NOT stored."
            " Two incarnations assigned the same LSNs -- start each after JournalWriter.last_lsn()",
            len(conflicts),
            min(conflicts),
        )
        return [r for r in rows if r.lsn not in conflicts]

    def _drain_spool(self) -> None:
        """Move spooled records into the database, oldest first, if a retry is due."""
        if self._clock() < self._next_retry:
            return
        deadline = self._clock() + 1.0  # give the buffer a turn at least every second
        while True:
            rows, next_offset = self._spool.read(self._drain_offset, self._max_batch)
            if not rows:
                log.info("journal spool %s drained into the database", self._spool.path)
                self._spool.clear()
                self._drain_offset = 0
                self._spilling = False
                self._retry = self._min_retry
                return
            if not self._write(rows, skip_existing=True):
                return
            self._drain_offset = next_offset
            if self._clock() > deadline:
                self._next_retry = self._clock()  # continue right after this batch is spooled
                return

    def _spill(self, rows: list[records.EncodedRecord]) -> None:
        try:
            self._spool.append(rows)
        except errors.SpoolUnwritable as exc:
            self._write_errors += 1
            if self._policy == "drop":
                self._dropped += len(rows)
                log.error("journal: dropped %d records, neither database nor spool writable: %s", len(rows), exc)
            else:
                self._held = rows
                log.error("journal: holding %d records, neither database nor spool writable: %s", len(rows), exc)
                self._schedule_retry()
            return
        self._spilled += len(rows)

    def _schedule_retry(self) -> None:
        self._next_retry = self._clock() + self._retry
        self._retry = min(self._retry * 2, self._max_retry)


