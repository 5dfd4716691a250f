"""The Timeline's figures per time bucket, as SQL aggregates over the history tables (issue 17).

Why in SQL: five minutes of a busy cluster hold tens of thousands of placements,
binds and cycles. Grouped where they are stored, they come back as one row per bucket
and result (or reason, or kind of request), so a figure costs its ``BUCKETS`` points
plus the index range it reads, not a Python loop over every row. A window always has
``BUCKETS`` buckets: a wider window has wider buckets, never more points.

Times become integer microseconds in SQL (SQLite's stored text, PostgreSQL's
``timestamptz``), and bucket arithmetic is integer division, so both backends put
every row in the same bucket and draw the same figures. What the rows mean as a
figure is the web view's (``ui.timeline.utilisation`` turns ``held``'s groups into
percentages of capacity).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
import sqlalchemy as sa

from kruntimes.journal.history import order, read, tables, windows
from kruntimes.journal.history.values import micros
from kruntimes.journal.store import backends, schema

BUCKETS = 120
_US = timedelta(microseconds=1)


@dataclass(frozen=True)
class Buckets:
    """``BUCKETS`` buckets of ``step_us`` from ``since``; the last one reaches ``until`` (or just past it)."""

    since: datetime
    until: datetime
    step_us: int

    @classmethod
    def of(cls, since: datetime, until: datetime) -> Buckets:
        span = micros(until) - micros(since)
        return cls(since, until, max(1, -(-span // BUCKETS)))

    @property
    def seconds(self) -> float:
        return self.step_us / 1e6

    @property
    def span_us(self) -> int:
        return micros(self.until) - micros(self.since)

    def starts(self) -> list[datetime]:
        return [self.since + self.step_us * k * _US for k in range(BUCKETS)]

    def index(self, column: str, dialect: str) -> sa.ColumnElement[Any]:
        """The bucket of the time in ``column`` (rows of the window only: at or after ``since``)."""
        return sa.literal_column(f"({_micros(column, dialect)} - {micros(self.since)}) / {self.step_us}")


def _micros(column: str, dialect: str) -> str:
    """SQL for a stored time as integer microseconds since 1970 (exact: no floating point left in it)."""
    if dialect == "sqlite":  # stored as 'YYYY-MM-DD HH:MM:SS.ffffff'. SQLite's clock keeps milliseconds and would
        # round .9996 up a second, so it gets the whole seconds (julianday: the cheapest parse) and the text the rest.
        return (f"(CAST(round((julianday(substr({column}, 1, 19)) - 2440587.5) * 86400) AS INTEGER) * 1000000"
                f" + CAST(substr({column}, 21, 6) AS INTEGER))")
    return f"CAST(EXTRACT(EPOCH FROM {column}) * 1000000 AS BIGINT)"


def binds(journal: backends.Journal, b: Buckets) -> dict[str, list[int]]:
    """Bind results per bucket: result -> counts.

    One range of the ``(recorded_at, result)`` index per bucket, counted there: a bind is
    never parsed (a window of five minutes holds tens of thousands).
    """
    t = tables.binds
    edges = [*b.starts(), b.until]
    rows = [(k, edges[k], min(edges[k + 1], b.until)) for k in range(BUCKETS) if edges[k] < b.until]
    k = sa.values(sa.column("k", sa.Integer), sa.column("lo", schema.UtcDateTime()),
                  sa.column("hi", schema.UtcDateTime()), name="b").data(rows).cte("b")
    stmt = (sa.select(k.c.k, t.c.result, sa.func.count())
            .select_from(k.join(t, sa.and_(t.c.recorded_at >= k.c.lo, t.c.recorded_at < k.c.hi)))
            .group_by(k.c.k, t.c.result))
    out: dict[str, list[int]] = {}
    for bucket, result, n in read.execute(journal, stmt):
        out.setdefault(str(result), [0] * BUCKETS)[int(bucket)] += int(n)
    return out


def pending(journal: backends.Journal, b: Buckets) -> dict[str, list[int]]:
    """Pending Runs per bucket: reason -> Runs with a cycle in that bucket that left them Pending for it.

    A cycle's reasons are its rejections; one with none counts under its message.
    """
    c, r = tables.cycles, tables.rejections
    k = b.index("history_cycles.decided_at", journal.backend)
    reason = sa.func.coalesce(sa.func.nullif(r.c.reason, ""), sa.func.nullif(c.c.message, ""), "unschedulable")
    stmt = (sa.select(k, reason, sa.func.count(sa.distinct(c.c.run_uid)))
            .select_from(c.outerjoin(r, sa.and_(r.c.epoch == c.c.epoch, r.c.lsn == c.c.lsn)))
            .where(c.c.decided_at >= b.since, c.c.decided_at < b.until, c.c.status == "unschedulable")
            .group_by(k, reason))
    out: dict[str, list[int]] = {}
    for bucket, why, n in read.execute(journal, stmt):
        out.setdefault(str(why), [0] * BUCKETS)[min(BUCKETS - 1, int(bucket))] += int(n)
    return out


@dataclass(frozen=True)
class Held:
    """What the placements of a window held, for the utilisation figure: grouped by requests and first/last bucket."""

    groups: list[tuple[str, int, int, int, int, int]]  # (requests, first, last, placements, sum start, sum end)

    @property
    def placements(self) -> int:
        return sum(g[3] for g in self.groups)


def held(journal: backends.Journal, b: Buckets, lanes: Sequence[tuple[str, str]], after: order.Cut,
         upto: order.Cut, placed_before: dict[str, set[str]]) -> Held:
    """The scheduled placements on ``lanes`` that overlap the window, as sums per (requests, first, last bucket).

    Which placements, without a scan: those recorded after the starting checkpoint
    (``after``, a key range per epoch up to ``upto``: LSNs overlap between epochs), and
    those of the Runs the checkpoint shows placed (``placed_before``: namespace -> Run
    names, by the ``(namespace, run)`` index) - each kept if it had not ended before
    ``since``. Starts and ends are clipped
    to the window and counted in microseconds from ``since``.
    """
    p = tables.placements
    if not lanes:
        return Held([])
    dialect = journal.backend
    common = (windows.pods_of(p, lanes), p.c.outcome == "scheduled", p.c.requests.is_not(None),
              p.c.decided_at < b.until, sa.or_(p.c.ended_at.is_(None), p.c.ended_at >= b.since))
    columns = (p.c.requests, p.c.decided_at, p.c.ended_at)
    recent = sa.select(*columns).where(order.between(p.c.epoch, p.c.lsn, after, upto), *common)
    parts: list[sa.Select[Any]] = [recent]
    if placed_before:
        runs = sa.or_(*(sa.and_(p.c.namespace == ns, p.c.run.in_(sorted(names)))
                        for ns, names in sorted(placed_before.items())))
        parts.append(sa.select(*columns).where(runs, order.between(p.c.epoch, p.c.lsn, {}, after), *common))
    w = sa.union_all(*parts).subquery("w")
    # Each time is parsed once (a materialised step: otherwise every use of the clipped values re-parses it).
    parsed = sa.select(w.c.requests, sa.literal_column(_micros("w.decided_at", dialect)).label("s"),
                       sa.literal_column(_micros("w.ended_at", dialect)).label("e")).cte("m").prefix_with(
                           "MATERIALIZED")
    since, span = micros(b.since), b.span_us
    a = sa.literal_column(f"CASE WHEN m.s > {since} THEN m.s - {since} ELSE 0 END")
    z = sa.literal_column(f"CASE WHEN m.e IS NULL OR m.e - {since} >= {span} THEN {span} ELSE m.e - {since} END")
    first = sa.literal_column(f"(CASE WHEN m.s > {since} THEN m.s - {since} ELSE 0 END) / {b.step_us}")
    last = sa.literal_column(f"(CASE WHEN m.e IS NULL OR m.e - {since} >= {span} THEN {span} "
                             f"ELSE m.e - {since} END) / {b.step_us}")
    stmt = (sa.select(parsed.c.requests, first, last, sa.func.count(), sa.func.sum(a), sa.func.sum(z))
            .group_by(parsed.c.requests, first, last))
    return Held([(str(req), int(f), int(z), int(n), int(sa_), int(sz))
                 for req, f, z, n, sa_, sz in read.execute(journal, stmt)])


def amounts(requests: str) -> list[tuple[str, int]]:
    """``[[resource, amount]]`` as stored; anything else in it counts as nothing."""
    try:
        pairs = orjson.loads(requests)
    except orjson.JSONDecodeError:
        return []
    return [(str(p[0]), p[1]) for p in pairs if isinstance(p, list) and len(p) == 2 and type(p[1]) is int] \
        if isinstance(pairs, list) else []
