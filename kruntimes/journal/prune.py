"""Retention: delete whole old epochs, or an epoch's prefix up to a checkpoint, and leave evidence of it.

Replaying a cycle needs the state it read: the newest checkpoint of its epoch at or
before its snapshot LSN plus every record of that epoch after it up to the snapshot.
So pruning "before TIME" (SPEC §5 Retention) finds, among the cycles decided at or
after TIME, the one that read the oldest snapshot (with several workers a cycle is
recorded after it acts, so the first cycle by LSN need not have read the oldest
snapshot), and cuts its epoch at the newest checkpoint recorded before TIME and at or
before that snapshot. With no cycle after TIME the newest epoch's newest checkpoint
recorded before TIME is the cut. The cut epoch's records between its incarnation
record (which says which code and configuration wrote the rest) and that checkpoint
go. Older epochs whose every record is older than TIME go whole (never the newest
epoch, which may still be written). Epochs are never cut in their middle: from the
cut's checkpoint on the epoch is complete and gap-free. Without a suitable checkpoint
or old epoch nothing is deleted.

The evidence is one more ``prune`` record (``prune_record``), written in the same
transaction as the deletion: chained after the previous prune record and keyed like
the journal's records (a keyed journal is not pruned without its key), it names the
cut by (epoch, LSN, hash) - the checkpoint the epoch now resumes at, with its SHA-256
and link, and the link of the last record removed before it, so that ``verify``
checks the checkpoint's link as if nothing had been removed - the epochs removed
whole with their heads and times, the epoch taken as newest, when, by whom and with
which cut-off. ``prune`` is not one of ``records.KINDS``: no scheduler can append such
a record, only this module writes it. ``replay verify`` accepts a missing prefix or
epoch only where a prune record accounts for it, and only a cut this rule can make
(``replay.coverage``). ``prune_to`` cuts at a chosen checkpoint and follows the same
rule for the older epochs, with the checkpoint's time as the cut-off.

Runs in one transaction; the writer may keep appending meanwhile (it only adds records
after every one this deletes, or to the newest epoch, which is never removed whole).
"""

from __future__ import annotations

import dataclasses
import getpass
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import chain, errors, prune_record
from kruntimes.journal.history import derive, indexer, order, views
from kruntimes.journal.store import backends, schema

#: The LSN of the prune records: outside the sequence a scheduler numbers from 1.
PRUNE_LSN = prune_record.PRUNE_LSN


