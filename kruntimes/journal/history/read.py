"""How the history room's questions read: one connection per statement, and the order records go in.

Every question (``runs``, ``pods``, ``cycles``, ``waits``, ``stored``, ``windows``,
``buckets``) is a parameterized SQLAlchemy statement run here on the journal's engine -
user input is only ever a bound parameter, never SQL text - so ``kruntimes history`` and
the web view read the same way, with the same error when the database is away, and a
test of a question on both backends tests the query itself.

Records go by time, then epoch order, then LSN (``order``): (epoch, LSN) is a record's
identity and LSNs overlap between epochs begun while the database was away, so neither
the LSN nor the epoch's ID says which of two records recorded at the same instant came
first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import errors
from kruntimes.journal.history import order
from kruntimes.journal.store import backends


def execute(journal: backends.Journal, stmt: sa.Executable) -> list[sa.Row[Any]]:
    """The rows of ``stmt``, read on a connection of their own."""
    try:
        with journal.engine.connect() as conn:
            return list(conn.execute(stmt))
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}") from exc


def rows(journal: backends.Journal, stmt: sa.Executable) -> list[dict[str, Any]]:
    """The rows of ``stmt`` as dicts by column name."""
    return [dict(row._mapping) for row in execute(journal, stmt)]


def at(value: Any) -> datetime:
    """A time as stored (SQLite text, PostgreSQL datetime) → aware UTC datetime."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
    parsed = datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


@dataclass(frozen=True)
class Span:
    """One epoch's stored records: its first and last LSN and when they were recorded."""

    epoch: str
    first_lsn: int
    first_at: datetime
    last_lsn: int
    last_at: datetime


def spans(journal: backends.Journal) -> list[Span]:
    """Each epoch's first and last record, oldest epoch first (``order``: by chained data).

    Probes of the primary key (epoch, LSN), no pass over it; LSN 0, a prune record, is
    not a scheduler's record.
    """
    found = {epoch: (int(first), at(first_at), int(last), at(last_at))
             for epoch, first, first_at, last, last_at in execute(journal, order.spans_query())}
    return [Span(s.epoch, *found[s.epoch])
            for s in order.ordered((e, first, first_at) for e, (first, first_at, _, _) in found.items())]


def oldest_first(journal: backends.Journal) -> list[str]:
    """Every epoch with records, oldest first (``order``: by chained data, not a plain column)."""
    return [s.epoch for s in spans(journal)]


def order_by(journal: backends.Journal, when: Any, epoch: Any, lsn: Any, *, newest_first: bool = False) -> list[Any]:
    """ORDER BY time, then epoch order, then LSN (newest first if asked)."""
    return order.order(when, epoch, lsn, oldest_first(journal), newest_first=newest_first)
