"""The web view's read-only connection to the journal, and one method per question a page asks.

Why a class: the pages must not care where an answer comes from, and the connection
they share is read-only. Every answer is the journal's history layer's
(``kruntimes.journal.history``): the same functions ``kruntimes history`` calls, run
on both backends by the journal's contract tests. The ``Reader`` holds the connection
and the few parsed checkpoints a window starts from (``windows.StartStates``), and
delegates.

The connection is read-only twice over: SQLite is opened with ``mode=ro`` (and
``PRAGMA query_only``), PostgreSQL sessions with ``default_transaction_read_only``;
``deploy/README.md`` also shows a role that can only ``SELECT``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa

from kruntimes.journal import errors
from kruntimes.journal.history import buckets, indexer, pods, read, runs, stored, waits, windows
from kruntimes.journal.store import backends, engines, migrate


class JournalNotFound(errors.JournalError):
    """The URL names no journal (an SQLite file that is not there)."""


def open_reader(url: str) -> Reader:
    """A ``Reader`` on the journal at ``url``, read-only; its schema must be current."""
    parsed = engines.parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database or ""
        if path in ("", ":memory:") or not Path(path).is_file():
            raise JournalNotFound(f"no journal at {path or '(in-memory)'}: pass --journal sqlite:///PATH of an "
                                  "existing journal (the scheduler's, or the one `kruntimes demo` wrote)")
        engine = _sqlite_read_only(str(Path(path).resolve()), parsed)
    else:
        # Added to the URL's own options (a search_path, say), not instead of them.
        options = " ".join(filter(None, (str(parsed.query.get("options") or ""),
                                         "-c default_transaction_read_only=on")))
        engine = sa.create_engine(parsed.update_query_dict({"options": options}), pool_pre_ping=True)
    try:
        migrate.require_head(engine)
    except BaseException:
        engine.dispose()
        raise
    return Reader(backends.Journal(engine))


def _sqlite_read_only(path: str, url: sa.URL) -> sa.Engine:
    uri = f"file:{quote(path)}?mode=ro"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=10)
        conn.execute("PRAGMA query_only=1")
        return conn

    return sa.create_engine(url, creator=connect)


class Reader:
    """The read side of the web view: one method per question a page asks, each the history layer's answer."""

    def __init__(self, journal: backends.Journal) -> None:
        self.journal = journal
        self._starts = windows.StartStates()

    def close(self) -> None:
        self.journal.engine.dispose()

    @property
    def backend(self) -> str:
        return self.journal.backend

    # -- the journal as a whole ---------------------------------------------------------------

    def spans(self) -> list[read.Span]:
        return read.spans(self.journal)

    def bounds(self, spans: list[read.Span] | None = None) -> stored.Bounds | None:
        return stored.bounds(self.journal, spans)

    def recorded_at_back(self, records: int) -> datetime | None:
        return stored.recorded_at_back(self.journal, records)

    def incarnations(self) -> list[stored.Record]:
        return stored.incarnations(self.journal)

    def config_at(self, lsn: int, epoch: str | None = None) -> dict[str, Any]:
        return stored.config_at(self.journal, lsn, epoch)

    def kind_counts(self) -> dict[str, int]:
        return stored.kind_counts(self.journal)

    def leader_records(self, limit: int = 200) -> list[stored.Record]:
        return stored.leader_records(self.journal, limit)

    def history_lag(self) -> list[indexer.Lag]:
        """The epochs the history tables trail (empty: caught up); one query on the tiny journal_epochs."""
        return self.journal.history_lag()

    def prune_record(self) -> stored.Record | None:
        return stored.prune_record(self.journal)

    def checkpoints(self, limit: int = 20, *, at: datetime | None = None) -> list[tuple[str, int, datetime]]:
        return stored.checkpoints(self.journal, limit, at=at)

    def cycles_between(self, since: datetime, until: datetime) -> int:
        return stored.cycles_between(self.journal, since, until)

    def epochs(self) -> list[sa.Row[Any]]:
        return stored.epochs(self.journal)

    def record(self, lsn: int, epoch: str | None = None) -> stored.Record | None:
        return stored.record(self.journal, lsn, epoch)

    def records_at(self, lsn: int) -> list[stored.Record]:
        return stored.records_at(self.journal, lsn)

    # -- a time window ------------------------------------------------------------------------

    def newest_at(self, at: datetime, spans: list[read.Span] | None = None, *,
                  strictly: bool = False) -> tuple[str, int] | None:
        return windows.newest_at(self.journal, at, spans, strictly=strictly)

    def cut_at(self, at: datetime, spans: list[read.Span] | None = None, *,
               strictly_before: Iterable[str] = ()) -> dict[str, int]:
        return windows.cut_at(self.journal, at, spans, strictly_before=strictly_before)

    def window(self, since: datetime, until: datetime) -> windows.Window:
        return windows.window(self.journal, since, until, self._starts)

    def bars(self, w: windows.Window, lanes: list[tuple[str, str]]) -> list[windows.Bar]:
        return windows.bars(self.journal, w, lanes)

    def held(self, w: windows.Window, lanes: list[tuple[str, str]], b: buckets.Buckets) -> buckets.Held:
        """What the placements on ``lanes`` held during the window, grouped for the utilisation figure."""
        return buckets.held(self.journal, b, lanes, w.after, w.upto, w.placed_before)

    def bind_counts(self, b: buckets.Buckets) -> dict[str, list[int]]:
        return buckets.binds(self.journal, b)

    def pending_counts(self, b: buckets.Buckets) -> dict[str, list[int]]:
        return buckets.pending(self.journal, b)

    # -- one Run ------------------------------------------------------------------------------

    def run_records(self, namespace: str, name: str, *, limit: int = 2000) -> list[stored.Record]:
        return runs.run_records(self.journal, namespace, name, limit=limit)

    def run_waits(self, namespace: str, run_uids: list[str]) -> dict[str, Any] | None:
        return waits.run_waits(self.journal, namespace, run_uids)

    def waits(self) -> list[dict[str, Any]]:
        """Every Run placed or still Pending, longest wait first (``kruntimes history waits`` reads the same)."""
        return waits.waits(self.journal)

    # -- one pod ------------------------------------------------------------------------------

    def pod_observation(self, namespace: str, name: str, at: datetime) -> stored.Record | None:
        return pods.pod_observation(self.journal, namespace, name, at)

    def pod_runs(self, namespace: str, name: str, at: datetime) -> list[windows.Bar]:
        return pods.pod_runs(self.journal, namespace, name, at)

    def held_devices(self, namespace: str, name: str, at: datetime) -> dict[str, Any]:
        return pods.held_devices(self.journal, namespace, name, at)
