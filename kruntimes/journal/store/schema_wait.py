"""Waiting for the journal's schema without making scheduling wait (SPEC §5 "Availability").

An unreachable database never stops scheduling, and migrations run once. So no
scheduler checks or migrates the schema before it schedules; two things do it in
the background instead:

- ``SchemaGate``, in the writer: before its first write to the database (and at
  each retry until it passes once) it migrates (``migrate=True``: one writer, an
  SQLite file or the demo) or only reads the revision (``migrate=False``:
  replicas in a cluster). Until it passes, the write fails like any write to a
  database that is away: the records wait in the spool and drain once it passes.
- ``SchemaWatch``, in the scheduler process: polls the revision, says in a log line
  and a gauge that the replica waits for `kruntimes db upgrade`, and after
  ``patience`` seconds logs an error naming the Job. It never migrates, never raises
  and never blocks: a standby is watched too, before it leads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from kruntimes.journal import errors
from kruntimes.journal.store import engines

log = logging.getLogger("kruntimes.journal.migrate")


class SchemaGate:
    """Passes once the database holds the head revision (migrating it first with ``migrate``)."""

    def __init__(self, *, migrate: bool) -> None:
        self.migrate = migrate
        self.ready = False
        self._lock = threading.Lock()

    def check(self, engine: sa.Engine) -> None:
        """Return once the schema is at the head; else raise ``JournalUnavailable`` saying why."""
        if self.ready:
            return
        from kruntimes.journal.store import migrate  # alembic is only needed once a writer runs

        with self._lock:
            if self.ready:
                return
            try:
                if self.migrate:
                    migrate.upgrade(engine)
                else:
                    migrate.require_head(engine)
            except errors.JournalError as exc:  # the schema is behind (or ahead): the records wait
                raise errors.JournalUnavailable(f"not writing yet: {exc}") from exc
            except Exception as exc:  # noqa: BLE001 - any driver error: the database is away
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise errors.JournalUnavailable(f"cannot check the journal schema: {first}") from exc
            self.ready = True


class SchemaWatch:
    """A thread that waits, as long as it takes, for the journal schema's head revision."""

    def __init__(self, url: str | sa.URL, *, patience: float, poll: float = 2.0,
                 on_waiting: Callable[[bool], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self.patience = patience
        self.poll = poll
        self.reached = threading.Event()
        self._on_waiting = on_waiting or (lambda waiting: None)
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kruntimes-journal-schema-watch", daemon=True)

    def start(self) -> SchemaWatch:
        self._on_waiting(True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        from kruntimes.journal.store import migrate  # alembic is only needed with a journal

        head = migrate.head_revision()
        started = self._clock()
        said: list[str] = []  # what was last logged, so each state is logged once
        late = False
        engine = engines.create_engine(self.url)
        try:
            while not self._stop.is_set():
                try:
                    current: str | None = migrate.current_revision(engine)
                except Exception as exc:  # noqa: BLE001 - any driver error: the database is away
                    state = "unreachable"
                    if said[-1:] != [state]:
                        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                        log.warning("journal database not answering; scheduling goes on and records wait in the "
                                    "spool", extra={"error": first})
                        said.append(state)
                else:
                    if current == head:
                        if said:
                            log.info("journal schema reached the head revision", extra={"revision": head})
                        self._on_waiting(False)
                        self.reached.set()
                        return
                    state = current or "empty"
                    if said[-1:] != [state]:
                        newer = current is not None and not migrate.known_revision(current)
                        log.log(logging.ERROR if newer else logging.WARNING,
                                "waiting for the journal schema: run `kruntimes db upgrade` (the kruntimes-db-upgrade "
                                "Job)" if not newer else "journal schema is newer than this kruntimes: run the version "
                                "that migrated it; records wait in the spool",
                                extra={"revision": state, "head": head})
                        said.append(state)
                if not late and self._clock() - started >= self.patience:
                    late = True
                    log.error(f"journal schema is not at {head!r} after {self.patience:g} s of waiting: run "
                              "`kruntimes db upgrade --journal URL` (in a cluster: the kruntimes-db-upgrade Job); "
                              "scheduling goes on and records wait in the spool", extra={"state": said[-1]})
                self._stop.wait(self.poll)
        finally:
            engine.dispose()
