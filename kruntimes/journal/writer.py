"""JournalWriter: the scheduler appends, a background thread makes records durable.

``append`` is a lock-protected deque push (~1 us) so writing the journal never
stalls scheduling; the scheduler should call it under the same lock that assigned
the record's LSN, which keeps the buffer in LSN order. One thread then:

1. takes up to ``max_batch`` records as soon as there are any (no fixed sleep);
2. encodes them (validation happens here: a bad record is rejected and counted,
   the good ones of the batch go on);
3. writes the batch in one transaction -- unless the spool holds older records;
4. on a failed or too slow write, spills the batch, and every later one, in order to
   the spool file (fsync'd per batch) and retries the database with backoff;
5. when the database answers again, drains the spool first (``skip_existing``, so a
   crash mid-drain never duplicates), then clears it and writes directly again.

If even the spool cannot be written, ``policy="block"`` keeps the batch and retries,
the buffer fills and ``append`` blocks; ``policy="drop"`` drops and counts.

State is deliberately kept in memory only: a killed process loses what was still in
the buffer (at most ``buffer_size`` records, at most one batch if flush is called);
everything spooled or committed survives.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from prometheus_client import CollectorRegistry

from kruntimes.journal import backends, errors, metrics, payloads, records, spool

log = logging.getLogger(__name__)

Policy = Literal["block", "drop"]
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
    ) -> None:
        if buffer_size < 1 or max_batch < 1:
            raise ValueError("buffer_size and max_batch must be positive")
        if policy not in ("block", "drop"):
            raise ValueError(f"policy must be 'block' or 'drop', not {policy!r}")
        self._journal = journal
        self._capacity = buffer_size
        self._max_batch = max_batch
        self._max_payload_bytes = max_payload_bytes
        self._slow_write_seconds = slow_write_seconds
        self._min_retry = retry_interval
        self._max_retry = max_retry_interval
        self._policy = policy
        self._clock = clock

        # Opening the spool now (not in start) truncates a torn tail and tells
        # last_lsn() about spooled records before the scheduler picks its first LSN.
        self._spool = spool.Spool.open(spool_path, wait=spool_wait)

        # Shared with producers, guarded by _lock.
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._has_room = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._buffer: deque[Record] = deque()
        self._appended = 0  # records accepted so far: the sequence flush() waits for
        self._settled = 0  # of those, how many are durable, rejected or dropped
        self._dropped_on_append = 0
        self._writer_waiting = False
        self._producers_waiting = 0
        self._stopping = False
        self._abandon = False
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
        with self._lock:
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
        with self._lock:
            if not self._wait_for_room():
                return False
            self._buffer.append(record)
            self._appended += 1
            if self._writer_waiting:
                self._has_work.notify()
        return True

    def extend(self, batch: list[Record]) -> int:
        """Queue ``batch`` in order, as ``append`` would; return how many the drop policy dropped.

        Takes the lock once per run of records that fit, so the writer thread sees
        them together and writes them as one batch.
        """
        dropped = 0
        start = 0
        with self._lock:
            while start < len(batch):
                if not self._wait_for_room():
                    dropped += 1
                    start += 1
                    continue
                end = min(len(batch), start + self._capacity - len(self._buffer))
                self._buffer.extend(batch[start:end])
                self._appended += end - start
                start = end
                if self._writer_waiting:
                    self._has_work.notify()
        return dropped

    def _wait_for_room(self) -> bool:
        """(Lock held.) Wait for room in the buffer; False if the drop policy drops instead."""
        if self._stopping:
            raise errors.JournalError("journal writer is closed")
        if len(self._buffer) >= self._capacity:
            if self._policy == "drop":
                self._dropped_on_append += 1
                return False
            self._producers_waiting += 1
            try:
                while len(self._buffer) >= self._capacity and not self._stopping:
                    self._has_room.wait()
            finally:
                self._producers_waiting -= 1
            if self._stopping:
                raise errors.JournalError("journal writer closed while append was blocked")
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record appended so far is durable (database or spool), rejected or dropped."""
        with self._lock:
            target = self._appended
            if self._thread is None:  # nothing would ever settle them
                return self._settled >= target
            return self._progress.wait_for(lambda: self._settled >= target or self._abandon, timeout)

    def progress(self, after: int, timeout: float | None = None) -> int:
        """How many appended records have settled, once more than ``after`` have (or on timeout)."""
        with self._lock:
            self._progress.wait_for(lambda: self._settled > after or self._abandon or self._stopping, timeout)
            return self._settled

    def drain(self, timeout: float | None = None) -> bool:
        """Like ``flush``, but wait until the records are in the database (spool empty)."""
        with self._lock:
            target = self._appended
            if self._thread is None:
                return False
            return self._progress.wait_for(
                lambda: (self._settled >= target and not self._spilling and not self._held) or self._abandon,
                timeout,
            )

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush, stop the thread and close the spool.

        Records still not durable after ``timeout`` (database and spool both failing
        under the block policy) are counted as dropped and logged.
        """
        flushed = self.flush(timeout) if self._thread is not None else True
        with self._lock:
            self._stopping = True
            if not flushed:
                self._abandon = True
            self._has_work.notify_all()
            self._has_room.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("journal writer thread did not stop within %.1fs (a database call hangs?)", timeout)
                return  # the thread still uses the spool
        lost = len(self._buffer) + len(self._held)
        if lost:
            log.error("journal writer closed with %d records neither in the database nor in the spool", lost)
            self._dropped += lost
            self._buffer.clear()
            self._held = []
        self._spool.close()
        self._metrics.collector.retire(self)

    def stats(self) -> metrics.WriterStats:
        """Totals so far (what the Prometheus metrics report for this writer)."""
        return metrics.WriterStats(
            appended=self._appended,
            written=self._written,
            spilled=self._spilled,
            dropped=self._dropped + self._dropped_on_append,
            rejected=dict(self._rejected),
            write_errors=self._write_errors,
            buffer_depth=len(self._buffer),
        )

    @property
    def spooled(self) -> int:
        """Records currently waiting in the spool file."""
        return len(self._spool)

    # -- writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                batch = self._next_batch()
                if batch is None:
                    self._progress.notify_all()
                    return
            settled = self._process(batch)
            with self._lock:
                self._settled += settled
                self._progress.notify_all()

    def _next_batch(self) -> list[Record] | None:
        """Wait (lock held) for records or a due retry; None means stop."""
        while True:
            if self._abandon:
                return None
            if self._buffer and not self._held:
                break
            if self._stopping and not self._held:
                return None  # a non-empty spool stays for the next start to drain
            retrying = self._spilling or bool(self._held)
            if retrying and self._clock() >= self._next_retry:
                return []
            self._writer_waiting = True
            try:
                self._has_work.wait(max(0.0, self._next_retry - self._clock()) if retrying else None)
            finally:
                self._writer_waiting = False
        n = min(len(self._buffer), self._max_batch)
        if n == len(self._buffer):
            batch = list(self._buffer)
            self._buffer.clear()
        else:
            batch = [self._buffer.popleft() for _ in range(n)]
        if self._producers_waiting:
            self._has_room.notify_all()
        return batch

    def _process(self, batch: list[Record]) -> int:
        """Make ``batch`` (after any held records) durable; return how many records settled."""
        rows = self._held + self._encode(batch)
        unsettled_before = len(self._held) + len(batch)
        self._held = []
        try:
            if self._spilling:
                self._drain_spool()
            if rows and not self._spilling and self._write(rows, skip_existing=False):
                return unsettled_before
            if rows:
                self._spill(rows)
        except Exception:  # a bug must not kill the thread silently: keep the rows, retry later
            log.exception("journal writer: unexpected error; retrying the batch")
            self._write_errors += 1
            self._held = rows
            self._schedule_retry()
        return unsettled_before - len(self._held)

    def _encode(self, batch: list[Record]) -> list[records.EncodedRecord]:
        rows: list[records.EncodedRecord] = []
        first: Exception | None = None
        bad = 0
        encode, limit, encoded_type = records.encode, self._max_payload_bytes, records.EncodedRecord
        deferred, realize = payloads.DeferredRecord, payloads.realize
        for record in batch:
            if type(record) is encoded_type:
                rows.append(record)  # type: ignore[arg-type]
                continue
            try:
                if type(record) is deferred:
                    record = realize(record)  # type: ignore[arg-type]
                rows.append(encode(record, max_payload_bytes=limit))  # type: ignore[arg-type]
            except errors.RecordRejected as exc:
                self._rejected[exc.reason] = self._rejected.get(exc.reason, 0) + 1
                first, bad = first or exc, bad + 1
            except Exception as exc:  # an encoder bug is still this record's problem only
                self._rejected["malformed"] += 1
                first, bad = first or exc, bad + 1
        if first is not None:
            log.error("journal writer rejected %d record(s) of a batch of %d; first: %s", bad, len(batch), first)
        return rows

    def _write(self, rows: list[records.EncodedRecord], *, skip_existing: bool) -> bool:
        """One transaction; False (and spill mode) if the database failed or was too slow."""
        started = self._clock()
        try:
            try:
                self._journal.append_batch(rows, skip_existing=skip_existing)
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
