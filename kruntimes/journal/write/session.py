"""JournalSession: open a journal and hand the scheduler a recorder for it.

One place wires what every producer needs - the store (migrated), the buffered
writer with its spool, and a recorder that continues the journal's LSNs with a
new incarnation record - so the demo, benchmarks, tests and the live scheduler
all journal the same way.

A session is one epoch (SPEC §5 "Several writers, one truth"): its ``incarnation``
value names it, its first record is the incarnation record, and ``end`` (called by
``close`` unless the term ended it already) writes its last, an ``end`` record with
the reason. The writer is told the epoch, so a later writer on the same spool can
close it (``end`` {"reason": "recovered"}) if this process is killed before it did.

The writer runs in its own process by default (``process``): building, checking
and storing records then happens on another core instead of taking the
scheduler's turns at the interpreter. ``thread`` keeps it in this process, for
embedding and for tests that inject failures into the ``Journal`` object.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from kruntimes.journal import errors
from kruntimes.journal.history import indexer
from kruntimes.journal.write import handover, settings
from kruntimes.journal.store.backends import Journal
from kruntimes.journal.write.child import START_PROBE_SECONDS
from kruntimes.journal.write.process import ProcessJournalWriter
from kruntimes.journal.write.recorder import DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHECKPOINT_SIZE_RATIO, JournalRecorder
from kruntimes.journal.write.writer import JournalWriter
from kruntimes.scheduler.config import SchedulerConfig

log = logging.getLogger("kruntimes.journal.session")  # the name operators' log configuration knows

WRITERS = ("process", "thread")
DEFAULT_WRITER = "process"


def default_spool(url: str) -> str:
    """Next to a SQLite file; in the working directory for a server database."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and url[len(prefix):] not in ("", ":memory:"):
        return url[len(prefix):] + ".spool"
    return os.path.abspath("kruntimes-journal.spool")


class JournalSession:
    """One epoch of the journal: a writer and a recorder numbering after the last durable LSN.

    Opening one never waits for the database (SPEC §5 "Availability"): the schema is
    checked (``migrate``: migrated) by the writer before its first write, and the last
    LSN is asked of the database for at most ``START_PROBE_SECONDS``. The epoch numbers
    after the highest LSN known without waiting - the spool's, ``after_lsn`` (what
    the process numbered before, e.g. in its previous term) or the database's if it
    answered - and its records wait in the spool until the database answers.
    """

    def __init__(self, url: str, config: SchedulerConfig, *, spool_path: str | None = None,
                 top_candidates: int = 5, detail: str = "summary", checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
                 checkpoint_size_ratio: int = DEFAULT_CHECKPOINT_SIZE_RATIO,
                 registry: CollectorRegistry | None = None, writer: str = DEFAULT_WRITER,
                 migrate: bool = True, key_file: str | None = None, after_lsn: int = 0,
                 history: str = indexer.DEFAULT_HISTORY, batching: settings.Batching = settings.Batching(),
                 patience: settings.Patience = settings.Patience()) -> None:
        if writer not in WRITERS:
            raise ValueError(f"journal writer must be one of {', '.join(WRITERS)}, not {writer!r}")
        self.url = url
        spool = spool_path or default_spool(url)
        # The spool is where this epoch's records go while the database is away: a spool
        # that cannot be made fails the term now, before a writer process is started.
        try:
            Path(spool).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise errors.SpoolUnwritable(f"cannot make the journal spool's directory for {spool}: {exc}") from exc
        # No connection here: the writer checks (or migrates) the schema before it writes;
        # without ``migrate`` (replicas in a cluster, SPEC §5) it waits for `kruntimes db upgrade`.
        self.journal = Journal.deferred(url, migrate=migrate, history=history)
        registry = registry if registry is not None else CollectorRegistry()
        self.epoch = uuid.uuid4().hex
        self.ended_lsn: int | None = None
        epochs = settings.Epochs(epoch=self.epoch, key_file=key_file)
        self.writer: JournalWriter | ProcessJournalWriter
        try:
            if writer == "process":
                self.writer = ProcessJournalWriter(
                    settings.Store(url, migrate=migrate, history=history), settings.Spool(spool), batching=batching,
                    patience=patience, epochs=epochs, registry=registry)
            else:
                self.writer = JournalWriter(self.journal, settings.Spool(spool), batching=batching, patience=patience,
                                            epochs=epochs, instruments=settings.Instruments(registry=registry)).start()
        except BaseException:
            self.journal.close()
            raise
        self._numbered: handover.Numbered | None = None
        try:
            # A new epoch numbers on from the highest LSN this process knows without waiting
            # (``after_lsn``: its previous term), so LSNs stay unique in practice; keys never depend on it.
            start_lsn = max(after_lsn, self._known_lsn())
            self.recorder = JournalRecorder(self.writer, start_lsn=start_lsn, detail=detail,
                                            checkpoint_every=checkpoint_every,
                                            checkpoint_size_ratio=checkpoint_size_ratio, incarnation=self.epoch)
            # Every LSN is noted before its record is handed over: a kill's unsent tail is named (SPEC §5).
            self._numbered = handover.Numbered(spool, self.epoch, first_lsn=start_lsn + 1)
            self.recorder.numbered = self._numbered.view
            self.first_lsn = self.recorder.start(config, top_candidates=top_candidates)
        except BaseException:
            self.close(timeout=5.0, reason=None)
            raise

    def _known_lsn(self) -> int:
        """The last durable LSN the writer knows without waiting; 0 if the database did not answer."""
        try:
            if isinstance(self.writer, ProcessJournalWriter):
                last = self.writer.last_lsn()  # its process asked the database, bounded, when it started
            else:
                last = self.writer.last_lsn(START_PROBE_SECONDS)
        except errors.JournalUnavailable as exc:
            log.warning("journal database not answering: this epoch starts in the spool", extra={"error": str(exc)})
            return 0
        return last or 0

    def attach(self, cache: Any) -> None:
        """Let the recorder read the cache's full state for checkpoints."""
        self.recorder.state_source = cache

    def end(self, reason: str = "shutdown") -> int:
        """Record the epoch's last record, ``end`` {"reason": reason} (once); its LSN.

        Called under whatever lock numbers the recorder's changes (the cache's).
        """
        if self.ended_lsn is None:
            self.ended_lsn = self.recorder.record("end", {"reason": reason})
        return self.ended_lsn

    def close(self, timeout: float = 60.0, reason: str | None = "shutdown") -> None:
        """End the epoch (unless ``reason`` is None: a simulated kill), flush every record and stop the writer."""
        if reason is not None and getattr(self, "recorder", None) is not None:
            self.end(reason)
        self.writer.close(timeout)
        self.journal.close()
        numbered, self._numbered = getattr(self, "_numbered", None), None
        if numbered is not None:
            self.recorder.numbered = None
            # Ended: the end record is durable or counted lost at close; a "kill" leaves the mark for recovery.
            numbered.close(ended=self.ended_lsn is not None)

    def __enter__(self) -> JournalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
