"""The journal store: one ``Journal`` class over SQLite and PostgreSQL.

Reads go through SQLAlchemy Core and are the same on both backends. Only the bulk
insert differs (``backend_sqlite``: multi-row VALUES, ``backend_postgres``: binary
COPY); each backend module (``backend.Backend``) is chosen once, from the URL, by
``engines.backend_for``. The epochs' and incarnations' rows are ``epochs``'.

The journal is written by one ``JournalWriter`` at a time (the leader's). Reads are
for people, the CLI and replay -- the live scheduler never reads it back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import chain, errors, linker, records
from kruntimes.journal.history import derive, indexer, previous
from kruntimes.journal.store import backend, deadline, engines, epochs, schema, schema_wait, selects

log = logging.getLogger("kruntimes.journal.backends")  # the name operators' log configuration knows

REINDEX_CHUNK = indexer.REINDEX_CHUNK


class Journal:
    """Append-only store of journal records, keyed by (epoch, LSN), read epoch by epoch in LSN order."""

    def __init__(self, engine: sa.Engine, *, schema: schema_wait.SchemaGate | None = None,
                 history: str = indexer.DEFAULT_HISTORY) -> None:
        self._engine = engine
        # "inline": each batch's history rows in its own transaction; "follow": records
        # only, the rows left to ``index`` (``kruntimes journal index``).
        self._history = indexer.check_mode(history)
        self._trailing = False  # an inline writer found the tables behind: said once
        self._starts: dict[str, Any] = {}  # epoch -> its first record's start (``indexer.standing``): never changes
        self._schema = schema  # checked before the first write (``deferred``); None: checked by ``open``
        self._backend: backend.Backend = engines.backend_for(engine.url)  # type: ignore[assignment]
        self._dbapi_error: type[Exception] = engine.dialect.loaded_dbapi.Error
        # Appends keep one connection between batches: checking one out of the pool and
        # resetting it on return cost about what a one-row commit does. Any failure
        # drops it, so the next batch starts on a fresh (pinged) connection.
        self._append_lock = threading.Lock()
        self._append_conn: sa.Connection | None = None
        self._upsert_epochs: dict[bool, Any] = {}  # built once each: SQLAlchemy then caches their compiled forms
        self.statement_seconds: float | None = None  # the server gives up on an append's statement after this

    @classmethod
    def open(cls, url: str | sa.URL = engines.DEFAULT_URL, *, create: bool = True,
             history: str = indexer.DEFAULT_HISTORY) -> Journal:
        """Open the journal at ``url``; with ``create`` migrate it to the newest schema first.

        Without ``create`` an out-of-date schema is an error naming the command that fixes it.
        """
        from kruntimes.journal.store import migrate  # alembic is only needed here

        engine = engines.create_engine(url)
        try:
            if create:
                migrate.upgrade(engine)
            else:
                migrate.require_head(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, history=history)

    @classmethod
    def deferred(cls, url: str | sa.URL, *, migrate: bool, history: str = indexer.DEFAULT_HISTORY) -> Journal:
        """The journal at ``url`` without a connection yet: the schema is checked (or, with
        ``migrate``, migrated) before the first write, so a database that is away delays
        only the writes, which the writer spools meanwhile (SPEC §5 "Availability")."""
        return cls(engines.create_engine(url), schema=schema_wait.SchemaGate(migrate=migrate), history=history)

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    @property
    def history_deferred(self) -> bool:
        """Whether this journal's appends leave their history rows to ``index``: in follow mode,
        or inline while the tables trail the records (as of the last batch)."""
        return self._history == "follow" or self._trailing

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
        key: chain.ChainKey | None = None,
        heads: dict[str, tuple[int, str]] | None = None,
        payloads: Sequence[Any] | None = None,
    ) -> int:
        """Store ``batch`` in ONE transaction, with its epochs' heads; return the number of rows inserted.

        A key (epoch, LSN) already present raises ``DuplicateRecord`` and stores nothing.
        With ``skip_existing`` (draining a spool after a crash) rows already stored with
        the same content hash and link are skipped, so re-draining is idempotent; a
        stored row that differs still raises ``DuplicateRecord`` naming the keys.

        A row without a link (``chain_hash`` empty: a record the writer could not chain,
        or one appended directly) is linked here from its epoch's stored head, with
        ``key``. Each epoch's row in ``journal_epochs`` moves to the batch's last record
        of it in the same transaction; ``heads`` (epoch -> (LSN, link)), when given, is
        updated with the new heads after the commit. JournalRecords are encoded here
        (``RecordRejected``).

        The history tables (``derived``) get the batch's rows in the same transaction.
        ``payloads``, aligned with ``batch``, are the payload dicts of encoded records
        when the caller still has them (so they are not parsed again); a JournalRecord
        brings its own.
        """
        rows: list[records.EncodedRecord] = []
        sources: list[Any] = []
        for i, r in enumerate(batch):
            if type(r) is records.EncodedRecord:
                rows.append(r)  # type: ignore[arg-type]
                sources.append(payloads[i] if payloads is not None else None)
            else:
                rows.append(records.encode(r))  # type: ignore[arg-type]
                sources.append(r.payload)  # type: ignore[union-attr]
        if not rows:
            return 0
        if self._schema is not None:
            self._schema.check(self._engine)  # JournalUnavailable until the schema is there
        with self._append_lock:
            while True:
                reused = self._append_conn is not None
                try:
                    stored = self._append(rows, sources, skip_existing, key)
                    break
                except (sa_exc.DBAPIError, self._dbapi_error) as exc:
                    self._drop_append_connection()
                    if reused and getattr(exc, "connection_invalidated", False):
                        continue  # the kept connection died meanwhile (a server restart): once more on a new one
                    raise self._write_error(exc, rows) from exc
                except BaseException:
                    self._drop_append_connection()
                    raise
        if heads is not None:
            for r in stored:
                if r.lsn > heads.get(r.incarnation, (-1, ""))[0]:
                    heads[r.incarnation] = (r.lsn, r.chain_hash)
        return len(stored)

    def _append(self, rows: list[records.EncodedRecord], sources: list[Any], skip_existing: bool,
                key: chain.ChainKey | None) -> list[records.EncodedRecord]:
        inline = self._history == "inline"
        stamped = None if skip_existing else self._backend.stamps(rows)
        history = derive.derive(rows, sources, stamps=stamped) if inline and not skip_existing else None
        conn, new = self._append_conn, self._append_conn is None
        if conn is None:
            conn = self._append_conn = self._engine.connect()
        with conn.begin():
            if new and self.statement_seconds is not None:
                self._backend.limit_statements(conn, self.statement_seconds)
            if skip_existing:
                kept = self._without_stored(conn, rows)
                if not kept:
                    return kept
                if len(kept) < len(rows):
                    stored = {(r.incarnation, r.lsn) for r in rows} - {(r.incarnation, r.lsn) for r in kept}
                    sources = [p for r, p in zip(rows, sources) if (r.incarnation, r.lsn) not in stored]
                rows = kept
                stamped = self._backend.stamps(rows)
                history = derive.derive(rows, sources, stamps=stamped) if inline else None
            for r in rows:
                if not r.chain_hash:
                    rows = self._linked(conn, rows, key)
                    break
            dbapi_connection = conn.connection.driver_connection
            self._backend.insert_records(dbapi_connection, rows, stamped)
            # Rows go in epoch order, each epoch's in LSN order: while the tables trail the journal,
            # or when a newer epoch's rows are written, this batch's are the indexer's. (Records that
            # derive no row, as the `end` a restart writes for its old epoch, are never out of order.)
            standing = indexer.standing(conn, {r.incarnation for r in rows if r.kind in derive.KINDS},
                                        self._starts) if inline else None
            indexed = standing == indexer.INLINE
            if standing is not None and not indexed and not self._trailing:
                log.warning(indexer.WRITER_NOTES[standing])
            self._trailing = inline and not indexed
            epochs.project_incarnations(conn, rows)
            epochs.advance(conn, rows, key, indexed, self._upsert_epochs)
            if indexed and history:
                previous.link(conn, history)
                self._backend.insert_derived(dbapi_connection, history)
        return rows

    def _write_error(self, exc: Exception, rows: Sequence[records.EncodedRecord]) -> errors.JournalError:
        cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
        if self._backend.is_duplicate(cause):
            return errors.DuplicateRecord(
                f"an (epoch, LSN) in LSNs {rows[0].lsn}..{rows[-1].lsn} is already in the journal: {cause}")
        return errors.JournalUnavailable(f"journal write failed ({self.backend}): {cause}")

    def _without_stored(self, conn: sa.Connection, rows: list[records.EncodedRecord]) -> list[records.EncodedRecord]:
        table = schema.journal_records
        lsns = [r.lsn for r in rows]
        stored = {
            (epoch, lsn): (sha, link)
            for epoch, lsn, sha, link in conn.execute(
                sa.select(table.c.incarnation, table.c.lsn, table.c.payload_sha256, table.c.chain_hash).where(
                    table.c.incarnation.in_(sorted({r.incarnation for r in rows})),
                    table.c.lsn.between(min(lsns), max(lsns)),
                )
            )
        }
        if not stored:
            return rows
        conflicts = [
            (r.incarnation, r.lsn) for r in rows
            for found in (stored.get((r.incarnation, r.lsn)),)
            if found is not None and (found[0] != r.payload_sha256 or (r.chain_hash and found[1] != r.chain_hash))
        ]
        if conflicts:
            epoch, lsn = conflicts[0]
            raise errors.DuplicateRecord(
                f"{len(conflicts)} record(s) are stored with different content or link, first epoch {epoch} LSN {lsn}",
                keys=conflicts,
            )
        return [r for r in rows if (r.incarnation, r.lsn) not in stored]

    def _linked(self, conn: sa.Connection, rows: list[records.EncodedRecord],
                key: chain.ChainKey | None) -> list[records.EncodedRecord]:
        """``rows`` with every missing link computed from its epoch's stored head (or GENESIS)."""
        table = schema.journal_epochs
        wanted = sorted({r.incarnation for r in rows if not r.chain_hash})
        running: dict[str, tuple[int, str]] = {
            epoch: (int(lsn), link) for epoch, lsn, link in conn.execute(
                sa.select(table.c.epoch, table.c.head_lsn, table.c.head_hash).where(table.c.epoch.in_(wanted)))
        }
        return linker.Linker(key).fill(rows, running)

    def reindex(self, *, chunk_size: int = REINDEX_CHUNK) -> int:
        """Rebuild the history tables from the stored records in one transaction; the records read.

        Takes the append lock and the writers' (`indexer.rebuild_all`): inline writers' batches
        wait (a busy scheduler spools meanwhile); a follow writer's stay lagging for the indexer.
        """
        return self._rebuild(lambda conn: indexer.rebuild_all(conn, chunk_size=chunk_size),
                             "cannot reindex the journal")

    def _rebuild(self, work: Callable[[sa.Connection], int], failure: str) -> int:
        with self._append_lock:
            self._drop_append_connection()
            try:
                with self._engine.begin() as conn:
                    return work(conn)
            except sa_exc.DBAPIError as exc:
                raise errors.JournalUnavailable(f"{failure} ({self.backend}): {exc.orig}") from exc

    def index(self, *, chunk_size: int = REINDEX_CHUNK, limit: int | None = None) -> int:
        """Derive the history rows the tables lack (records a ``follow`` writer stored); the records read.

        One transaction per chunk of ``chunk_size`` records, so a writer waits at most one
        chunk (SQLite) and an interrupted run keeps what it did. Stops when the tables
        have caught up with what is stored, or after about ``limit`` records. An older
        epoch's records stored after a newer epoch's rows (``Lag.late``) are put in order
        by rebuilding the tables whole, as ``reindex`` does (logged as a warning).
        """
        read = 0
        while limit is None or read < limit:
            try:
                with self._engine.begin() as conn:
                    n = indexer.index_chunk(conn, chunk_size)
            except sa_exc.DBAPIError as exc:
                raise errors.JournalUnavailable(
                    f"cannot index the journal's history ({self.backend}): {exc.orig}") from exc
            if n is None:
                n = self._rebuild(lambda conn: indexer.rebuild_to_heads(conn, chunk_size=chunk_size),
                                  "cannot rebuild the journal's history")
                log.warning("rebuilt the history tables from %d records: an older epoch's records had arrived "
                            "after a newer epoch's rows", n)
            if n == 0:
                break
            read += n
        return read

    def history_lag(self) -> list[indexer.Lag]:
        """The epochs whose records the history tables do not all hold yet (empty: caught up)."""
        try:
            with self._engine.connect() as conn:
                return indexer.lag(conn)
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read the history's progress ({self.backend}): {exc.orig}") from exc

    # -- reading -----------------------------------------------------------------

    def last_lsn(self, timeout: float | None = None) -> int | None:
        """The highest LSN stored in the database, or None for an empty journal.

        With ``timeout`` the question is asked on a thread of its own and a database that
        has not answered within it is ``JournalUnavailable`` (the thread ends on its own,
        within the connect timeout): a new epoch must not wait for the database.
        """
        if timeout is not None:
            return deadline.bounded(self.last_lsn, timeout, f"the journal database did not answer within {timeout:g} s")
        try:
            with self._engine.connect() as conn:
                if self._schema is not None and not self._schema.ready and not sa.inspect(conn).has_table(
                        schema.journal_records.name):
                    return None  # not migrated yet: no records (the writer migrates or waits before it writes)
                value = conn.execute(sa.select(sa.func.max(schema.journal_records.c.lsn))).scalar()
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read the last LSN ({self.backend}): {exc.orig}") from exc
        return None if value is None else int(value)

    def read(
        self,
        epoch: str | None = None,
        *,
        since_lsn: int | None = None,
        until_lsn: int | None = None,
        kinds: Collection[str] | None = None,
    ) -> Iterator[records.JournalRecord]:
        """Records of ``epoch`` with ``since_lsn < lsn <= until_lsn`` in LSN order, streamed, hashes verified.

        Without ``epoch``: every epoch's records, one epoch after another (see ``read_encoded``).
        """
        for row in self.read_encoded(epoch, since_lsn=since_lsn, until_lsn=until_lsn, kinds=kinds):
            yield records.decode(row)

    def read_encoded(
        self,
        epoch: str | None = None,
        *,
        since_lsn: int | None = None,
        until_lsn: int | None = None,
        kinds: Collection[str] | None = None,
        chunk_size: int = 1000,
    ) -> Iterator[records.EncodedRecord]:
        """Like ``read`` but yields the stored form (canonical text and hash) unchanged.

        An LSN range is one epoch's and needs ``epoch`` (``selects.records`` says why and in
        which order records come). Streams (server-side cursor on PostgreSQL); the
        connection is held until the iterator is exhausted or closed.
        """
        stmt = selects.records(epoch, since_lsn, until_lsn, kinds)
        try:
            with self._engine.connect() as conn:
                result = conn.execution_options(yield_per=chunk_size).execute(stmt)
                for row in result:
                    yield records.EncodedRecord(*row)
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read the journal ({self.backend}): {exc.orig}") from exc

    def epochs(self, only: Collection[str] | None = None) -> dict[str, epochs.EpochHead]:
        """Each epoch's stored head (``only`` those named), by epoch."""
        if self._schema is not None:
            self._schema.check(self._engine)  # the writer drains a spool with this: not before the schema is there
        stmt = selects.epoch_heads(only)
        try:
            with self._engine.connect() as conn:
                return {row[0]: epochs.EpochHead(*row) for row in conn.execute(stmt)}
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read the epochs ({self.backend}): {exc.orig}") from exc

    def incarnations(self) -> list[epochs.Incarnation]:
        """Every incarnation that wrote to this journal, by first LSN (not by age, where epochs' LSNs
        overlap: ``history.order`` says which is older)."""
        stmt = selects.incarnations()
        try:
            with self._engine.connect() as conn:
                return [epochs.Incarnation(*row) for row in conn.execute(stmt)]
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read incarnations ({self.backend}): {exc.orig}") from exc


