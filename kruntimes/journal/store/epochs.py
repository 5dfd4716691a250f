"""Each epoch's row in ``journal_epochs`` and each incarnation's in ``journal_incarnations``.

Both are projections of ``journal_records`` that ``Journal.append_batch`` writes in the
batch's own transaction, so they never disagree with the records; readers (replay's
integrity check, the spool drain) read an epoch's stored head from here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from kruntimes.journal import chain, records
from kruntimes.journal.store import schema


class Incarnation(NamedTuple):
    """One scheduler incarnation, as projected from its ``incarnation`` record."""

    incarnation: str
    started_at: datetime
    first_lsn: int
    version: str
    config_hash: str


class EpochHead(NamedTuple):
    """One epoch's row in ``journal_epochs``: its stored head and, once it ended, its end."""

    epoch: str
    first_lsn: int
    head_lsn: int
    head_hash: str
    algorithm: str
    key_id: str | None
    started_at: datetime
    updated_at: datetime
    end_lsn: int | None
    end_reason: str | None


def advance(conn: sa.Connection, rows: Sequence[records.EncodedRecord], key: chain.ChainKey | None, indexed: bool,
            upserts: dict[bool, Any]) -> None:
    """Move each epoch's head to its last record in ``rows`` (same transaction), creating the epoch;
    with ``indexed`` (the batch's history rows are written) its ``history_lsn`` too. ``upserts`` keeps the
    two statements built once each: SQLAlchemy then caches their compiled forms."""
    found: dict[str, dict[str, Any]] = {}
    algorithm, key_id = chain.algorithm(key), None if key is None else key.key_id
    for r in rows:
        head = found.get(r.incarnation)
        if head is None:
            head = found[r.incarnation] = {
                "epoch": r.incarnation, "first_lsn": r.lsn, "started_at": r.recorded_at, "algorithm": algorithm,
                "key_id": key_id, "end_lsn": None, "end_reason": None,
            }
        if r.lsn >= head.get("head_lsn", r.lsn):
            head["head_lsn"], head["head_hash"], head["updated_at"] = r.lsn, r.chain_hash, r.recorded_at
        head["first_lsn"] = min(head["first_lsn"], r.lsn)
        if r.kind == "end":
            reason = json.loads(r.payload).get("reason")
            head["end_lsn"] = r.lsn
            head["end_reason"] = str(reason)[:64] if reason is not None else "unknown"
    for head in found.values():
        head["history_lsn"] = head["head_lsn"] if indexed else None
    upsert = upserts.get(indexed)
    if upsert is None:
        upsert = upserts[indexed] = _epochs_upsert(conn, indexed)
    conn.execute(upsert, list(found.values()))

def project_incarnations(conn: sa.Connection, rows: Sequence[records.EncodedRecord]) -> None:
    # journal_incarnations is a projection of the log, written in the same
    # transaction so it can never disagree with journal_records.
    found = [
        {
            "incarnation": r.incarnation,
            "started_at": r.recorded_at,
            "first_lsn": r.lsn,
            "version": payload["version"],
            "config_hash": payload["config_hash"],
        }
        for r in rows
        if r.kind == "incarnation"
        for payload in (json.loads(r.payload),)
    ]
    if found:
        dialect_insert: Any = _dialect_insert(conn)
        conn.execute(dialect_insert(schema.journal_incarnations).on_conflict_do_nothing(), found)


def _dialect_insert(conn: sa.Connection) -> Any:
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert
    from sqlalchemy.dialects import postgresql

    return postgresql.insert


def _epochs_upsert(conn: sa.Connection, indexed: bool) -> Any:
    """Insert an epoch's row, or move its head forward (never back) and record its end; with ``indexed``
    its ``history_lsn`` follows the head."""
    table = schema.journal_epochs
    insert = _dialect_insert(conn)(table)
    new = insert.excluded
    moved: dict[str, Any] = {
        "head_lsn": new.head_lsn, "head_hash": new.head_hash, "updated_at": new.updated_at,
        "end_lsn": sa.func.coalesce(new.end_lsn, table.c.end_lsn),
        "end_reason": sa.func.coalesce(new.end_reason, table.c.end_reason),
    }
    if indexed:
        moved["history_lsn"] = new.history_lsn
    return insert.on_conflict_do_update(
        index_elements=[table.c.epoch],
        set_=moved,
        where=table.c.head_lsn < new.head_lsn,
    )
