"""Chained prunes: one prune record per prune, chained and (with a key) keyed like every record.

Revision ID: 0008_chained_prunes
Revises: 0007_history_progress
Create Date: 2026-12-04

SPEC §5 Retention (amended 2026-12-04): "A prune is itself a chained (and, with a key,
keyed) record naming each cut by (epoch, LSN, hash)". Before this revision a prune
replaced the one record at LSN 0, unlinked (``chain_hash`` empty), and carried the
earlier prunes in its ``earlier`` list; anyone with write access could write one.
Now every prune is a record of its own at LSN 0, ``incarnation`` ``prune-N``
(``kruntimes.journal.prune_record``).

No table changes; the record such a journal holds is rewritten here into that form:
one record per prune it lists, oldest first, each linked after the one before - with
the HMAC when ``KRUNTIMES_JOURNAL_KEY_FILE`` names a key during the upgrade, as
``0003_epochs`` chained the records. Each says ``rewritten_by`` this revision: the
link proves nothing about what the record said before the upgrade. Fields the old
form lacks stay null (``checkpoint_link`` is taken from the checkpoint when it is
still there). Downgrade folds them back into the one record of the old form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from alembic import op

from kruntimes.journal import chain, prune_record, records
from kruntimes.journal.schema import UtcDateTime

revision: str = "0008_chained_prunes"
down_revision: str | Sequence[str] | None = "0007_history_progress"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_records = sa.table(
    "journal_records",
    sa.column("lsn", sa.BigInteger()), sa.column("incarnation", sa.String(64)),
    sa.column("recorded_at", UtcDateTime()), sa.column("kind", sa.String(16)), sa.column("schema_version", sa.Integer()),
    sa.column("payload", sa.Text()), sa.column("payload_sha256", sa.String(64)), sa.column("chain_hash", sa.String(64)),
)
_OLD = ("before", "pruned_at", "by", "deleted", "epoch", "checkpoint_lsn", "checkpoint_sha256", "incarnation_lsns",
        "link_before", "removed_epochs")


def upgrade() -> None:
    conn = op.get_bind()
    r = _records
    old = [row for row in conn.execute(sa.select(r.c.incarnation, r.c.recorded_at, r.c.payload)
                                       .where(r.c.lsn == prune_record.PRUNE_LSN, r.c.kind == prune_record.KIND)).all()
           if not prune_record.is_chained(row.incarnation)]
    if not old:
        return
    key = chain.load_key()
    owner, at, text = old[0]
    newest = json.loads(text)
    prunes = [*newest.get("earlier", []), {k: v for k, v in newest.items() if k != "earlier"}]
    conn.execute(sa.delete(r).where(r.c.lsn == prune_record.PRUNE_LSN, r.c.incarnation == owner))
    previous = chain.GENESIS
    for number, p in enumerate(prunes, 1):
        cut = p.get("checkpoint_lsn")
        epoch = p.get("epoch", owner if cut is not None else None)
        link = None
        if cut is not None:
            link = conn.execute(sa.select(r.c.chain_hash).where(r.c.incarnation == epoch, r.c.lsn == cut)).scalar()
        body: dict[str, Any] = {name: p.get(name) for name in _OLD}
        body.update(number=number, previous=previous, algorithm=chain.algorithm(key),
                    key_id=None if key is None else key.key_id, epoch=epoch, checkpoint_link=link, newest=None,
                    incarnation_lsns=p.get("incarnation_lsns") or [], removed_epochs=p.get("removed_epochs") or [],
                    rewritten_by=revision)
        when = at if number == len(prunes) else _time(p.get("pruned_at"), at)
        payload = records.canonical_json(body)
        sha = records.content_hash(payload)
        previous = prune_record.link(previous, number, when, sha, key)
        conn.execute(sa.insert(r).values(lsn=prune_record.PRUNE_LSN, incarnation=prune_record.incarnation_of(number),
                                         recorded_at=when, kind=prune_record.KIND,
                                         schema_version=prune_record.SCHEMA_VERSION, payload=payload,
                                         payload_sha256=sha, chain_hash=previous))


def downgrade() -> None:
    conn = op.get_bind()
    r = _records
    rows = [row for row in conn.execute(sa.select(r.c.incarnation, r.c.recorded_at, r.c.payload)
                                        .where(r.c.lsn == prune_record.PRUNE_LSN, r.c.kind == prune_record.KIND)).all()
            if prune_record.is_chained(row.incarnation)]
    if not rows:
        return
    prunes = sorted((json.loads(row.payload) for row in rows), key=lambda p: p["number"])
    latest = max(rows, key=lambda row: json.loads(row.payload)["number"])
    old = [{k: p.get(k) for k in _OLD} for p in prunes]
    owner = old[-1]["epoch"] or conn.execute(sa.select(r.c.incarnation).where(r.c.lsn > prune_record.PRUNE_LSN)
                                            .order_by(r.c.recorded_at.desc()).limit(1)).scalar()
    payload = records.canonical_json({**old[-1], "earlier": old[:-1]})
    conn.execute(sa.delete(r).where(r.c.lsn == prune_record.PRUNE_LSN))
    if owner is not None:
        conn.execute(sa.insert(r).values(lsn=prune_record.PRUNE_LSN, incarnation=owner, recorded_at=latest.recorded_at,
                                         kind=prune_record.KIND, schema_version=prune_record.SCHEMA_VERSION,
                                         payload=payload, payload_sha256=records.content_hash(payload), chain_hash=""))


def _time(text: str | None, default: datetime) -> datetime:
    if not text:
        return default
    at = datetime.fromisoformat(text)
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)
