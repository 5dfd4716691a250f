"""The prune record: a prune's evidence, chained and keyed like every record (SPEC §5 Retention, amended 2026-12-04).

A prune deletes records, so whoever can write the database could delete records and
write "a prune did it". That is only prevented if the evidence is something only a
real prune can write: with a key configured, an HMAC link nobody without the key can
compute, as for every scheduler record (``chain``).

Every prune adds one record of kind ``prune`` at LSN 0 (which no scheduler assigns),
numbered 1, 2, ... in a chain of its own: its ``incarnation`` column is
``prune-N`` (no epoch has such an ID), and its link (``chain.link`` of the row, as
for any record) covers the link of prune ``N-1`` (``chain.GENESIS`` for the first).
So removing, editing or re-ordering an earlier prune record breaks a link, and
deleting the newest one leaves its deletions unaccounted for. Its payload names the
cut by (epoch, LSN, hash): the epoch cut, the checkpoint it resumes at (LSN, payload
SHA-256 and link) and the link of the last record removed before it; every epoch
removed whole with its head, its first record's time and its last record's; the
epoch the prune took as newest; and the algorithm and key id of its link.

``replay.coverage`` proves these records and accepts exactly the gaps they account
for. A journal pruned before revision ``0008_chained_prunes`` held one unchained
record at LSN 0 (carrying earlier prunes in ``earlier``); that revision rewrites it
into this form.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa

from kruntimes.journal import chain, records
from kruntimes.journal.store import schema

#: The LSN of every prune record: outside the sequence a scheduler numbers from 1.
PRUNE_LSN: Final = 0
KIND: Final = "prune"
SCHEMA_VERSION: Final = 1
_PREFIX: Final = "prune-"


class PruneKeyError(ValueError):
    """The prune record cannot be keyed like the journal's epochs (no key given, or another key)."""


def incarnation_of(number: int) -> str:
    """The ``incarnation`` column of prune record ``number``: no epoch ID looks like it."""
    return f"{_PREFIX}{number}"


def is_chained(incarnation: str) -> bool:
    """Whether a record at LSN 0 is stored as a chained prune record (else: the form from before 0008)."""
    return incarnation.startswith(_PREFIX)


def link(previous: str, number: int, recorded_at: datetime, payload_sha256: str,
         key: chain.ChainKey | None) -> str:
    """The link of prune record ``number``: a record link like any other, after the previous prune's link."""
    return chain.link(previous, incarnation_of(number), PRUNE_LSN, recorded_at, KIND, SCHEMA_VERSION,
                      payload_sha256, key)


def check_key(conn: sa.Connection, key: chain.ChainKey | None) -> None:
    """Refuse to write an unkeyed prune record into a keyed journal, or one keyed with another key.

    ``verify`` with the key refuses an unkeyed prune record (anyone could have written
    it), so a prune without the key would make the journal unprovable.
    """
    e = schema.journal_epochs
    keyed = set(conn.scalars(sa.select(e.c.key_id).where(e.c.algorithm == chain.KEYED)).all())
    if keyed and key is None:
        raise PruneKeyError(f"the journal is keyed (key_id {', '.join(sorted(str(k) for k in keyed))}): give its "
                            "key (--journal-key-file or $KRUNTIMES_JOURNAL_KEY_FILE) so the prune record is "
                            "keyed like its records")
    if key is not None and keyed - {key.key_id}:
        raise PruneKeyError(f"the journal is keyed with key_id {', '.join(sorted(str(k) for k in keyed))}, the key "
                            f"given is key_id {key.key_id}")


def append(conn: sa.Connection, payload: dict[str, Any], recorded_at: datetime, key: chain.ChainKey | None) -> int:
    """Store the next prune record, linked after the newest one; return its number."""
    r = schema.journal_records
    last = conn.execute(sa.select(r.c.payload, r.c.chain_hash).where(r.c.lsn == PRUNE_LSN, r.c.kind == KIND)
                        .order_by(r.c.recorded_at.desc())).all()
    numbered = [(int(json.loads(p).get("number", 0)), h) for p, h in last]
    number, previous = max(numbered, default=(0, chain.GENESIS))
    body = {**payload, "number": number + 1, "previous": previous, "algorithm": chain.algorithm(key),
            "key_id": None if key is None else key.key_id}
    text = records.canonical_json(body)
    sha = records.content_hash(text)
    conn.execute(sa.insert(r).values(lsn=PRUNE_LSN, incarnation=incarnation_of(number + 1), recorded_at=recorded_at,
                                     kind=KIND, schema_version=SCHEMA_VERSION, payload=text, payload_sha256=sha,
                                     chain_hash=link(previous, number + 1, recorded_at, sha, key)))
    return number + 1


def cuts(conn: sa.Connection) -> dict[str, int]:
    """Per cut epoch, the checkpoint its latest recorded cut resumes at (as the prune records say, unproven:
    ``replay.coverage`` proves them)."""
    r = schema.journal_records
    found: dict[str, int] = {}
    for (text,) in conn.execute(sa.select(r.c.payload).where(r.c.lsn == PRUNE_LSN, r.c.kind == KIND)):
        try:
            payload = json.loads(text)
            epoch, lsn = payload.get("epoch"), payload.get("checkpoint_lsn")
        except (ValueError, AttributeError):
            continue
        if isinstance(epoch, str) and isinstance(lsn, int):
            found[epoch] = max(lsn, found.get(epoch, lsn))
    return found
