"""SpoolRecovery: a replica that does not lead still drains what its killed terms left in its spool.

A replica killed while the database was away restarts with records in its spool:
durable, but not yet in the database; one killed while the database answered restarts
with an empty spool and its epoch noted open (``<spool>.epochs``). Only a term opens a
writer on that spool, so a replica that stays a standby (for weeks, perhaps) would keep
the records there, and its killed epochs would stay without their end (SPEC §5 "Several
writers, one truth": nothing waits silently; "Crash vs loss": a replica that restarts
closes its own earlier epoch). So a scheduler that starts with either (``left_behind``)
runs a writer on it in the background - one that appends nothing - until the spool is
empty and the epochs it found there are closed (``end`` {"reason": "recovered"}),
retrying while the database is away. A term that begins meanwhile stops it first: one
writer per spool at a time, and the term's writer drains the rest.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry

from kruntimes.journal.history import indexer
from kruntimes.journal.write import child, settings, spool, spool_drain
from kruntimes.journal.store.backends import Journal
from kruntimes.journal.write.writer import JournalWriter

log = logging.getLogger("kruntimes.journal.recovery")  # the name operators' log configuration knows


def has_records(path: str | os.PathLike[str]) -> bool:
    """Whether the spool file at ``path`` holds anything past its header (read without its lock)."""
    try:
        return os.path.getsize(path) > len(spool.MAGIC)
    except OSError:
        return False


def left_behind(path: str | os.PathLike[str]) -> bool:
    """Whether an earlier run left work on the spool at ``path``: records in it, or an epoch its note
    still lists open (a process killed mid-term while the database answered leaves an empty spool,
    and its epoch must still be closed: SPEC §5 "Crash vs loss")."""
    return has_records(path) or bool(spool_drain.read_note(Path(f"{os.fspath(path)}.epochs")))


class SpoolRecovery:
    """Drains one spool on a thread of its own; ``stop`` before a term opens the spool itself."""

    def __init__(self, url: str, spool_path: str, *, migrate: bool, registry: CollectorRegistry | None = None,
                 poll: float = 0.5, history: str = indexer.DEFAULT_HISTORY,
                 patience: settings.Patience = settings.Patience()) -> None:
        self.url, self.spool_path, self.migrate, self.history = url, spool_path, migrate, history
        self.drained = threading.Event()
        self._registry = registry
        self._poll = poll
        self._patience = patience
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kruntimes-journal-recovery", daemon=True)

    def start(self) -> SpoolRecovery:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop draining (what is left stays in the spool, for the term's writer)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("journal spool recovery did not stop within %.1fs (a database call hangs?)", timeout)

    def _run(self) -> None:
        journal = Journal.deferred(self.url, migrate=self.migrate, history=self.history)
        try:
            # The killed process's writer may still be storing what it had received: wait for its spool.
            writer = JournalWriter(journal, settings.Spool(self.spool_path, wait=child.SPOOL_WAIT_SECONDS),
                                   patience=self._patience, epochs=settings.Epochs(recover_all=True),
                                   instruments=settings.Instruments(registry=self._registry)).start()
        except Exception:  # noqa: BLE001 - the term's writer will meet the same spool and say so
            log.exception("journal spool recovery could not open %s", self.spool_path)
            journal.close()
            return
        log.info("journal spool holds records of an earlier run: draining them while this replica does not lead",
                 extra={"spool": self.spool_path, "records": writer.spooled})
        try:
            while not self._stop.is_set():
                if writer.drain(self._poll) and not writer.recovering:
                    log.info("journal spool recovered into the database", extra={"spool": self.spool_path})
                    self.drained.set()
                    return
        finally:
            writer.close(5.0)
            journal.close()
