"""Is every epoch whole and unaltered? The chain, the heads and the ends, checked without replaying.

SPEC §5 "Several writers, one truth" and "Integrity": each epoch (one leadership term,
the `incarnation` column) is a gap-free run of LSNs, opened by its incarnation record
and closed by an `end` record, each record linked to the one before it by
`chain.link`, and its head (last LSN and link) stored in `journal_epochs` in the same
transaction as its records. `check` reads every record of every epoch once, in LSN
order, and names, with the epoch and the LSN:

- a missing start (the epoch's first record is not its incarnation record);
- a gap (LSNs missing inside the epoch) that no recorded prune accounts for;
- a payload that does not match its SHA-256, a broken link;
- records after the end record, a missing end (except on the open epoch: the newest
  one, whose writer may still be running - newest by its first record's time, which is
  chained (`history.order`), never by a column anyone could change - and epochs written
  before epochs existed);
- a stored head that is not the last stored record: the tail was deleted, or the
  records (or the heads) were restored from an older copy;
- a head behind one that was published (`--head EPOCH:LSN:HASH`), or a chain that no
  longer passes through it: both tables rolled back together;
- a key mismatch: an HMAC epoch checked without its key, or with another one (then
  its links are not checked, and the report says why, instead of calling every link
  broken), and an unkeyed epoch when a key is given (its links prove nothing against
  someone who can write to the database).

A problem never stops the check: each record's link is computed from the link stored
in the record before it, so one edit is named once, and the rest of the epoch is still
checked. What a chain cannot prove is in docs/replay.md.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import chain, prune
from kruntimes.journal.history import order
from kruntimes.journal.store import backends, schema
from kruntimes.journal import errors as journal_errors
from replay import ends, errors, published_heads

#: Problems listed per epoch; beyond this they are counted (a chain recomputed from an edit breaks once,
#: but a table of garbage would break everywhere).
MAX_PROBLEMS_PER_EPOCH = 20

OPEN, ENDED, BEFORE_EPOCHS = ends.OPEN, ends.ENDED, ends.BEFORE_EPOCHS


#: A head someone saw published (kept here for callers that name it `integrity.PublishedHead`).
PublishedHead = published_heads.PublishedHead


@dataclass(frozen=True)
class Start:
    """Where a recorded prune says an epoch's records resume after its incarnation record."""

    checkpoint_lsn: int
    link_before: str | None  # the link of the last record pruned before it; None: the record before it that is kept


@dataclass
class EpochReport:
    """One epoch: what was checked, and every problem found in it."""

    epoch: str
    first_lsn: int
    head_lsn: int | None = None
    algorithm: str | None = None
    started_at: datetime | None = None
    state: str = OPEN  # ended, open, before-epochs
    end_reason: str | None = None
    records: int = 0  # records read and their payload hashes checked
    links: int = 0  # links checked (0 when the key does not match)
    pruned_until: int | None = None  # a prune removed the records before this checkpoint
    handed_lsn: int | None = None  # ended by a crash: the last LSN handed to its writer (its end record says)
    lost_in_crash: tuple[int, int] | None = None  # the LSNs handed over, never acknowledged, lost in that crash
    cycles: int = 0  # cycles of this epoch replayed
    identical: int = 0
    diverged: int = 0
    problems: list[errors.JournalDamage] = field(default_factory=list)
    more_problems: int = 0  # found beyond MAX_PROBLEMS_PER_EPOCH

    def add(self, problem: errors.JournalDamage) -> None:
        """Record a problem, once: a replay walk that stops at a gap the check found already adds nothing."""
        if any(type(p) is type(problem) and p.lsn == problem.lsn for p in self.problems):
            return
        if len(self.problems) >= MAX_PROBLEMS_PER_EPOCH:
            self.more_problems += 1
            return
        self.problems.append(problem.located(self.epoch))

    @property
    def ok(self) -> bool:
        return not self.problems and not self.more_problems and not self.diverged

    def as_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "first_lsn": self.first_lsn, "head_lsn": self.head_lsn,
                "algorithm": self.algorithm, "state": self.state, "end_reason": self.end_reason,
                "started_at": None if self.started_at is None else self.started_at.isoformat(),
                "records_checked": self.records, "links_checked": self.links, "pruned_until": self.pruned_until,
                "handed_lsn": self.handed_lsn,
                "lost_in_crash": None if self.lost_in_crash is None else list(self.lost_in_crash),
                "cycles": self.cycles, "identical": self.identical, "diverged": self.diverged,
                "problems": [{"lsn": p.lsn, "problem": p.what, "detail": p.detail} for p in self.problems],
                "more_problems": self.more_problems}


