"""The journal store: one ``Journal`` class over SQLite and PostgreSQL.

Reads go through SQLAlchemy Core and are the same on both backends. Only the bulk
insert differs (``backend_sqlite``: multi-row VALUES, ``backend_postgres``: binary
COPY); each backend module is chosen once, from the URL, by ``Journal.open``.

The journal is written by one ``JournalWriter`` at a time (the leader's). Reads are
for people, the CLI and replay -- the live scheduler never reads it back.
"""

from __future__ import annotations

import json
import threading
import types
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import backend_postgres, backend_sqlite, errors, records, schema

DEFAULT_URL = "sqlite:///kruntimes-journal.db"


class Incarnation(NamedTuple):
    """One scheduler incarnation, as projected from its ``incarnation`` record."""

    incarnation: str
    started_at: datetime
    first_lsn: int
    version: str
    config_hash: str


def parse_url(url: str | sa.URL) -> sa.URL:
    """The journal URL SQLAlchemy should use (``postgresql://`` becomes psycopg 3)."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() in ("postgresql", "postgres"):
        return backend_postgres.normalize_url(parsed)
    if parsed.get_backend_name() == "sqlite":
        return parsed
    raise ValueError(f"unsupported journal URL scheme {parsed.drivername!r}: use sqlite:///PATH or "
                     "postgresql+psycopg://USER@HOST/DB")


def create_engine(url: str | sa.URL) -> sa.Engine:
    """An engine configured for the journal (SQLite pragmas, PostgreSQL timeouts)."""
    parsed = parse_url(url)
    return _backend_for(parsed).create_engine(parsed)


def _backend_for(url: sa.URL) -> types.ModuleType:
    return backend_sqlite if url.get_backend_name() == "sqlite" else backend_postgres


class Journal:
    """Append-only store of journal records, ordered by LSN."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._backend = _backend_for(engine.url)
        self._dbapi_error: type[Exception] = engine.dialect.loaded_dbapi.Error
        # Appends keep one connection between batches: checking one out of the pool and
        # resetting it on return cost about what a one-row commit does. Any failure
        # drops it, so the next batch starts on a fresh (pinged) connection.
        self._append_lock = threading.Lock()
        self._append_conn: sa.Connection | None = None

    @classmethod
    def open(cls, url: str | sa.URL = DEFAULT_URL, *, create: bool = True) -> Journal:
        """Open the journal at ``url``; with ``create`` migrate it to the newest schema first.

        Without ``create`` an out-of-date schema is an error naming the command that fixes it.
        """
        from kruntimes.journal import migrate  # alembic is only needed here

        engine = create_engine(url)
        try:
            if create:
                migrate.upgrade(engine)
            else:
                migrate.require_head(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``: a bounded label for metrics and logs."""
        return str(self._backend.NAME)

    def close(self) -> None:
        with self._append_lock:
            self._drop_append_connection()
        self._engine.dispose()

    def _drop_append_connection(self) -> None:
        conn, self._append_conn = self._append_conn, None
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except Exception:  # noqa: BLE001 - it is being thrown away because it failed
                pass

    # -- writing -----------------------------------------------------------------

    def append_batch(
        self,
        batch: Iterable[records.JournalRecord | records.EncodedRecord],
        *,
        skip_existing: bool = False,
    ) -> int:
        """Store ``batch`` in ONE transaction; return the number of rows inserted.

        An LSN already present raises ``DuplicateRecord`` and stores nothing. With
        ``skip_existing`` (draining a spool after a crash) rows already stored with
        the same incarnation and content hash are skipped, so re-draining is
        idempotent; a stored row that differs still raises ``DuplicateRecord`` with
        the conflicting LSNs. JournalRecords are encoded here (``RecordRejected``).
        """
        rows = [r if type(r) is records.EncodedRecord else records.encode(r) for r in batch]  # type: ignore[arg-type]
        if not rows:
            return 0
        with self._append_lock:
            while True:
                reused = self._append_conn is not None
                try:
                    return self._append(rows, skip_existing)
                except (sa_exc.DBAPIError, self._dbapi_error) as exc:
                    self._drop_append_connection()
                    if reused and getattr(exc, "connection_invalidated", False):
                        continue  # the kept connection died meanwhile (a server restart): once more on a new one
                    raise self._write_error(exc, rows) from exc
                except BaseException:
                    self._drop_append_connection()
                    raise

    def _append(self, rows: list[records.EncodedRecord], skip_existing: bool) -> int:
        conn = self._append_conn
        if conn is None:
            conn = self._append_conn = self._engine.connect()
        with conn.begin():
            if skip_existing:
                rows = self._without_stored(conn, rows)
                if not rows:
                    return 0
            self._backend.insert_records(conn.connection.driver_connection, rows)
            self._project_incarnations(conn, rows)
        return len(rows)

    def _write_error(self, exc: Exception, rows: Sequence[records.EncodedRecord]) -> errors.JournalError:
        cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
        if self._backend.is_duplicate(cause):
            return errors.DuplicateRecord(
                f"an LSN in {rows[0].lsn}..{rows[-1].lsn} is already in the journal: {cause}")
        return errors.JournalUnavailable(f"journal write failed ({self.backend}): {cause}")

    def _without_stored(self, conn: sa.Connection, rows: list[records.EncodedRecord]) -> list[records.EncodedRecord]:
        table = schema.journal_records
        lsns = [r.lsn for r in rows]
        stored = {
            lsn: (incarnation, sha)
            for lsn, incarnation, sha in conn.execute(
                sa.select(table.c.lsn, table.c.incarnation, table.c.payload_sha256).where(
                    table.c.lsn.between(min(lsns), max(lsns))
                )
            )
        }
        if not stored:
            return rows
        conflicts = [r.lsn for r in rows if r.lsn in stored and stored[r.lsn] != (r.incarnation, r.payload_sha256)]
        if conflicts:
            raise errors.DuplicateRecord(
                f"{len(conflicts)} LSN(s) are stored with different content, first {conflicts[0]}",
                lsns=conflicts,
            )
        return [r for r in rows if r.lsn not in stored]

    def _project_incarnations(self, conn: sa.Connection, rows: Sequence[records.EncodedRecord]) -> None:
        # journal_incarnations is a projection of the log, written in the same
        # transaction so it can never disagree with journal_records.
        found = [
            {
                "incarnation": r.incarnation,
                "started_at": r.recorded_at,
                "first_lsn": r.lsn,
                "version": payload["version"],
                "config_hash": payload["config_hash"],
            }
            for r in rows
            if r.kind == "incarnation"
            for payload in (json.loads(r.payload),)
        ]
        if found:
            dialect_insert: Any = _dialect_insert(conn)
            conn.execute(dialect_insert(schema.journal_incarnations).on_conflict_do_nothing(), found)

    # -- reading -----------------------------------------------------------------

    def last_lsn(self) -> int | None:
        """The highest LSN stored in the database, or None for an empty journal."""
        try:
            with self._engine.connect() as conn:
                value = conn.execute(sa.select(sa.func.max(schema.journal_records.c.lsn))).scalar()
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read the last LSN ({self.backend}): {exc.orig}") from exc
        return None if value is None else int(value)

    def read(
        self,
        since_lsn: int | None = None,
        until_lsn: int | None = None,
        kinds: Collection[str] | None = None,
    ) -> Iterator[records.JournalRecord]:
        """Records with ``since_lsn < lsn <= until_lsn`` in LSN order, streamed, hashes verified."""
        for row in self.read_encoded(since_lsn, until_lsn, kinds):
            yield records.decode(row)

    def read_encoded(
        self,
        since_lsn: int | None = None,
        until_lsn: int | None = None,
        kinds: Collection[str] | None = None,
        *,
        chunk_size: int = 1000,
    ) -> Iterator[records.EncodedRecord]:
        """Like ``read`` but yields the stored form (canonical text and hash) unchanged.

        Streams (server-side cursor on PostgreSQL); the connection is held until the
        iterator is exhausted or closed.
        """
        table = schema.journal_records
        stmt = sa.select(
            table.c.lsn,
            table.c.incarnation,
            table.c.recorded_at,
            table.c.kind,
            table.c.schema_version,
            table.c.payload,
            table.c.payload_sha256,
        ).order_by(table.c.lsn)
        if since_lsn is not None:
            stmt = stmt.where(table.c.lsn > since_lsn)
        if until_lsn is not None:
            stmt = stmt.where(table.c.lsn <= until_lsn)
        if kinds is not None:
            stmt = stmt.where(table.c.kind.in_(sorted(kinds)))
        try:
            with self._engine.connect() as conn:
                result = conn.execution_options(yield_per=chunk_size).execute(stmt)
                for row in result:
                    yield records.EncodedRecord(*row)
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read the journal ({self.backend}): {exc.orig}") from exc

    def incarnations(self) -> list[Incarnation]:
        """Every incarnation that wrote to this journal, oldest first."""
        table = schema.journal_incarnations
        stmt = sa.select(
            table.c.incarnation, table.c.started_at, table.c.first_lsn, table.c.version, table.c.config_hash
        ).order_by(table.c.first_lsn)
        try:
            with self._engine.connect() as conn:
                return [Incarnation(*row) for row in conn.execute(stmt)]
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read incarnations ({self.backend}): {exc.orig}") from exc


def _dialect_insert(conn: sa.Connection) -> Any:
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert
    from sqlalchemy.dialects import postgresql

    return postgresql.insert
