"""Which epoch is older, and which is the newest: decided by chained data only.

SPEC §5 "Crash vs loss" (amended 2026-12-04): "Which epoch is newest is decided by
chained data, not by an unprotected column." The newest epoch is the one `verify`
lets stay open (no `end` record) and the one a prune never removes whole, so
whoever could move an epoch to "newest" could hide a truncated tail or keep an
epoch from being pruned. ``journal_epochs.started_at`` and
``journal_incarnations.started_at`` are plain columns anyone with write access can
change; the time of an epoch's first record (its ``incarnation`` record, which a
prune always keeps) is inside that record's link, so changing it breaks the chain
(and, with a key, cannot be resealed).

An epoch starts when its first stored record was recorded; ties go to the lower
first LSN, then to the epoch ID, so the order is total and the same on every backend.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kruntimes.journal.store import schema

#: Records below this LSN are not an epoch's (the prune records live at LSN 0).
FIRST_SCHEDULER_LSN = 1


@dataclass(frozen=True, order=True)
class EpochStart:
    """When an epoch began, by its first stored record (sorts oldest first)."""

    started_at: datetime
    first_lsn: int
    epoch: str


def starts_query(epochs: Collection[str] | None = None) -> sa.Select[Any]:
    """(epoch, first LSN, its time) of each epoch that has records (of ``epochs``, if given); ``ordered`` sorts."""
    r = schema.journal_records
    query = sa.select(r.c.incarnation, sa.func.min(r.c.lsn).label("lsn")).where(r.c.lsn >= FIRST_SCHEDULER_LSN)
    if epochs is not None:
        query = query.where(r.c.incarnation.in_(sorted(epochs)))
    first = query.group_by(r.c.incarnation).subquery()
    return (sa.select(r.c.incarnation, r.c.lsn, r.c.recorded_at)
            .join(first, sa.and_(r.c.incarnation == first.c.incarnation, r.c.lsn == first.c.lsn)))


def ordered(rows: Iterable[Sequence[Any]]) -> list[EpochStart]:
    """The rows of ``starts_query``, oldest epoch first."""
    return sorted(EpochStart(at, int(lsn), epoch) for epoch, lsn, at in rows)


def starts(conn: sa.Connection, epochs: Collection[str] | None = None) -> list[EpochStart]:
    """Every epoch that has records (of ``epochs``, if given), oldest first, by the time of its first record."""
    return ordered(conn.execute(starts_query(epochs)))


def newest(conn: sa.Connection) -> str | None:
    """The newest epoch (the one whose writer may still be running), or None in an empty journal."""
    found = starts(conn)
    return found[-1].epoch if found else None
