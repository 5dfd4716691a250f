"""Retention: delete old journal records without breaking the replay of any later cycle.

Replaying a cycle needs the state it read: the newest checkpoint at or before its
snapshot LSN plus every record after that checkpoint up to the snapshot. So pruning
"before TIME" finds, among the cycles decided at or after TIME, the one that read the
oldest snapshot (with several workers a cycle is recorded after it acts, so the first
cycle by LSN need not have read the oldest snapshot), keeps the newest checkpoint at
or before that snapshot and deletes only records older than TIME *and* below that
checkpoint's LSN. The records from the kept checkpoint onward stay gap-free. With no
cycle after TIME the newest checkpoint is kept, for the cycles still to come.
Incarnation records are never deleted: they say which code and configuration wrote
everything else. Without a suitable checkpoint nothing is deleted.

Runs in one transaction; the writer may keep appending meanwhile (it only adds LSNs
above every one this deletes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import backends, errors, schema, views


@dataclass(frozen=True)
class PruneReport:
    """What a prune deleted (or, dry, would delete) and which checkpoint it kept."""

    before: datetime
    first_cycle_lsn: int | None  # the cycle after `before` that read the oldest snapshot
    needed_lsn: int | None  # that snapshot's LSN (or the last LSN, with no cycle after `before`)
    checkpoint_lsn: int | None  # the checkpoint kept for it; nothing older than it survives but incarnations
    deleted: dict[str, int] = field(default_factory=dict)  # kind -> records
    deleted_lsns: tuple[int, int] | None = None  # (lowest, highest) LSN deleted
    dry_run: bool = False

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def prune(journal: backends.Journal, before: datetime, *, dry_run: bool = False) -> PruneReport:
    """Delete records older than ``before`` that no cycle at or after ``before`` needs to replay."""
    if before.tzinfo is None or before.utcoffset() is None:
        raise ValueError("prune needs an aware time (UTC or with an offset)")
    r = schema.journal_records
    try:
        with journal.engine.begin() as conn:
            c = views.cycles
            first = conn.execute(
                sa.select(c.c.lsn, c.c.snapshot_lsn).where(c.c.decided_at >= before)
                .order_by(c.c.snapshot_lsn, c.c.lsn).limit(1)
            ).first()
            if first is not None:
                needed: int | None = int(first.snapshot_lsn)
            else:
                needed = conn.execute(sa.select(sa.func.max(r.c.lsn))).scalar()
            checkpoint = None
            if needed is not None:
                checkpoint = conn.execute(
                    sa.select(sa.func.max(r.c.lsn)).where(r.c.kind == "checkpoint", r.c.lsn <= needed)
                ).scalar()
            report = PruneReport(before=before, first_cycle_lsn=None if first is None else int(first.lsn),
                                 needed_lsn=needed, checkpoint_lsn=checkpoint, dry_run=dry_run)
            if checkpoint is None:
                return report
            doomed = sa.and_(r.c.lsn < checkpoint, r.c.recorded_at < before, r.c.kind != "incarnation")
            counts = conn.execute(
                sa.select(r.c.kind, sa.func.count(), sa.func.min(r.c.lsn), sa.func.max(r.c.lsn))
                .where(doomed).group_by(r.c.kind).order_by(r.c.kind)
            ).all()
            if not counts:
                return report
            if not dry_run:
                conn.execute(sa.delete(r).where(doomed))
            return PruneReport(
                before=before, first_cycle_lsn=report.first_cycle_lsn, needed_lsn=needed,
                checkpoint_lsn=checkpoint, dry_run=dry_run,
                deleted={kind: int(n) for kind, n, _low, _high in counts},
                deleted_lsns=(min(int(row[2]) for row in counts), max(int(row[3]) for row in counts)),
            )
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot prune the journal ({journal.backend}): {exc.orig}") from exc