class _Row:
    """A journal_epochs row, or what is known of an epoch that has records but no row."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    epoch: str
    first_lsn: int | None
    head_lsn: int | None
    head_hash: str | None
    algorithm: str | None
    key_id: str | None
    started_at: datetime | None
    end_lsn: int | None
    end_reason: str | None


def _unavailable(journal: backends.Journal, exc: sa_exc.DBAPIError) -> journal_errors.JournalUnavailable:
    return journal_errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}")


def _epoch_rows(journal: backends.Journal, removed: Iterable[str] = ()) -> tuple[list[_Row], str | None]:
    """Every epoch with a head row, every epoch that has records but no row, and every incarnation the
    journal_incarnations projection remembers that is neither (unless a prune removed it), oldest first; and
    the newest epoch.

    Order and "newest" come from each epoch's first record (`history.order`: its time is
    chained), never from the `started_at` columns, which anyone with write access can
    change; an epoch with no record left sorts by its row's time and is never the newest.
    """
    e, i = schema.journal_epochs, schema.journal_incarnations
    try:
        with journal.engine.connect() as conn:
            rows = {row.epoch: _Row(**row._asdict()) for row in conn.execute(sa.select(e))}
            chained = order.starts(conn)
            remembered = conn.execute(sa.select(i.c.incarnation, i.c.first_lsn, i.c.started_at)).all()
    except sa_exc.DBAPIError as exc:
        raise _unavailable(journal, exc) from exc
    for epoch, first, at in [*((s.epoch, s.first_lsn, s.started_at) for s in chained), *remembered]:
        if epoch not in rows and epoch not in removed:
            rows[epoch] = _Row(epoch=epoch, first_lsn=None, head_lsn=None, head_hash=None, algorithm=None,
                               key_id=None, started_at=at, end_lsn=None, end_reason=None, stray_first=int(first))
    for start in chained:
        if start.epoch in rows:
            rows[start.epoch].started_at = start.started_at
    oldest_first = sorted(rows.values(), key=lambda row: (row.started_at is None, row.started_at,
                                                          row.first_lsn or 0, row.epoch))
    return oldest_first, (chained[-1].epoch if chained else None)


def epochs(journal: backends.Journal) -> list[str]:
    """The IDs of every epoch, oldest first."""
    return [row.epoch for row in _epoch_rows(journal)[0]]


def resolve(ids: Iterable[str], given: str, what: str = "epoch", hint: str = "") -> str:
    """An epoch ID from the full ID or a unique prefix; CycleNotFound listing the choices."""
    ids = list(ids)
    if given in ids:
        return given
    matches = [i for i in ids if i.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise errors.CycleNotFound(f"no {what} {given!r} in the journal{hint}")
    raise errors.CycleNotFound(f"{what} prefix {given!r} is ambiguous: {', '.join(matches[:5])}")


def check(journal: backends.Journal, key: chain.ChainKey | None = None, *,
          published: Iterable[PublishedHead] = (), starts: dict[str, Start] | None = None,
          removed: Iterable[tuple[str, int, str]] = (), only: Iterable[str] | None = None) -> list[EpochReport]:
    """Check every epoch (or those in `only`); a report per epoch, oldest first, problems in it.

    `starts` and `removed` are what the recorded prunes account for (`coverage`): where a
    cut epoch resumes, and the epochs removed whole with the heads they had then (a head
    published for one of those is checked against that head).
    """
    removed_heads = {epoch: (lsn, link) for epoch, lsn, link in removed}
    rows, newest = _epoch_rows(journal, removed_heads)
    wanted = None if only is None else set(only)
    by_epoch: dict[str, list[PublishedHead]] = {}
    ids = [row.epoch for row in rows]
    reports = []
    unmatched: list[PublishedHead] = []
    for head in published:
        try:
            by_epoch.setdefault(resolve(ids, head.epoch), []).append(head)
        except errors.CycleNotFound:
            unmatched.append(head)
    for row in rows:
        if wanted is not None and row.epoch not in wanted:
            continue
        report = _check_epoch(journal, row, key, newest=row.epoch == newest,
                              start=(starts or {}).get(row.epoch), published=by_epoch.get(row.epoch, []))
        reports.append(report)
    for head in unmatched:
        pruned = [epoch for epoch in removed_heads if epoch.startswith(head.epoch)]
        if len(pruned) == 1:
            problem = published_heads.removed_behind(head, pruned[0], *removed_heads[pruned[0]])
            if problem is None:
                continue
            missing = EpochReport(epoch=pruned[0], first_lsn=0, state="pruned")
        else:
            missing = EpochReport(epoch=head.epoch, first_lsn=0, state="missing")
            problem = errors.HeadBehindPublished(
                head.lsn, f"a head was published for epoch {head.epoch} at LSN {head.lsn}, but the journal has no "
                          "such epoch (removed whole, with its head row?)")
        missing.add(problem)
        reports.append(missing)
    return reports


def _check_epoch(journal: backends.Journal, row: _Row, key: chain.ChainKey | None, *, newest: bool,
                 start: Start | None, published: list[PublishedHead]) -> EpochReport:
    """Walk one epoch's records in LSN order: each where it should stand, intact, linked to the one before."""
    report = _epoch_report(row, start)
    first = report.first_lsn
    linking = _key_for(report, row, key)
    last: tuple[int, str] | None = None
    ended_at: int | None = None
    prev: str | None = chain.GENESIS
    expected = first
    with contextlib.closing(_records(journal, row.epoch)) as found:
        for lsn, at, kind, version, text, sha, link in found:
            report.records += 1
            if lsn == first and kind == "end" and (lost := ends.lost_whole(text, lsn)) is not None:
                report.lost_in_crash = lost  # none of the epoch's records was stored: its crash's end names them
                report.first_lsn = lost[0]
            elif lsn == first and kind != "incarnation":
                report.add(errors.MissingStart(lsn, f"the epoch's first record is a {kind} record, not its "
                                                    "incarnation record"))
            elif lsn > expected:
                if start is not None and expected == first + 1 and lsn == start.checkpoint_lsn:
                    # The prefix a recorded prune removed: the link resumes from the last removed record's.
                    # (A prune from before epochs recorded none: the upgrade chained across the cut.)
                    prev = start.link_before if start.link_before is not None else prev
                elif expected == first:
                    report.add(errors.MissingStart(first, f"the epoch's first records, {_span(first, lsn - 1)}, "
                                                          "are not in the journal (its incarnation record among them)"))
                    prev = None
                elif kind == "end" and ends.handed(text) == lsn - 1:
                    report.lost_in_crash = (expected, lsn - 1)  # named by the crash's end, which links on
                else:
                    report.add(errors.RecordGap(expected, lsn - 1, _gap(expected, lsn - 1)))
                    prev = None
            elif lsn < expected:  # below the first LSN the head row gives
                report.add(errors.InconsistentHistory(lsn, f"a {kind} record below the epoch's first LSN {first}"))
            if ended_at is not None:
                report.add(errors.InconsistentHistory(lsn, f"a {kind} record after the epoch's end record at LSN "
                                                           f"{ended_at}"))
            if kind == "end":
                ended_at = ended_at or lsn
                report.handed_lsn = ends.handed(text)
            if hashlib.sha256(text.encode("utf-8")).hexdigest() != sha:
                report.add(errors.CorruptRecord(lsn, f"the {kind} record's payload does not match its SHA-256 "
                                                     "(edited or damaged after it was written)"))
            if linking is not None and prev is not None:
                report.links += 1
                if not chain.same(chain.link(prev, row.epoch, lsn, at, kind, version, sha, linking.key), link):
                    report.add(errors.BrokenLink(lsn, f"the {kind} record's link does not follow from the record "
                                                      f"before it{_what_breaks(linking)}"))
            prev = link
            expected = lsn + 1
            last = (lsn, link)
    _check_ending(journal, report, row, last, ended_at, newest=newest, published=published)
    return report


