"""SQLite backend: the embedded default (``sqlite:///kruntimes-journal.db``).

WAL mode lets people query the journal while the writer appends; ``synchronous=NORMAL``
makes a commit a WAL append without fsync (durable across a process crash, may lose
the last commits on power loss -- the trade every WAL-mode SQLite user makes).

Bulk insert is a multi-row ``INSERT ... VALUES (...),(...)`` on the raw sqlite3
connection, not ``executemany``: the sqlite3 module releases the GIL around every
``sqlite3_step``, so executemany gives the GIL back once per row, and with a busy
scheduler thread each re-acquisition can wait a full switch interval (5 ms). Measured
on 1 KB rows: executemany 116k rows/s alone but 1.6k rows/s beside a CPU-bound
thread; multi-row VALUES 153k rows/s alone and 44k rows/s beside it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event, pool

from kruntimes.journal.history import derive
from kruntimes.journal import records
from kruntimes.journal.store import schema

NAME = "sqlite"
BUSY_TIMEOUT_MS = 10_000
_COLUMNS = "lsn, incarnation, recorded_at, kind, schema_version, payload, payload_sha256, chain_hash"
_ROW_PLACEHOLDERS = "(?,?,?,?,?,?,?,?)"


def create_engine(url: sa.URL) -> sa.Engine:
    """An engine whose every connection runs in WAL mode with a busy timeout."""
    memory = url.database in (None, "", ":memory:")
    if not memory:
        _create_private(str(url.database))
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}}
    if memory:
        # One shared connection, or every thread would see its own empty database.
        kwargs["poolclass"] = pool.StaticPool
    engine = sa.create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        finally:
            cursor.close()

    return engine


def _create_private(path: str) -> None:
    """Create a journal file that is not there yet with mode 0600, before SQLite would create it 0644.

    SQLite gives the -wal and -shm files the database file's mode, so they are private
    too. A file that exists keeps its mode; a missing directory is left for SQLite to report.
    """
    if path.startswith("file:") or os.path.exists(path) or not os.path.isdir(os.path.dirname(path) or "."):
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass  # created meanwhile by another process: its mode stands


def limit_statements(conn: sa.Connection, seconds: float) -> None:
    """Wait at most ``seconds`` for another connection's write lock (the writer's bound, ``deadline``)."""
    conn.exec_driver_sql(f"PRAGMA busy_timeout={max(1, int(seconds * 1000))}")


def stamps(rows: Sequence[records.EncodedRecord]) -> list[str]:
    """Each row's time as SQLite stores it: computed once for the record and its history rows."""
    timestamp = schema.sqlite_timestamp
    return [timestamp(r[2]) for r in rows]


def insert_records(dbapi_connection: sqlite3.Connection, rows: Sequence[records.EncodedRecord],
                   stamped: Sequence[str] | None = None) -> None:
    """Insert ``rows`` inside the caller's transaction; raises sqlite3 errors unchanged.

    ``stamped`` is ``stamps(rows)`` when the caller has it already.
    """
    chunk = _rows_per_statement(dbapi_connection)
    cursor = dbapi_connection.cursor()
    if stamped is None:
        stamped = stamps(rows)
    try:
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            params: list[Any] = []
            extend = params.extend
            for r, at in zip(part, stamped[start : start + chunk]):
                extend((r[0], r[1], at, r[3], r[4], r[5], r[6], r[7]))
            cursor.execute(_insert_statement(len(part)), params)
    finally:
        cursor.close()


#: History rows hold their times as the text SQLite stores (``derive.derive(..., stamp=STAMP)``).
STAMP = schema.sqlite_timestamp


def insert_derived(dbapi_connection: sqlite3.Connection, derived: derive.Derived) -> None:
    """Write the history rows and statements of a batch inside the caller's transaction."""
    cursor = dbapi_connection.cursor()
    try:
        limit = _variable_limit(dbapi_connection)
        for table, rows in derived.rows.items():
            if not rows:
                continue
            width = len(rows[0])
            chunk = max(1, min(500, limit // width))
            for start in range(0, len(rows), chunk):
                part = rows[start : start + chunk]
                params: list[Any] = []
                extend = params.extend
                for row in part:
                    extend(row)
                cursor.execute(_derived_statement(table, width, len(part)), params)
        for sql, params_rows in derive.statements(derived):
            if len(params_rows) > 1 and sql.startswith("INSERT"):
                # An upsert's rows of one round never meet the same key twice (one per Run,
                # pod hour, epoch), so one multi-row statement does what executemany did.
                width = len(params_rows[0])
                chunk = max(1, min(500, limit // width))
                for start in range(0, len(params_rows), chunk):
                    part = params_rows[start : start + chunk]
                    params = []
                    for row in part:
                        params.extend(row)
                    cursor.execute(_multi_row(sql, len(part)), params)
            else:
                cursor.executemany(sql, params_rows)
    finally:
        cursor.close()


_multi_rows: dict[tuple[str, int], str] = {}


def _multi_row(sql: str, n: int) -> str:
    """``INSERT ... VALUES (?,..) rest`` with ``n`` rows of placeholders."""
    statement = _multi_rows.get((sql, n))
    if statement is None:
        head, tail = sql.split(" VALUES ", 1)
        end = tail.index(")") + 1
        statement = _multi_rows[(sql, n)] = f"{head} VALUES {','.join([tail[:end]] * n)}{tail[end:]}"
    return statement


_derived_statements: dict[tuple[str, int, int], str] = {}


def _derived_statement(table: str, width: int, n: int) -> str:
    statement = _derived_statements.get((table, width, n))
    if statement is None:
        row = "(" + ",".join("?" * width) + ")"
        columns = ", ".join(derive.COLUMNS[table][:width])  # rows may leave the last columns out
        statement = _derived_statements[(table, width, n)] = (
            f"INSERT INTO {table} ({columns}) VALUES {','.join([row] * n)}")
    return statement


def is_duplicate(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc).upper()


_statements: dict[int, str] = {}


def _insert_statement(n: int) -> str:
    statement = _statements.get(n)
    if statement is None:
        values = ",".join([_ROW_PLACEHOLDERS] * n)
        statement = _statements[n] = f"INSERT INTO journal_records ({_COLUMNS}) VALUES {values}"
    return statement


def _rows_per_statement(dbapi_connection: sqlite3.Connection) -> int:
    # 500 rows measured best; old SQLite builds allow only 999 host parameters.
    return max(1, min(500, _variable_limit(dbapi_connection) // 8))


def _variable_limit(dbapi_connection: sqlite3.Connection) -> int:
    try:
        return int(dbapi_connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    except AttributeError:  # Python < 3.11
        return 999
