"""JournalWriter: the producer appends, a background thread makes records durable.

``append`` is a lock-protected deque push, called under the lock that assigned the
record's LSN (which keeps the buffer in LSN order). The thread (``committer``) takes
up to ``max_batch`` records as soon as there are any, builds deferred payloads and
encodes (a bad record is rejected and counted, its batch goes on), writes each batch in
one transaction, and on a failed or too slow write spills this and every later batch in
order to the spool (fsync'd per batch), retrying with backoff; once the database
answers it drains the spool first (``skip_existing``: a crash mid-drain never
duplicates). A call the database has not answered within ``write_timeout`` counts as
failed (``deadline``), so a record is durable within that bound whatever the database
does. If the spool fails too, ``policy="block"`` holds the batch and the buffer fills;
``"drop"`` drops and counts. docs/journal.md has the whole picture.

The chain (SPEC §5 "Integrity"): the thread links every record to the one before it
in its epoch (``linker.Linker``: ``chain.link``, an HMAC with a key) as it encodes it, keeps each epoch's
head in memory, and stores the link with the record, in the database or the spool;
the database moves the epoch's head in the same transaction. A record of an epoch
whose head it does not know (a restarted writer process mid-epoch) goes without a
link and is linked from the stored head when it reaches the database.

What becomes of spooled records - the drain, the checks that keep a forged or
mismatched record out of the database, the quarantine - and the closing of epochs a
killed process left open are in ``spool_drain``: a ``SpoolDrain`` the committer builds with what it needs.

This module is the writer's front: what it is built from (``settings``), the producer's
calls, and closing. State is kept in memory only: a killed process loses what was still
buffered; everything spooled or committed survives.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from kruntimes.journal import chain, errors, linker
from kruntimes.journal.store import backends, deadline
from kruntimes.journal.write import backoff, committer, handover, intake, metrics, settings, spool, spool_drain

log = logging.getLogger("kruntimes.journal.writer")  # the name operators' log configuration knows

Policy = intake.Policy
Record = committer.Record

#: How long ``last_lsn`` waits for the database when the spool already knows an LSN.
LAST_LSN_PROBE_SECONDS = 1.0
#: Closing, once the database has had its time: the rest goes to the spool, and the
#: close waits for it as long as a batch settles at least this long after a call in
#: flight (the write timeout) has been given up on; a spool that takes nothing for that
#: long loses the rest, counted and logged.
SPOOL_AT_CLOSE_SECONDS = 5.0


class JournalWriter:
    """Buffered, batching, spilling writer in front of one ``Journal``."""

    #: The recorder may hand over ``DeferredRecord`` s: their payloads are built here.
    accepts_deferred = True

    def __init__(self, journal: backends.Journal, spool_settings: settings.Spool, *,
                 batching: settings.Batching = settings.Batching(), patience: settings.Patience = settings.Patience(),
                 epochs: settings.Epochs = settings.Epochs(),
                 instruments: settings.Instruments = settings.Instruments()) -> None:
        if batching.max_batch < 1:
            raise ValueError("buffer_size and max_batch must be positive")
        self._in = intake.Intake(batching.buffer_size, batching.policy, bound_unsettled=False)
        self._journal = journal
        # Every database call answers within write_timeout or counts as failed (SPEC §5 "Availability").
        self._deadline = deadline.Deadline(getattr(journal, "engine", None), patience.write_timeout)
        if isinstance(journal, backends.Journal):
            journal.statement_seconds = patience.write_timeout
        # Opening the spool now (not in start) truncates a torn tail and tells
        # last_lsn() about spooled records before the scheduler picks its first LSN.
        self._spool = spool.Spool.open(spool_settings.path, wait=spool_settings.wait)
        self._thread: threading.Thread | None = None
        try:
            key = chain.load_key(epochs.key_file)
        except BaseException:
            self._spool.close()
            raise
        # The counts so far, in the shape stats() reports (which fills in the rest); the thread counts here.
        self._tally = metrics.WriterStats()
        self._metrics = metrics.for_registry(instruments.registry)
        self._committer = committer.Committer(
            self._in, self._spool, journal, self._deadline, linker.Linker(key),
            backoff.Backoff(instruments.clock, patience.retry_interval, patience.max_retry_interval), self._tally,
            batching=batching, patience=patience, epochs=epochs, wall_clock=instruments.wall_clock,
            observe_latency=instruments.observe_latency or self._metrics.write_latency.observe)
        self._drain = self._committer.drain
        self._metrics.collector.attach(self)
        if self._committer.spilling:
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
                self._thread = threading.Thread(target=self._committer.run, name="kruntimes-journal-writer", daemon=True)
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
            self._committer.hurry_until = self._in.appended
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
                lambda: (i.settled >= target and not self._committer.spilling and not self._committer.held) or i.abandon, timeout)

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
        lost = len(self._in.buffer) + len(self._committer.held)
        if lost:
            log.error("journal writer closed with %d records neither in the database nor in the spool", lost)
            self._tally.dropped += lost
            self._in.buffer.clear()
            self._committer.held = []
        if self._committer.ended:  # this epoch is closed: nothing for the next writer to recover
            spool_drain.write_note(self._drain.note_path, self._drain.to_recover)
        self._committer.publish_head()
        self._spool.close()
        self._metrics.collector.retire(self)

    def _spool_the_rest(self) -> bool:
        """(Closing.) Send every record not yet durable to the spool; True once all have settled.

        Waits as long as records keep settling: a call in flight answers (or is given
        up on) within the write timeout, and the spool then takes a batch per fsync.
        """
        i = self._in
        with i.lock:
            self._committer.spool_rest = True
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
            head_lsn=self._committer.head_lsn(),
            quarantined=self._tally.quarantined,
            history_deferred=int(self._journal.history_deferred),
        )

    @property
    def quarantine_path(self) -> Path:
        """Where records a drain refused to store are kept (spool format)."""
        return self._drain.quarantine_path

    @property
    def ended(self) -> bool:
        """This writer's epoch's end record is durable (database or spool)."""
        return self._committer.ended

    @property
    def recovering(self) -> bool:
        """Earlier epochs found in the spool (or its note) are still to be closed."""
        return bool(self._drain.to_recover)

    @property
    def spooled(self) -> int:
        """Records currently waiting in the spool file."""
        return len(self._spool)
