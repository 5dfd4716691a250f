"""Retention: delete a prefix of the journal up to a checkpoint, and leave evidence of it.

Replaying a cycle needs the state it read: the newest checkpoint at or before its
snapshot LSN plus every record after that checkpoint up to the snapshot. So pruning
"before TIME" (SPEC §5 Retention) finds, among the cycles decided at or after TIME,
the one that read the oldest snapshot (with several workers a cycle is recorded after
it acts, so the first cycle by LSN need not have read the oldest snapshot), and cuts
at the newest checkpoint recorded before TIME and at or before that snapshot. With no
cycle after TIME the newest checkpoint recorded before TIME is the cut. Every record
below the cut goes, except incarnation records: they say which code and configuration
wrote everything else. So the journal is a clean prefix cut: from the cut's checkpoint
on it is complete and gap-free. Without a suitable checkpoint nothing is deleted.

The evidence is one ``prune`` record at LSN 0, which no scheduler ever assigns (the
first incarnation starts at 1): which checkpoint the journal now starts at (its LSN and
SHA-256), which incarnation records were kept below it, when, by whom and with which
cut-off; earlier prunes are carried along in ``earlier``. A new prune replaces it in
the same transaction as the deletion. ``prune`` is not one of ``records.KINDS``: no
scheduler can append such a record, only this module writes it. ``replay verify`` accepts a missing prefix only
where this record accounts for it (``replay.coverage``).

Runs in one transaction; the writer may keep appending meanwhile (it only adds LSNs
above every one this deletes).
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import backends, derived, errors, records, schema, views

#: The LSN of the prune record: outside the sequence a scheduler numbers from 1.
PRUNE_LSN = 0


@dataclass(frozen=True)
class PruneReport:
    """What a prune deleted (or, dry, would delete) and which checkpoint it kept."""

    before: datetime
    first_cycle_lsn: int | None  # the cycle after `before` that read the oldest snapshot
    needed_lsn: int | None  # that snapshot's LSN (or the last LSN, with no cycle after `before`)
    checkpoint_lsn: int | None  # the checkpoint the journal starts at; below it only incarnations and the evidence
    deleted: dict[str, int] = field(default_factory=dict)  # kind -> records
    deleted_lsns: tuple[int, int] | None = None  # (lowest, highest) LSN deleted
    dry_run: bool = False

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def prune(journal: backends.Journal, before: datetime, *, dry_run: bool = False,
          by: str | None = None, now: datetime | None = None) -> PruneReport:
    """Delete the prefix below the checkpoint that every cycle at or after ``before`` can replay from."""
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
                    sa.select(sa.func.max(r.c.lsn))
                    .where(r.c.kind == "checkpoint", r.c.lsn <= needed, r.c.recorded_at < before)
                ).scalar()
            report = PruneReport(before=before, first_cycle_lsn=None if first is None else int(first.lsn),
                                 needed_lsn=needed, checkpoint_lsn=checkpoint, dry_run=dry_run)
            return report if checkpoint is None else _cut(conn, report, by, now)
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot prune the journal ({journal.backend}): {exc.orig}") from exc


def prune_to(journal: backends.Journal, checkpoint_lsn: int, *, by: str | None = None,
             now: datetime | None = None) -> PruneReport:
    """Delete the prefix below the checkpoint at ``checkpoint_lsn``, whatever cycles read before it.

    The cut itself, for a caller that has chosen its checkpoint (SPEC §5: "a prefix up
    to a checkpoint"); the recorded cut-off is the checkpoint's own time.
    """
    r = schema.journal_records
    try:
        with journal.engine.begin() as conn:
            found = conn.execute(sa.select(r.c.kind, r.c.recorded_at).where(r.c.lsn == checkpoint_lsn)).first()
            if found is None or found.kind != "checkpoint":
                raise ValueError(f"LSN {checkpoint_lsn} is not a checkpoint in the journal; a prune cuts at one")
            report = PruneReport(before=found.recorded_at, first_cycle_lsn=None, needed_lsn=None,
                                 checkpoint_lsn=checkpoint_lsn)
            return _cut(conn, report, by, now)
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot prune the journal ({journal.backend}): {exc.orig}") from exc


def _cut(conn: sa.Connection, report: PruneReport, by: str | None, now: datetime | None) -> PruneReport:
    """Delete every record below the report's checkpoint but incarnations, and record the prune (unless dry)."""
    r = schema.journal_records
    checkpoint = report.checkpoint_lsn
    assert checkpoint is not None
    doomed = sa.and_(r.c.lsn > PRUNE_LSN, r.c.lsn < checkpoint, r.c.kind != "incarnation")
    counts = conn.execute(
        sa.select(r.c.kind, sa.func.count(), sa.func.min(r.c.lsn), sa.func.max(r.c.lsn))
        .where(doomed).group_by(r.c.kind).order_by(r.c.kind)
    ).all()
    if not counts:
        return report
    if not report.dry_run:
        conn.execute(sa.delete(r).where(doomed))
        _forget_history(conn, checkpoint)
        _record_evidence(conn, checkpoint, report.before, by, now, sum(int(row[1]) for row in counts))
    return dataclasses.replace(
        report, deleted={kind: int(n) for kind, n, _low, _high in counts},
        deleted_lsns=(min(int(row[2]) for row in counts), max(int(row[3]) for row in counts)))


def _forget_history(conn: sa.Connection, checkpoint: int) -> None:
    """Delete the history rows of the deleted records, and the pending episodes that began before the cut.

    The counts (``history_pod_hours``, ``history_rejection_hours``, ``history_epochs``)
    keep what was pruned: ``kruntimes journal reindex`` recounts them from what is left.
    """
    for table in derived.ROW_TABLES:
        conn.execute(sa.delete(table).where(table.c.lsn > PRUNE_LSN, table.c.lsn < checkpoint))
    conn.execute(sa.delete(derived.waits).where(derived.waits.c.first_lsn < checkpoint))


def _record_evidence(conn: sa.Connection, checkpoint: int, before: datetime, by: str | None,
                     now: datetime | None, deleted: int) -> None:
    """Replace the prune record at LSN 0 with one that accounts for everything below ``checkpoint``."""
    r = schema.journal_records
    kept = conn.execute(sa.select(r.c.lsn, r.c.incarnation, r.c.payload_sha256)
                        .where(r.c.lsn == checkpoint)).one()
    incarnations = conn.scalars(sa.select(r.c.lsn).where(r.c.lsn > PRUNE_LSN, r.c.lsn < checkpoint)
                                .order_by(r.c.lsn)).all()
    earlier: list[Any] = []
    previous = conn.execute(sa.select(r.c.kind, r.c.payload).where(r.c.lsn == PRUNE_LSN)).first()
    if previous is not None and previous.kind == "prune":
        old = json.loads(previous.payload)
        earlier = [*old.get("earlier", []), {k: v for k, v in old.items() if k != "earlier"}]
    conn.execute(sa.delete(r).where(r.c.lsn == PRUNE_LSN))
    at = (now or _now()).astimezone(timezone.utc)
    payload = {
        "checkpoint_lsn": checkpoint,
        "checkpoint_sha256": kept.payload_sha256,
        "incarnation_lsns": [int(lsn) for lsn in incarnations],
        "before": before.astimezone(timezone.utc).isoformat(),
        "pruned_at": at.isoformat(),
        "by": by or _who(),
        "deleted": deleted,
        "earlier": earlier,
    }
    text = records.canonical_json(payload)
    conn.execute(sa.insert(r).values(lsn=PRUNE_LSN, incarnation=kept.incarnation, recorded_at=at, kind="prune",
                                     schema_version=1, payload=text, payload_sha256=records.content_hash(text)))


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _who() -> str:
    """The account and host that ran the prune, for the evidence (never fails: it is not a credential)."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in a container without /etc/passwd entry
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:200]
