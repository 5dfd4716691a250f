"""SpoolRecovery: a replica that does not lead still drains what its killed terms left in its spool.

A replica killed while the database was away restarts with records in its spool:
durable, but not yet in the database. Only a term opens a writer on that spool, so
a replica that stays a standby (for weeks, perhaps) would keep them there, and its
killed epochs would stay without their end (SPEC §5 "Several writers, one truth":
nothing waits silently). So a scheduler that starts with records in its spool runs
a writer on it in the background - one that appends nothing - until the spool is
empty and the epochs it found there are closed (``end`` {"reason": "recovered"}),
retrying while the database is away. A term that begins meanwhile stops it first: one writer per
spool at a time, and the term's writer drains the rest.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from prometheus_client import CollectorRegistry

from kruntimes.journal import follow, spool
from kruntimes.journal.backends import Journal
from kruntimes.journal.writer import JournalWriter

log = logging.getLogger(__name__)


def has_records(path: str | os.PathLike[str]) -> bool:
    """Whether the spool file at ``path`` holds anything past its header (read without its lock)."""
    try:
        return os.path.getsize(path) > len(spool.MAGIC)
    except OSError:
        return False


class SpoolRecovery:
    """Drains one spool on a thread of its own; ``stop`` before a term opens the spool itself."""

    def __init__(self, url: str, spool_path: str, *, migrate: bool, registry: CollectorRegistry | None = None,
                 poll: float = 0.5, history: str = follow.DEFAULT_HISTORY, **writer_options: Any) -> None:
        self.url, self.spool_path, self.migrate, self.history = url, spool_path, migrate, history
        self.drained = threading.Event()
        self._registry = registry
        self._poll = poll
        self._options = writer_options
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
            writer = JournalWriter(journal, spool_path=self.spool_path, registry=self._registry, recover_all=True,
                                   **self._options).start()
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