@dataclass(frozen=True)
class PruneReport:
    """What a prune deleted (or, dry, would delete) and which checkpoint it kept."""

    before: datetime
    first_cycle_lsn: int | None  # the cycle after `before` that read the oldest snapshot
    needed_lsn: int | None  # that snapshot's LSN (or the last LSN, with no cycle after `before`)
    checkpoint_lsn: int | None  # the checkpoint `epoch` starts at; below it only its incarnation record
    epoch: str | None = None  # the epoch cut at that checkpoint
    removed_epochs: tuple[str, ...] = ()  # older epochs removed whole
    deleted: dict[str, int] = field(default_factory=dict)  # kind -> records
    deleted_lsns: dict[str, tuple[int, int]] = field(default_factory=dict)  # epoch -> (lowest, highest) LSN deleted
    dry_run: bool = False

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def prune(journal: backends.Journal, before: datetime, *, dry_run: bool = False,
          by: str | None = None, now: datetime | None = None, key: chain.ChainKey | None = None) -> PruneReport:
    """Delete the prefix below the checkpoint that every cycle at or after ``before`` can replay from,
    and every older epoch whose records are all older than ``before``."""
    if before.tzinfo is None or before.utcoffset() is None:
        raise ValueError("prune needs an aware time (UTC or with an offset)")
    r = schema.journal_records
    try:
        with journal.engine.begin() as conn:
            prune_record.check_key(conn, key)  # a dry run too: it shows what a prune with this key would do
            if not dry_run:  # an indexer's chunk in flight ends first: no row of a pruned record after
                indexer.take_turn(conn)
            c = views.cycles
            # The oldest snapshot is the oldest epoch's, then the lowest of its LSNs: (epoch, LSN) is a
            # record's identity, and LSNs overlap between epochs begun while the database was away.
            oldest_first = [s.epoch for s in order.starts(conn)]
            first = conn.execute(
                sa.select(c.c.lsn, c.c.snapshot_lsn, c.c.incarnation).where(c.c.decided_at >= before)
                .order_by(order.rank(c.c.incarnation, oldest_first), c.c.snapshot_lsn, c.c.lsn).limit(1)
            ).first()
            epoch = first.incarnation if first is not None else _newest_epoch(conn)
            needed: int | None = None
            if first is not None:
                needed = int(first.snapshot_lsn)
            elif epoch is not None:
                needed = conn.execute(sa.select(sa.func.max(r.c.lsn)).where(r.c.incarnation == epoch)).scalar()
            checkpoint = None
            if needed is not None:
                checkpoint = conn.execute(
                    sa.select(sa.func.max(r.c.lsn))
                    .where(r.c.incarnation == epoch, r.c.kind == "checkpoint", r.c.lsn <= needed,
                           r.c.recorded_at < before)
                ).scalar()
            report = PruneReport(before=before, first_cycle_lsn=None if first is None else int(first.lsn),
                                 needed_lsn=needed, checkpoint_lsn=checkpoint, epoch=epoch, dry_run=dry_run)
            if epoch is not None:
                report = dataclasses.replace(report, removed_epochs=_old_epochs(conn, before, keep=epoch))
            if checkpoint is None and not report.removed_epochs:
                return report
            return _cut(conn, report, by, now, key)
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot prune the journal ({journal.backend}): {exc.orig}") from exc


def prune_to(journal: backends.Journal, checkpoint_lsn: int, *, epoch: str | None = None, by: str | None = None,
             now: datetime | None = None, key: chain.ChainKey | None = None) -> PruneReport:
    """Delete the prefix of an epoch below its checkpoint at ``checkpoint_lsn``, whatever cycles read before it.

    The cut itself, for a caller that has chosen its checkpoint (SPEC §5: "a prefix up
    to a checkpoint"); the recorded cut-off is the checkpoint's own time. ``epoch`` may
    be left out when only one epoch has a record at that LSN.
    """
    r = schema.journal_records
    try:
        with journal.engine.begin() as conn:
            indexer.take_turn(conn)  # an indexer's chunk in flight ends first: no row of a pruned record after
            stmt = sa.select(r.c.kind, r.c.recorded_at, r.c.incarnation).where(r.c.lsn == checkpoint_lsn)
            if epoch is not None:
                stmt = stmt.where(r.c.incarnation == epoch)
            found = conn.execute(stmt.limit(2)).all()
            if len(found) > 1:
                raise ValueError(f"LSN {checkpoint_lsn} is in several epochs; name the epoch")
            if not found or found[0].kind != "checkpoint":
                raise ValueError(f"LSN {checkpoint_lsn} is not a checkpoint in the journal; a prune cuts at one")
            report = PruneReport(before=found[0].recorded_at, first_cycle_lsn=None, needed_lsn=None,
                                 checkpoint_lsn=checkpoint_lsn, epoch=found[0].incarnation)
            # As any prune: the older epochs wholly before the cut go too (verify holds every prune to that).
            report = dataclasses.replace(report, removed_epochs=_old_epochs(conn, report.before, keep=report.epoch))
            return _cut(conn, report, by, now, key)
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot prune the journal ({journal.backend}): {exc.orig}") from exc


def _newest_epoch(conn: sa.Connection) -> str | None:
    return order.newest(conn)  # by chained data, as verify decides it


