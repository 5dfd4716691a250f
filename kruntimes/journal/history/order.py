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

from collections.abc import Collection, Iterable, Mapping, Sequence
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


def spans_query() -> sa.Select[Any]:
    """(epoch, first LSN, its time, last LSN, its time) of each epoch ``journal_epochs`` lists that has records.

    For readers (the web view, ``kruntimes history``): two probes of the key per epoch
    instead of ``starts_query``'s pass over it (a pass over a million records costs
    ~0.1 s on SQLite). Which epochs there are comes from the plain ``journal_epochs``
    table; their order still comes from their first records: sort the rows by their
    first three columns with ``ordered``.
    """
    r, e = schema.journal_records, schema.journal_epochs

    def probe(column: Any, lsn: Any) -> sa.ScalarSelect[Any]:  # correlated: an index search per epoch
        return (sa.select(column).where(r.c.incarnation == e.c.epoch, r.c.lsn >= FIRST_SCHEDULER_LSN)
                .order_by(lsn).limit(1).scalar_subquery())

    first_lsn, last_lsn = probe(r.c.lsn, r.c.lsn), probe(r.c.lsn, r.c.lsn.desc())
    query = sa.select(e.c.epoch, first_lsn.label("first_lsn"), probe(r.c.recorded_at, r.c.lsn).label("first_at"),
                      last_lsn.label("last_lsn"), probe(r.c.recorded_at, r.c.lsn.desc()).label("last_at"))
    spans = query.subquery("spans")
    return sa.select(spans).where(spans.c.first_lsn.is_not(None))  # an epoch with no records left: none


def ordered(rows: Iterable[Sequence[Any]]) -> list[EpochStart]:
    """The rows of ``starts_query``, oldest epoch first."""
    return sorted(EpochStart(at, int(lsn), epoch) for epoch, lsn, at in rows)


def starts(conn: sa.Connection, epochs: Collection[str] | None = None) -> list[EpochStart]:
    """Every epoch that has records (of ``epochs``, if given), oldest first, by the time of its first record."""
    return ordered(conn.execute(starts_query(epochs)))


def first_record(conn: sa.Connection, epoch: str) -> EpochStart | None:
    """When ``epoch`` began, by one probe of the key (None: it has no records)."""
    r = schema.journal_records
    found = conn.execute(sa.select(r.c.lsn, r.c.recorded_at).where(
        r.c.incarnation == epoch, r.c.lsn >= FIRST_SCHEDULER_LSN).order_by(r.c.lsn).limit(1)).first()
    return None if found is None else EpochStart(found.recorded_at, int(found.lsn), epoch)


def newest(conn: sa.Connection) -> str | None:
    """The newest epoch (the one whose writer may still be running), or None in an empty journal."""
    found = starts(conn)
    return found[-1].epoch if found else None


# -- (epoch, LSN) in queries ---------------------------------------------------------------
#
# A record's identity is (epoch, LSN): LSNs overlap between epochs begun while the
# database was away, so neither a bare LSN range nor an order by LSN (or by epoch ID)
# says which record came first. A stretch of the journal is a *cut* per epoch (the
# newest LSN of each epoch it holds), and records go by time, then by this module's
# epoch order, then by LSN.

#: Per epoch, the newest LSN a stretch of the journal holds (an epoch absent: none of its records).
Cut = Mapping[str, int]


def rank(epoch: sa.ColumnElement[Any], oldest_first: Sequence[str]) -> sa.ColumnElement[int]:
    """``epoch``'s place in ``oldest_first`` (the order of ``starts``) as an SQL value, to order by after time.

    An epoch not listed (one with no records left) ranks first, as the oldest.
    """
    if not oldest_first:
        return sa.literal(0)
    return sa.case({e: i + 1 for i, e in enumerate(oldest_first)}, value=epoch, else_=0)


def order(when: Any, epoch: Any, lsn: Any, oldest_first: Sequence[str], *, newest_first: bool = False) -> list[Any]:
    """ORDER BY terms: time, then epoch order, then LSN (newest first if asked)."""
    terms = [when, rank(epoch, oldest_first), lsn]
    return [t.desc() for t in terms] if newest_first else terms


def between(epoch: Any, lsn: Any, after: Cut, upto: Cut) -> sa.ColumnElement[bool]:
    """(``epoch``, ``lsn``) after ``after`` and within ``upto``: one LSN range per epoch, never a bare one."""
    return sa.or_(sa.false(), *(sa.and_(epoch == e, lsn > after.get(e, FIRST_SCHEDULER_LSN - 1), lsn <= last)
                                for e, last in sorted(upto.items()) if last > after.get(e, FIRST_SCHEDULER_LSN - 1)))
