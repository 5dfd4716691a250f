"""Heads published outside the database (`--head EPOCH:LSN:HASH`), checked against what the journal holds.

SPEC §5 "Integrity": each epoch's head is stored beside its records and also
published (the `journal head` log line, the head metric), so that rolling back the
records *and* the stored heads together is detectable by someone who kept a head.
A published head must not be ahead of the stored one, and the chain must still pass
through it; for an epoch a recorded prune removed whole, the head that prune record
gives must not be behind it (a prune record that lists an older head than one
published was not written by a prune of the epoch as it was).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import chain
from kruntimes.journal.store import backends, schema
from kruntimes.journal import errors as journal_errors
from replay import errors


@dataclass(frozen=True)
class PublishedHead:
    """A head someone saw published (the `journal head` log line or the metric): EPOCH:LSN:HASH."""

    epoch: str  # the epoch's ID or a unique prefix of it
    lsn: int
    hash: str

    @classmethod
    def parse(cls, text: str) -> PublishedHead:
        """`EPOCH:LSN:HASH`; ValueError saying what is wrong."""
        parts = text.strip().split(":")
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or len(parts[2]) != 64:
            raise ValueError(f"a published head is EPOCH:LSN:HASH (the hash 64 hex digits), got {text!r}")
        try:
            int(parts[2], 16)
        except ValueError:
            raise ValueError(f"the hash of published head {text!r} is not hexadecimal") from None
        return cls(parts[0], int(parts[1]), parts[2].lower())


def check_stored(journal: backends.Journal, epoch: str, stored: int | None,
                 head: PublishedHead) -> errors.JournalDamage | None:
    """The problem with a stored epoch whose head `stored` (None: no head row) is checked against `head`."""
    stored_lsn = stored if stored is not None else -1
    if stored_lsn < head.lsn:
        return errors.HeadBehindPublished(
            head.lsn, f"a head at LSN {head.lsn} was published, the stored head is "
                      f"{'missing' if stored_lsn < 0 else f'LSN {stored_lsn}'}: the journal was rolled back")
    t = schema.journal_records
    try:
        with journal.engine.connect() as conn:
            link = conn.execute(sa.select(t.c.chain_hash).where(t.c.incarnation == epoch,
                                                                t.c.lsn == head.lsn)).scalar()
    except sa_exc.DBAPIError as exc:
        raise journal_errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}") from exc
    if link is None or not chain.same(link, head.hash):
        return errors.HeadBehindPublished(
            head.lsn, "the chain no longer passes through the published head (its record "
                      f"{'is gone' if link is None else 'has another link'}: rewritten after it was published)")
    return None


def removed_behind(head: PublishedHead, epoch: str, lsn: int, link: str) -> errors.JournalDamage | None:
    """A head published for an epoch a prune removed whole: the head the prune recorded must not be behind it."""
    if lsn > head.lsn or (lsn == head.lsn and chain.same(link, head.hash)):
        return None
    return errors.HeadBehindPublished(
        head.lsn, f"a head at LSN {head.lsn} was published for epoch {epoch}; the prune record that removed it "
                  f"gives its head as LSN {lsn}{'' if lsn != head.lsn else ' with another link'}: the epoch was "
                  "rolled back before it was removed, or the prune record was not written by the prune")