def _old_epochs(conn: sa.Connection, before: datetime, *, keep: str) -> tuple[str, ...]:
    """Epochs, other than ``keep`` and the newest, whose every record is older than ``before``."""
    r = schema.journal_records
    newest = _newest_epoch(conn)
    old = conn.execute(
        sa.select(r.c.incarnation).where(r.c.lsn != PRUNE_LSN).group_by(r.c.incarnation)
        .having(sa.func.max(r.c.recorded_at) < before).order_by(r.c.incarnation)
    ).scalars().all()
    return tuple(e for e in old if e not in (keep, newest))


def _cut(conn: sa.Connection, report: PruneReport, by: str | None, now: datetime | None,
         key: chain.ChainKey | None) -> PruneReport:
    """Delete the cut epoch's records between its incarnation record and its checkpoint, and the old epochs
    whole, and record the prune (unless dry)."""
    r = schema.journal_records
    checkpoint, epoch = report.checkpoint_lsn, report.epoch
    doomed = sa.false()
    if checkpoint is not None:
        doomed = sa.and_(r.c.incarnation == epoch, r.c.lsn > PRUNE_LSN, r.c.lsn < checkpoint,
                         r.c.kind != "incarnation")
    if report.removed_epochs:
        doomed = sa.or_(doomed, sa.and_(r.c.incarnation.in_(report.removed_epochs), r.c.lsn != PRUNE_LSN))
    counts = conn.execute(
        sa.select(r.c.kind, r.c.incarnation, sa.func.count(), sa.func.min(r.c.lsn), sa.func.max(r.c.lsn))
        .where(doomed).group_by(r.c.kind, r.c.incarnation).order_by(r.c.kind, r.c.incarnation)
    ).all()
    if not counts:
        return report
    if not report.dry_run:
        prune_record.check_key(conn, key)  # before anything is deleted
        removed = _removed_heads(conn, report.removed_epochs)
        link_before = None
        if checkpoint is not None:
            link_before = conn.execute(
                sa.select(r.c.chain_hash).where(r.c.incarnation == epoch, r.c.lsn < checkpoint)
                .order_by(r.c.lsn.desc()).limit(1)).scalar()
        conn.execute(sa.delete(r).where(doomed))
        if report.removed_epochs:
            e = schema.journal_epochs
            conn.execute(sa.delete(e).where(e.c.epoch.in_(report.removed_epochs)))
        _forget_history(conn, report)
        _record_evidence(conn, report, by, now, sum(int(row[2]) for row in counts), link_before, removed, key)
    deleted: dict[str, int] = {}
    spans: dict[str, tuple[int, int]] = {}  # per epoch: LSNs are an epoch's own
    for kind, epoch_of, n, low, high in counts:
        deleted[kind] = deleted.get(kind, 0) + int(n)
        was = spans.get(epoch_of, (int(low), int(high)))
        spans[epoch_of] = (min(was[0], int(low)), max(was[1], int(high)))
    return dataclasses.replace(report, deleted=deleted, deleted_lsns=dict(sorted(spans.items())))


def _removed_heads(conn: sa.Connection, epochs: tuple[str, ...]) -> list[dict[str, Any]]:
    """What an epoch removed whole was, for the evidence: its first LSN and head, and the times of its first and
    last records (what `verify` checks a real prune's choice against)."""
    if not epochs:
        return []
    e, r = schema.journal_epochs, schema.journal_records
    rows = conn.execute(sa.select(e.c.epoch, e.c.first_lsn, e.c.head_lsn, e.c.head_hash, e.c.end_reason)
                        .where(e.c.epoch.in_(epochs)).order_by(e.c.epoch)).all()
    last = dict(conn.execute(sa.select(r.c.incarnation, sa.func.max(r.c.recorded_at))
                             .where(r.c.incarnation.in_(epochs), r.c.lsn != PRUNE_LSN)
                             .group_by(r.c.incarnation)).all())
    started = {s.epoch: s.started_at for s in order.starts(conn) if s.epoch in epochs}
    return [{"epoch": row.epoch, "first_lsn": int(row.first_lsn), "head_lsn": int(row.head_lsn),
             "head_hash": row.head_hash, "end_reason": row.end_reason,
             "started_at": _iso(started.get(row.epoch)), "last_at": _iso(last.get(row.epoch))} for row in rows]