def _epoch_report(row: _Row, start: Start | None) -> EpochReport:
    """The epoch's report before its records are read: where it starts, and whether it has a head at all."""
    first = row.first_lsn if row.first_lsn is not None else getattr(row, "stray_first", 0)
    report = EpochReport(epoch=row.epoch, first_lsn=first, head_lsn=row.head_lsn, algorithm=row.algorithm,
                         started_at=row.started_at, end_reason=row.end_reason)
    if row.head_lsn is None:
        report.add(errors.HeadMismatch(first, "the epoch has no head in journal_epochs (the row was deleted, or "
                                              "the records were written around the writer)"))
    if start is not None:
        report.pruned_until = start.checkpoint_lsn
    return report


def _check_ending(journal: backends.Journal, report: EpochReport, row: _Row, last: tuple[int, str] | None,
                  ended_at: int | None, *, newest: bool, published: list[PublishedHead]) -> None:
    """After the walk: the epoch had records, ended as its row says, and its head is the last record's (and any
    published head agrees)."""
    if last is None:
        report.add(errors.MissingStart(report.first_lsn, "not one record of the epoch is in the journal (deleted "
                                                         "whole, and no prune accounts for it)"))
    ends.check(report, row, ended_at, newest)
    _check_head(report, row, last)
    for head in published:
        problem = published_heads.check_stored(journal, row.epoch, row.head_lsn, head)
        if problem is not None:
            report.add(problem)


