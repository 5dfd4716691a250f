"""What a recorded prune removed, and the proof that it removed nothing else.

SPEC §5 Retention: pruning removes whole epochs or an epoch's prefix up to a
checkpoint, and `verify` with no range starts at the oldest remaining checkpoint.
A missing prefix or epoch is fine only where the journal's prune record (written by
`kruntimes.journal.prune` at LSN 0) accounts for it, so `check` requires:

- the prune record is unedited (its SHA-256 matches) and says what a prune says;
- the checkpoint it names is in the epoch it names, with the SHA-256 it recorded;
- below that checkpoint the epoch holds only the incarnation records it lists.

It returns where the cut epoch resumes (`integrity.Start`: the checkpoint and the
link of the last record removed before it), so the integrity check accepts exactly
that gap and checks the checkpoint's link across it; every other gap is damage,
named by epoch and LSN there. A prune record from before epochs (no `epoch`, no
`link_before`) is read as a cut of the checkpoint's epoch whose chain the upgrade
computed across the gap.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field

from kruntimes.journal import backends, prune
from replay import errors, integrity, source


@dataclass(frozen=True)
class Pruned:
    """What the journal's prune record says: where the cut epoch resumes, which epochs went, when, by whom."""

    checkpoint_lsn: int | None  # None when the prune removed whole epochs only
    before: str  # the cut-off the prune was given
    pruned_at: str
    by: str
    deleted: int
    earlier: int  # prunes before this one, carried in the record
    epoch: str | None = None  # the epoch cut at the checkpoint
    link_before: str | None = None
    removed_epochs: tuple[str, ...] = field(default=())  # by this prune and the earlier ones

    @property
    def starts(self) -> dict[str, integrity.Start]:
        if self.epoch is None or self.checkpoint_lsn is None:
            return {}
        return {self.epoch: integrity.Start(self.checkpoint_lsn, self.link_before)}


def check(journal: backends.Journal) -> Pruned | None:
    """Read and prove the journal's prune record; None if the journal was never pruned."""
    evidence = _prune_record(journal)
    if evidence is None:
        return None
    pruned = _read(journal, evidence)
    if pruned.checkpoint_lsn is not None:
        _check_below(journal, pruned, evidence)
    return pruned


def _prune_record(journal: backends.Journal) -> source.Record | None:
    found = source.records_at(journal, prune.PRUNE_LSN)
    if len(found) > 1:
        raise errors.InconsistentHistory(prune.PRUNE_LSN, f"{len(found)} records at LSN {prune.PRUNE_LSN}, which "
                                                          "only one prune record may take")
    return found[0] if found else None


def _read(journal: backends.Journal, record: source.Record) -> Pruned:
    if record.kind != "prune":
        raise errors.InconsistentHistory(record.lsn, f"a {record.kind} record at LSN {prune.PRUNE_LSN}, "
                                                     "which only a prune record may take")
    p = record.payload
    try:
        checkpoint = p.get("checkpoint_lsn")
        if checkpoint is not None and (type(checkpoint) is not int or checkpoint < 1):
            raise TypeError(f"checkpoint_lsn {checkpoint!r} is not a positive int")
        if checkpoint is not None and not isinstance(record.field("checkpoint_sha256"), str):
            raise TypeError("checkpoint_sha256 is not a str")
        if checkpoint is not None:
            [int(lsn) for lsn in record.field("incarnation_lsns")]  # a list of LSNs, or damage
        removed = tuple(str(e["epoch"]) for prune_ in (*p.get("earlier", []), p)
                        for e in prune_.get("removed_epochs", []))
        epoch = p.get("epoch", record.incarnation if checkpoint is not None else None)
        link_before = p.get("link_before")
        if link_before is not None and not isinstance(link_before, str):
            raise TypeError("link_before is not a str")
        found = Pruned(checkpoint_lsn=checkpoint, before=record.field("before"), pruned_at=record.field("pruned_at"),
                       by=record.field("by"), deleted=record.field("deleted"), earlier=len(record.field("earlier")),
                       epoch=epoch, link_before=link_before, removed_epochs=removed)
    except (TypeError, ValueError, KeyError) as exc:
        raise errors.CorruptRecord(record.lsn, f"the prune record cannot be read: {exc}") from exc
    return found


def _check_below(journal: backends.Journal, pruned: Pruned, evidence: source.Record) -> None:
    """The named checkpoint is there and unchanged; below it the epoch holds only the listed incarnation records."""
    n, epoch = pruned.checkpoint_lsn, pruned.epoch
    assert n is not None and epoch is not None
    checkpoint = source.record_at(journal, n, epoch)
    if checkpoint is None:
        raise source.gap(n, n).located(epoch)
    if checkpoint.kind != "checkpoint":
        raise errors.InconsistentHistory(n, f"the prune record says epoch {epoch} resumes at a checkpoint at LSN {n}, "
                                            f"but that is a {checkpoint.kind} record", epoch=epoch)
    if hashlib.sha256(checkpoint.text.encode("utf-8")).hexdigest() != evidence.field("checkpoint_sha256"):
        raise errors.InconsistentHistory(n, "the checkpoint is not the one the prune record kept "
                                            "(its SHA-256 differs from the one the prune recorded)", epoch=epoch)
    listed = {int(lsn) for lsn in evidence.field("incarnation_lsns")}
    with contextlib.closing(source.lsns(journal, prune.PRUNE_LSN + 1, n - 1, epoch)) as below:
        for lsn, kind in below:
            if lsn not in listed or kind != "incarnation":
                raise errors.InconsistentHistory(
                    lsn, f"a {kind} record below the checkpoint at LSN {n}, where the prune of {pruned.pruned_at} "
                         "left only incarnation records (pruned records put back, or the prune record changed?)",
                    epoch=epoch)
            listed.discard(lsn)
    if listed and "epoch" in evidence.payload:  # before epochs it listed every epoch's incarnation records
        first = min(listed)
        raise errors.RecordGap(first, first, f"the incarnation record at LSN {first}, which the prune of "
                                             f"{pruned.pruned_at} kept, is not in the journal").located(epoch)

