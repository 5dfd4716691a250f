"""What the recorded prunes removed, the proof that they removed nothing else, and that a real prune made them.

SPEC §5 Retention (amended 2026-12-04): pruning removes whole epochs or an epoch's
prefix up to a checkpoint; a prune is itself a chained (with a key, keyed) record
naming each cut by (epoch, LSN, hash), and `verify` accepts only cuts a real prune
can make. The prune records (`kruntimes.journal.prune_record`, LSN 0, numbered 1..n)
are proven here:

- each is unedited (its SHA-256 matches), numbered without a gap, stored as its
  number says, and linked after the one before (with the key when it is keyed: the
  same key rules as an epoch's, `integrity`);
- every prune's cut is honoured: per epoch, the latest cut (its highest checkpoint)
  is where the epoch resumes; the checkpoint is there, unchanged (SHA-256 and link),
  recorded before the prune's cut-off, and below it the epoch holds only the
  incarnation records the prune listed;
- each prune is one `journal prune` could have made: it never cut an epoch while an
  older epoch whose every record is older than its cut-off stayed whole, and never
  removed whole the epoch it cut, the epoch it took as newest, or an epoch with a
  record at or after its cut-off.

It returns where each cut epoch resumes (`integrity.Start`: the checkpoint and the
link of the last record removed before it), so the integrity check accepts exactly
those gaps and checks each checkpoint's link across its gap, and the heads of the
epochs removed whole, which published heads (`--head`) are still checked against.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import chain, prune_record
from kruntimes.journal.history import order
from kruntimes.journal.store import backends, schema
from kruntimes.journal import errors as journal_errors
from replay import errors, integrity, source
from replay.engine import CycleRef


@dataclass(frozen=True)
class Cut:
    """Where a prune says an epoch now resumes."""

    epoch: str
    checkpoint_lsn: int
    checkpoint_sha256: str
    checkpoint_link: str | None
    link_before: str | None
    incarnation_lsns: tuple[int, ...]
    before: datetime  # the cut-off of the prune that made it
    number: int  # that prune's number


@dataclass(frozen=True)
class Pruned:
    """What the journal's prune records say; the summary fields are the newest prune's."""

    checkpoint_lsn: int | None  # the newest prune's cut (None when it removed whole epochs only)
    before: str  # the cut-off the newest prune was given
    pruned_at: str
    by: str
    deleted: int  # records deleted by every prune
    earlier: int  # prunes before the newest
    epoch: str | None = None  # the epoch the newest prune cut
    link_before: str | None = None
    removed_epochs: tuple[str, ...] = field(default=())  # by every prune
    cuts: tuple[Cut, ...] = field(default=())  # per cut epoch, the cut in force
    removed_heads: tuple[tuple[str, int, str], ...] = field(default=())  # (epoch, head LSN, head hash)

    @property
    def starts(self) -> dict[str, integrity.Start]:
        return {c.epoch: integrity.Start(c.checkpoint_lsn, c.link_before) for c in self.cuts}


@dataclass(frozen=True)
class _Prune:
    """One prune record, read."""

    number: int
    incarnation: str
    recorded_at: datetime
    text: str
    sha256: str
    link: str
    payload: dict[str, Any]

    def damage(self, kind: type[errors.JournalDamage], message: str) -> errors.JournalDamage:
        return kind(prune_record.PRUNE_LSN, f"prune record {self.number}: {message}").located(self.incarnation)


def replayable(pruned: Pruned | None, cycles: list[CycleRef]) -> tuple[list[CycleRef], list[CycleRef]]:
    """`cycles` split into those that can be replayed and those whose snapshot a prune removed."""
    starts = {} if pruned is None else pruned.starts
    kept, gone = [], []
    for ref in cycles:
        start = starts.get(ref.incarnation)
        (gone if start is not None and ref.snapshot_lsn < start.checkpoint_lsn else kept).append(ref)
    return kept, gone


def check(journal: backends.Journal, key: chain.ChainKey | None = None,
          problems: list[errors.JournalDamage] | None = None) -> Pruned | None:
    """Read and prove the journal's prune records; None if the journal was never pruned.

    Damage that leaves the records unusable is raised; the rest (a link that does not
    follow, a key mismatch, a prune no real prune could make) goes to `problems` and
    the cuts are still used, so the rest of the journal is checked as pruned.
    """
    found = _read(journal)
    if not found:
        return None
    notes = problems if problems is not None else []
    _check_chain(found, key, notes)
    cuts: dict[str, Cut] = {}
    removed: dict[str, tuple[int, str]] = {}
    for p in found:
        cut = _cut_of(p)
        if cut is not None and (cut.epoch not in cuts or cut.checkpoint_lsn > cuts[cut.epoch].checkpoint_lsn):
            cuts[cut.epoch] = cut
        for gone in p.payload["removed_epochs"]:
            removed[str(gone["epoch"])] = (int(gone["head_lsn"]), str(gone["head_hash"]))
    for epoch in removed:
        cuts.pop(epoch, None)  # cut first, removed whole later: nothing of it is left to resume
    for cut in cuts.values():
        _check_below(journal, cut)
    _check_shape(journal, found, cuts, notes)
    newest = found[-1]
    p = newest.payload
    return Pruned(checkpoint_lsn=p["checkpoint_lsn"], before=p["before"], pruned_at=p["pruned_at"], by=p["by"],
                  deleted=sum(int(f.payload["deleted"]) for f in found), earlier=len(found) - 1, epoch=p["epoch"],
                  link_before=p["link_before"], removed_epochs=tuple(removed), cuts=tuple(cuts.values()),
                  removed_heads=tuple((e, lsn, h) for e, (lsn, h) in removed.items()))


_FIELDS = {"number": int, "previous": str, "algorithm": str, "before": str, "pruned_at": str, "by": str,
           "deleted": int, "removed_epochs": list, "incarnation_lsns": list}


def _read(journal: backends.Journal) -> list[_Prune]:
    """Every record at LSN 0, as prune records in their numbered order; damage if one cannot be one."""
    r = schema.journal_records
    stmt = (sa.select(r.c.incarnation, r.c.kind, r.c.recorded_at, r.c.payload, r.c.payload_sha256, r.c.chain_hash)
            .where(r.c.lsn == prune_record.PRUNE_LSN).order_by(r.c.incarnation))
    try:
        with journal.engine.connect() as conn:
            rows = conn.execute(stmt).all()
    except sa_exc.DBAPIError as exc:
        raise journal_errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}") from exc
    found = []
    for incarnation, kind, at, text, sha, link in rows:
        where = f"the record at LSN {prune_record.PRUNE_LSN} of {incarnation}"
        if kind != prune_record.KIND:
            raise errors.InconsistentHistory(prune_record.PRUNE_LSN, f"{where} is a {kind} record; LSN "
                                                                     f"{prune_record.PRUNE_LSN} is for prune records "
                                                                     "only", epoch=incarnation)
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != sha:
            raise errors.CorruptRecord(prune_record.PRUNE_LSN, "the prune record's payload does not match its "
                                                               "SHA-256 (edited after it was written)",
                                       epoch=incarnation)
        if not prune_record.is_chained(incarnation):
            raise errors.InconsistentHistory(
                prune_record.PRUNE_LSN, "a prune record in the form from before revision 0008_chained_prunes (not "
                                        "chained, not keyed): `kruntimes db upgrade` rewrites such a record, so "
                                        "after the upgrade it was put there by hand", epoch=incarnation)
        try:
            payload = json.loads(text)
            for name, kind_of in _FIELDS.items():
                if not isinstance(payload[name], kind_of):
                    raise TypeError(f"{name} is not a {kind_of.__name__}")
        except (ValueError, TypeError, KeyError) as exc:
            raise errors.CorruptRecord(prune_record.PRUNE_LSN, f"the prune record cannot be read: {exc!r}",
                                       epoch=incarnation) from exc
        found.append(_Prune(payload["number"], incarnation, at, text, sha, link or "", payload))
    return sorted(found, key=lambda p: p.number)


def _check_chain(found: list[_Prune], key: chain.ChainKey | None, notes: list[errors.JournalDamage]) -> None:
    """Numbered 1..n, each stored under its number, each link following from the one before (keyed rules as
    an epoch's)."""
    previous = chain.GENESIS
    for expected, p in enumerate(found, 1):
        if p.number != expected:
            notes.append(p.damage(errors.RecordGap, f"prune record {expected} is not in the journal (deleted?)"))
        elif p.incarnation != prune_record.incarnation_of(p.number):
            notes.append(p.damage(errors.InconsistentHistory, f"stored as {p.incarnation}, not as its number says"))
        checkable, k = _key_for(p, key, notes)
        if checkable:
            if not chain.same(prune_record.link(previous, p.number, p.recorded_at, p.sha256, k), p.link):
                notes.append(p.damage(errors.BrokenLink, "its link does not follow from the prune record before it "
                                                         "(edited, made by hand, or rehashed without the key)"))
        previous = p.link


def _key_for(p: _Prune, key: chain.ChainKey | None,
             notes: list[errors.JournalDamage]) -> tuple[bool, chain.ChainKey | None]:
    """Whether the record's link can be checked, and with which key (a key problem is noted)."""
    algorithm, key_id = p.payload["algorithm"], p.payload.get("key_id")
    if algorithm == chain.PLAIN:
        if key is not None:
            notes.append(p.damage(errors.KeyMismatch, "its link is plain SHA-256 but a key was given (anyone with "
                                                      "write access can write such a record)"))
        return True, None
    if algorithm == chain.KEYED:
        if key is None:
            notes.append(p.damage(errors.KeyMismatch, f"it is keyed (HMAC, key_id {key_id}) and no key was given "
                                                      "(--journal-key-file): its link is not checked"))
            return False, None
        if key.key_id != key_id:
            notes.append(p.damage(errors.KeyMismatch, f"it is keyed with key_id {key_id}, the key given is key_id "
                                                      f"{key.key_id}: its link is not checked"))
            return False, None
        return True, key
    notes.append(p.damage(errors.KeyMismatch, f"unknown chain algorithm {algorithm!r}"))
    return False, None


def _cut_of(p: _Prune) -> Cut | None:
    payload = p.payload
    if payload.get("checkpoint_lsn") is None:
        return None
    try:
        lsn, epoch = payload["checkpoint_lsn"], payload["epoch"]
        if type(lsn) is not int or lsn < 1 or not isinstance(epoch, str):
            raise TypeError(f"checkpoint_lsn {lsn!r} of epoch {epoch!r} is not a cut")
        return Cut(epoch=epoch, checkpoint_lsn=lsn, checkpoint_sha256=str(payload["checkpoint_sha256"]),
                   checkpoint_link=payload.get("checkpoint_link"), link_before=payload.get("link_before"),
                   incarnation_lsns=tuple(int(n) for n in payload["incarnation_lsns"]),
                   before=datetime.fromisoformat(payload["before"]), number=p.number)
    except (TypeError, ValueError, KeyError) as exc:
        raise p.damage(errors.CorruptRecord, f"its cut cannot be read: {exc!r}") from exc


def _check_below(journal: backends.Journal, cut: Cut) -> None:
    """The named checkpoint is there, unchanged and recorded before the cut-off; below it the epoch holds only
    the listed incarnation records."""
    n, epoch = cut.checkpoint_lsn, cut.epoch
    checkpoint = source.record_at(journal, n, epoch)
    if checkpoint is None:
        raise source.gap(n, n).located(epoch)
    if checkpoint.kind != "checkpoint":
        raise errors.InconsistentHistory(n, f"prune record {cut.number} says epoch {epoch} resumes at a checkpoint "
                                            f"at LSN {n}, but that is a {checkpoint.kind} record", epoch=epoch)
    if hashlib.sha256(checkpoint.text.encode("utf-8")).hexdigest() != cut.checkpoint_sha256:
        raise errors.InconsistentHistory(n, "the checkpoint is not the one the prune record kept "
                                            "(its SHA-256 differs from the one the prune recorded)", epoch=epoch)
    at, link = _time_and_link(journal, epoch, n)
    if cut.checkpoint_link is not None and not chain.same(link, cut.checkpoint_link):
        raise errors.InconsistentHistory(n, f"the checkpoint's link is not the one prune record {cut.number} cut "
                                            "at", epoch=epoch)
    if at > cut.before:
        raise errors.InconsistentHistory(n, f"prune record {cut.number} cut at a checkpoint recorded at {at}, after "
                                            f"its cut-off {cut.before}: a real prune cuts at a checkpoint recorded "
                                            "before it", epoch=epoch)
    listed = set(cut.incarnation_lsns)
    with contextlib.closing(source.lsns(journal, prune_record.PRUNE_LSN + 1, n - 1, epoch)) as below:
        for lsn, kind in below:
            if lsn not in listed or kind != "incarnation":
                raise errors.InconsistentHistory(
                    lsn, f"a {kind} record below the checkpoint at LSN {n}, where prune {cut.number} left only "
                         "incarnation records (pruned records put back, or the prune record changed?)", epoch=epoch)
            listed.discard(lsn)
    if listed:
        first = min(listed)
        raise errors.RecordGap(first, first, f"the incarnation record at LSN {first}, which prune {cut.number} "
                                             "kept, is not in the journal").located(epoch)


def _time_and_link(journal: backends.Journal, epoch: str, lsn: int) -> tuple[datetime, str]:
    r = schema.journal_records
    try:
        with journal.engine.connect() as conn:
            at, link = conn.execute(sa.select(r.c.recorded_at, r.c.chain_hash)
                                    .where(r.c.incarnation == epoch, r.c.lsn == lsn)).one()
    except sa_exc.DBAPIError as exc:
        raise journal_errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}") from exc
    return at, link