@dataclass(frozen=True)
class _Linking:
    key: chain.ChainKey | None


def _key_for(report: EpochReport, row: _Row, key: chain.ChainKey | None) -> _Linking | None:
    """How to compute this epoch's links, or None (a key problem, reported) when they cannot be checked."""
    if row.algorithm is None:
        return _Linking(key)  # no head row: try the key verify was given
    if row.algorithm == chain.PLAIN:
        if key is not None:
            report.add(errors.KeyMismatch(report.first_lsn, "the epoch's links are plain SHA-256 but a key was given "
                                                            "(its links prove nothing against write access to the "
                                                            "database; rehashed without the key?)"))
        return _Linking(None)
    if row.algorithm == chain.KEYED:
        if key is None:
            report.add(errors.KeyMismatch(report.first_lsn, f"the epoch is keyed (HMAC, key_id {row.key_id}) and "
                                                            "no key was given (--journal-key-file): its links are "
                                                            "not checked"))
            return None
        if key.key_id != row.key_id:
            report.add(errors.KeyMismatch(report.first_lsn, f"the epoch is keyed with key_id {row.key_id}, the key "
                                                            f"given is key_id {key.key_id}: its links are not "
                                                            "checked"))
            return None
        return _Linking(key)
    report.add(errors.KeyMismatch(report.first_lsn, f"unknown chain algorithm {row.algorithm!r}"))
    return None


def _what_breaks(linking: _Linking) -> str:
    if linking.key is None:
        return " (edited, inserted, re-ordered, or a record before it deleted)"
    return " (edited, re-ordered, or rehashed without the key)"


def _check_head(report: EpochReport, row: _Row, last: tuple[int, str] | None) -> None:
    if row.head_lsn is None or last is None:
        return
    lsn, link = last
    if lsn < row.head_lsn:
        report.add(errors.RecordGap(lsn + 1, row.head_lsn,
                                    f"the epoch's head is LSN {row.head_lsn}, its last record LSN {lsn}: "
                                    f"{_span(lsn + 1, row.head_lsn)} missing at the tail (truncated, or the "
                                    "records restored from an older copy)"))
    elif lsn > row.head_lsn:
        report.add(errors.HeadMismatch(row.head_lsn + 1, f"records up to LSN {lsn} after the epoch's stored head "
                                                         f"LSN {row.head_lsn} (the heads restored from an older "
                                                         "copy, or records added around the writer)"))
    elif not chain.same(link, row.head_hash or ""):
        report.add(errors.HeadMismatch(lsn, "the last record's link is not the stored head's (the records or the "
                                            "head restored from another copy, or the chain recomputed)"))


def _records(journal: backends.Journal, epoch: str) -> Iterator[tuple[int, datetime, str, int, str, str, str]]:
    t = schema.journal_records
    stmt = (sa.select(t.c.lsn, t.c.recorded_at, t.c.kind, t.c.schema_version, t.c.payload, t.c.payload_sha256,
                      t.c.chain_hash)
            .where(t.c.incarnation == epoch, t.c.lsn != prune.PRUNE_LSN).order_by(t.c.lsn))
    try:
        with journal.engine.connect() as conn:
            for row in conn.execution_options(yield_per=2000).execute(stmt):
                yield tuple(row)  # type: ignore[misc]
    except sa_exc.DBAPIError as exc:
        raise _unavailable(journal, exc) from exc


def _span(first: int, last: int) -> str:
    return f"LSN {first}" if first == last else f"LSNs {first}..{last} ({last - first + 1} records)"


def _gap(first: int, last: int) -> str:
    return f"{_span(first, last)} not in the journal (deleted, or never written?)"
