"""The stored records themselves, read by key: a record, the journal's bounds, its incarnations, leaders,
checkpoints and prune record, each epoch's stored head.

What the web view shows of the journal as a whole, and what the history tables point
at: their rows are keyed by their record's (epoch, LSN), so a page that needs a
record's payload fetches it here by the primary key. Nothing here scans the journal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from kruntimes.journal.history import order, read
from kruntimes.journal.store import backends, schema

_R = schema.journal_records


@dataclass(frozen=True)
class Record:
    lsn: int
    at: datetime
    kind: str
    incarnation: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Bounds:
    """The journal's first record (the oldest epoch's first) and its newest (the newest epoch's last)."""

    first_lsn: int
    last_lsn: int
    first_at: datetime
    last_at: datetime
    first_epoch: str
    last_epoch: str


def _select() -> sa.Select[Any]:
    # recorded_at as stored: parsing it through the column type costs more than the payload.
    return sa.select(_R.c.lsn, sa.type_coerce(_R.c.recorded_at, sa.String), _R.c.kind, _R.c.incarnation,
                     _R.c.payload)


def _records(journal: backends.Journal, stmt: sa.Select[Any]) -> Iterator[Record]:
    for lsn, at, kind, incarnation, payload in read.execute(journal, stmt):
        yield Record(lsn, read.at(at), kind, incarnation, orjson.loads(payload))


def record(journal: backends.Journal, lsn: int, epoch: str | None = None) -> Record | None:
    """The record at ``lsn`` (of ``epoch`` when given: LSNs are unique only within an epoch)."""
    stmt = _select().where(_R.c.lsn == lsn)
    if epoch is not None:
        stmt = stmt.where(_R.c.incarnation == epoch)
    return next(_records(journal, stmt.order_by(_R.c.incarnation)), None)


def records_at(journal: backends.Journal, lsn: int) -> list[Record]:
    """Every record at ``lsn``, one per epoch that has one."""
    return list(_records(journal, _select().where(_R.c.lsn == lsn).order_by(_R.c.incarnation)))


def by_keys(journal: backends.Journal, keys: Iterable[tuple[str, int]]) -> list[Record]:
    """The records at these (epoch, LSN) keys, epoch by epoch (oldest first), each in LSN order.

    Primary-key look-ups, nothing scanned. (epoch, LSN) is the identity and the order
    the writer stored them in (``order``): a bare LSN order would interleave epochs
    whose LSNs overlap.
    """
    wanted = set(keys)
    lsns = sorted({lsn for _, lsn in wanted})
    found: list[Record] = []
    for start in range(0, len(lsns), 500):
        stmt = _select().where(_R.c.lsn.in_(lsns[start:start + 500]))
        found += [r for r in _records(journal, stmt) if (r.incarnation, r.lsn) in wanted]
    epochs = {r.incarnation for r in found}
    starts = order.ordered(read.execute(journal, order.starts_query(epochs)))
    rank = {s.epoch: i for i, s in enumerate(starts)}
    return sorted(found, key=lambda r: (rank.get(r.incarnation, -1), r.lsn))


# -- the journal as a whole ------------------------------------------------------------------


def bounds(journal: backends.Journal, spans: list[read.Span] | None = None) -> Bounds | None:
    """The first record (the oldest epoch's first) and the newest (the last of the epoch that recorded last)."""
    spans = read.spans(journal) if spans is None else spans
    if not spans:
        return None
    last = max(reversed(spans), key=lambda s: s.last_at)  # a tie goes to the newer epoch
    return Bounds(spans[0].first_lsn, last.last_lsn, spans[0].first_at, last.last_at, spans[0].epoch, last.epoch)


def journal_start(journal: backends.Journal) -> tuple[datetime | None, bool]:
    """When the oldest record still stored was recorded (None: empty), and whether a prune cut older ones away
    (its record is at LSN 0): what an answer of "nothing" should add."""
    # a probe of the recorded_at index, one of the primary key
    start: datetime | None = read.rows(journal, sa.select(sa.func.min(_R.c.recorded_at).label("start")))[0]["start"]
    return start, bool(read.rows(journal, sa.select(_R.c.lsn).where(_R.c.lsn == 0).limit(1)))


def recorded_at_back(journal: backends.Journal, records: int) -> datetime | None:
    """When the record ``records`` back from the newest was recorded, counting epoch by epoch from the newest
    (to size a default window by records); None if the journal holds fewer.

    An epoch's count is its LSN span (gap-free within an epoch); then one probe of the key.
    """
    for s in reversed(read.spans(journal)):
        count = s.last_lsn - s.first_lsn + 1
        if records < count:
            found = read.execute(journal, sa.select(sa.type_coerce(_R.c.recorded_at, sa.String))
                                 .where(_R.c.incarnation == s.epoch, _R.c.lsn >= s.last_lsn - records)
                                 .order_by(_R.c.lsn).limit(1))
            return read.at(found[0][0]) if found else None
        records -= count
    return None


def incarnations(journal: backends.Journal) -> list[Record]:
    """Every scheduler incarnation's first record (its version and configuration), oldest first.

    By time, then epoch order (not the epoch's ID), then LSN: LSNs overlap between epochs
    begun while the database was away.
    """
    stmt = _select().where(_R.c.kind == "incarnation").order_by(
        *read.order_by(journal, _R.c.recorded_at, _R.c.incarnation, _R.c.lsn))
    return list(_records(journal, stmt))


def config_at(journal: backends.Journal, lsn: int, epoch: str | None = None) -> dict[str, Any]:
    """The scheduler configuration of the incarnation that wrote (``epoch``, ``lsn``).

    Without the epoch, the newest incarnation at or below ``lsn`` (or the first one):
    a guess where epochs' LSNs overlap.
    """
    every = incarnations(journal)
    found = [r for r in every if r.incarnation == epoch] if epoch is not None else []
    found = found or [r for r in every if r.lsn <= lsn] or every
    return dict(found[-1].payload.get("config") or {}) if found else {}


def kind_counts(journal: backends.Journal) -> dict[str, int]:
    """How many records of each kind are stored."""
    return {kind: n for kind, n in read.execute(journal, sa.select(_R.c.kind, sa.func.count()).group_by(_R.c.kind))}


def cycles_between(journal: backends.Journal, since: datetime, until: datetime) -> int:
    """How many cycle records were recorded in ``[since, until)``."""
    stmt = (sa.select(sa.func.count()).select_from(_R)
            .where(_R.c.recorded_at >= since, _R.c.recorded_at < until, _R.c.kind == "cycle"))
    return int(read.execute(journal, stmt)[0][0])


def leader_records(journal: backends.Journal, limit: int = 200) -> list[Record]:
    """The newest ``limit`` leader records, oldest first: by time, then epoch order, then LSN."""
    stmt = (_select().where(_R.c.kind == "leader")
            .order_by(*read.order_by(journal, _R.c.recorded_at, _R.c.incarnation, _R.c.lsn, newest_first=True))
            .limit(limit))
    return list(reversed(list(_records(journal, stmt))))


def prune_record(journal: backends.Journal) -> Record | None:
    """The newest prune record (each prune adds one at LSN 0: ``journal.prune_record``)."""
    return next(_records(journal, _select().where(_R.c.lsn == 0).order_by(_R.c.recorded_at.desc()).limit(1)), None)


def checkpoints(journal: backends.Journal, limit: int = 20, *,
                at: datetime | None = None) -> list[tuple[str, int, datetime]]:
    """The newest checkpoints (recorded at or before ``at``, if given) as (epoch, LSN, when), newest first.

    Newest by time, then epoch order, then LSN: the highest LSN may be an older epoch's.
    """
    stmt = (sa.select(_R.c.incarnation, _R.c.lsn, sa.type_coerce(_R.c.recorded_at, sa.String))
            .where(_R.c.kind == "checkpoint")
            .order_by(*read.order_by(journal, _R.c.recorded_at, _R.c.incarnation, _R.c.lsn, newest_first=True))
            .limit(limit))
    if at is not None:
        stmt = stmt.where(_R.c.recorded_at <= at)
    return [(epoch, lsn, read.at(when)) for epoch, lsn, when in read.execute(journal, stmt)]


def checkpoint_before(journal: backends.Journal, at: datetime) -> Record | None:
    """The newest checkpoint recorded at or before ``at``, parsed."""
    found = checkpoints(journal, 1, at=at)
    return record(journal, found[0][1], found[0][0]) if found else None


def epochs(journal: backends.Journal) -> list[sa.Row[Any]]:
    """Each epoch's stored head and end (``journal_epochs``), oldest first."""
    e = schema.journal_epochs
    return read.execute(journal, sa.select(e.c.epoch, e.c.first_lsn, e.c.head_lsn, e.c.head_hash, e.c.algorithm,
                                           e.c.key_id, e.c.started_at, e.c.end_lsn, e.c.end_reason)
                        .order_by(e.c.started_at, e.c.epoch))