def _check_shape(journal: backends.Journal, found: list[_Prune], cuts: dict[str, Cut],
                 notes: list[errors.JournalDamage]) -> None:
    """Each prune is one `journal prune` could have made (its rule: `kruntimes.journal.prune`).

    The rule, as far as what is left can show it: a prune cuts the epoch of a cycle
    decided at or after its cut-off, or else the newest epoch; it took as newest the
    epoch that began last before it ran; and every other epoch older than the one it
    cut (or, cutting none, than the newest) whose every record is older than the
    cut-off it removed whole - never the epoch it cut, the newest, or one with a
    record at or after the cut-off.
    """
    r = schema.journal_records
    try:
        with journal.engine.connect() as conn:
            epoch_starts = order.starts(conn)
            last = dict(conn.execute(sa.select(r.c.incarnation, sa.func.max(r.c.recorded_at))
                                     .where(r.c.lsn != prune_record.PRUNE_LSN).group_by(r.c.incarnation)).all())
            decided = {cut.epoch: conn.execute(
                sa.select(sa.func.count()).where(r.c.incarnation == cut.epoch, r.c.kind == "cycle",
                                                 r.c.recorded_at >= cut.before)).scalar() for cut in cuts.values()}
    except sa_exc.DBAPIError as exc:
        raise journal_errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}") from exc
    epochs = [s.epoch for s in epoch_starts]
    for p in found:
        before, newest = datetime.fromisoformat(p.payload["before"]), p.payload.get("newest")
        cut = p.payload.get("epoch") if p.payload.get("checkpoint_lsn") is not None else None
        began = [s.epoch for s in epoch_starts if s.started_at <= datetime.fromisoformat(p.payload["pruned_at"])]
        if newest in epochs and began and began[-1] != newest:
            notes.append(p.damage(errors.InconsistentHistory, (
                f"it took epoch {newest} as the newest, but epoch {began[-1]} began after it and before the prune: "
                "a real prune takes the newest (a prune record not written by `journal prune`?)")))
        if newest is None and "rewritten_by" not in p.payload:
            notes.append(p.damage(errors.InconsistentHistory, "it names no newest epoch, which every prune does"))
        effective = cuts.get(cut) if cut is not None else None
        if effective is not None and effective.number == p.number and newest is not None and cut != newest \
                and not decided[cut]:
            notes.append(p.damage(errors.InconsistentHistory, (
                f"it cut epoch {cut}, which was not the newest and has no cycle decided at or after its cut-off "
                f"{before.isoformat()}: a real prune cuts the epoch such a cycle needs, or else the newest")))
        reference = cut if cut in epochs else newest if newest in epochs else None
        for older in epochs[:epochs.index(reference)] if reference is not None else []:
            if older != cut and last[older] < before:
                notes.append(p.damage(errors.InconsistentHistory, (
                    f"it cut epoch {reference} while the older epoch {older}, whose every record is older than its "
                    f"cut-off {before.isoformat()}, stayed whole: a real prune removes such an epoch (a prune "
                    "record not written by `journal prune`?)" if cut is not None else
                    f"it left the epoch {older}, whose every record is older than its cut-off "
                    f"{before.isoformat()}, while removing others: a real prune removes every such epoch but the "
                    "newest")))
        for gone in p.payload["removed_epochs"]:
            epoch, ended = gone.get("epoch"), gone.get("last_at")
            if epoch in (cut, newest):
                notes.append(p.damage(errors.InconsistentHistory, (
                    f"it says it removed epoch {epoch} whole, which it {'cut' if epoch == cut else 'took as newest'}: "
                    "a real prune never does")))
            elif ended is not None and datetime.fromisoformat(ended) >= before:
                notes.append(p.damage(errors.InconsistentHistory, (
                    f"it says it removed epoch {epoch} whole, whose last record ({ended}) is not older than its "
                    f"cut-off {before.isoformat()}: a real prune keeps such an epoch")))
