"""Which stored rows a read asks for, and in which order: the store's SELECT statements.

A record's identity is (epoch, LSN): LSNs overlap between epochs begun while the
database was away, so an LSN range is one epoch's (a bare range would mix epochs).
Without an epoch every record comes: the prune records (LSN 0, numbered in a chain of
their own) first, then each epoch's together in LSN order, the epochs by their ID (not
their age: ``history.order`` says which is older; read epoch by epoch in its order
when that matters).
"""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa

from kruntimes.journal.store import epochs, schema


def records(epoch: str | None, since_lsn: int | None, until_lsn: int | None,
            kinds: Collection[str] | None) -> sa.Select[tuple[object, ...]]:
    """The stored records of ``epoch`` with ``since_lsn < lsn <= until_lsn`` (of ``kinds``), in their order."""
    if epoch is None and (since_lsn is not None or until_lsn is not None):
        raise ValueError("an LSN range is one epoch's (LSNs overlap between epochs): name the epoch")
    table = schema.journal_records
    stmt = sa.select(
        table.c.lsn,
        table.c.incarnation,
        table.c.recorded_at,
        table.c.kind,
        table.c.schema_version,
        table.c.payload,
        table.c.payload_sha256,
        table.c.chain_hash,
    ).order_by(sa.case((table.c.lsn == 0, 0), else_=1), table.c.incarnation, table.c.lsn)  # prunes' (LSN 0) first
    if epoch is not None:
        stmt = stmt.where(table.c.incarnation == epoch)
    if since_lsn is not None:
        stmt = stmt.where(table.c.lsn > since_lsn)
    if until_lsn is not None:
        stmt = stmt.where(table.c.lsn <= until_lsn)
    if kinds is not None:
        stmt = stmt.where(table.c.kind.in_(sorted(kinds)))
    return stmt


def epoch_heads(only: Collection[str] | None) -> sa.Select[tuple[object, ...]]:
    """Each epoch's stored head (``only`` those named), by first LSN."""
    table = schema.journal_epochs
    stmt = sa.select(*[table.c[name] for name in epochs.EpochHead._fields]).order_by(table.c.first_lsn)
    if only is not None:
        stmt = stmt.where(table.c.epoch.in_(sorted(only)))
    return stmt


def incarnations() -> sa.Select[tuple[object, ...]]:
    """Every incarnation, by first LSN (not by age, where epochs' LSNs overlap)."""
    table = schema.journal_incarnations
    return sa.select(
        table.c.incarnation, table.c.started_at, table.c.first_lsn, table.c.version, table.c.config_hash
    ).order_by(table.c.first_lsn, table.c.incarnation)