def _iso(at: datetime | None) -> str | None:
    return None if at is None else chain.timestamp_text(at)


def _forget_history(conn: sa.Connection, report: PruneReport) -> None:
    """Delete the history rows of the deleted records, and the pending episodes that began among them.

    A kept placement's link to a deleted previous cycle (churn) is cleared.
    The counts (``history_pod_hours``, ``history_rejection_hours``, ``history_epochs``)
    keep what was pruned: ``kruntimes journal reindex`` recounts them from what is left.
    """
    def gone(epoch: Any, lsn: Any) -> Any:
        cond = sa.false()
        if report.checkpoint_lsn is not None:
            cond = sa.and_(epoch == report.epoch, lsn > PRUNE_LSN, lsn < report.checkpoint_lsn)
        if report.removed_epochs:
            cond = sa.or_(cond, epoch.in_(report.removed_epochs))
        return cond

    for table in derive.ROW_TABLES:
        conn.execute(sa.delete(table).where(gone(table.c.epoch, table.c.lsn)))
    conn.execute(sa.delete(derive.waits).where(gone(derive.waits.c.epoch, derive.waits.c.first_lsn)))
    # A kept placement whose previous cycle went keeps no link to it, as a reindex of what is left gives.
    p = derive.placements
    conn.execute(sa.update(p).where(p.c.previous_lsn.is_not(None), gone(p.c.epoch, p.c.previous_lsn))
                 .values(previous_lsn=None, previous_result=None, previous_top=None))


def _record_evidence(conn: sa.Connection, report: PruneReport, by: str | None, now: datetime | None,
                     deleted: int, link_before: str | None, removed: list[dict[str, Any]],
                     key: chain.ChainKey | None) -> None:
    """Append the prune record (``prune_record``): the cut by (epoch, LSN, hashes), the epochs removed whole,
    the epoch taken as newest; chained after the previous prune record and keyed like the journal."""
    r = schema.journal_records
    at = (now or _now()).astimezone(timezone.utc)
    payload: dict[str, Any] = {
        "before": chain.timestamp_text(report.before),
        "pruned_at": chain.timestamp_text(at),
        "by": by or _who(),
        "deleted": deleted,
        "removed_epochs": removed,
        "newest": _newest_epoch(conn),
        "epoch": None, "checkpoint_lsn": None, "checkpoint_sha256": None, "checkpoint_link": None,
        "link_before": None, "incarnation_lsns": [],
    }
    if report.checkpoint_lsn is not None:
        kept = conn.execute(sa.select(r.c.payload_sha256, r.c.chain_hash)
                            .where(r.c.incarnation == report.epoch, r.c.lsn == report.checkpoint_lsn)).one()
        incarnations = conn.scalars(sa.select(r.c.lsn).where(r.c.incarnation == report.epoch, r.c.lsn > PRUNE_LSN,
                                                            r.c.lsn < report.checkpoint_lsn)
                                    .order_by(r.c.lsn)).all()
        payload.update(epoch=report.epoch, checkpoint_lsn=report.checkpoint_lsn,
                       checkpoint_sha256=kept.payload_sha256, checkpoint_link=kept.chain_hash,
                       incarnation_lsns=[int(n) for n in incarnations], link_before=link_before)
    prune_record.append(conn, payload, at, key)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _who() -> str:
    """The account and host that ran the prune, for the evidence (never fails: it is not a credential)."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in a container without /etc/passwd entry
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:200]
