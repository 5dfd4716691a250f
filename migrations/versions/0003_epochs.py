"""Epochs: records keyed by (epoch, LSN), a hash chain per epoch, and each epoch's head.

Revision ID: 0003_epochs
Revises: 0002_history_views
Create Date: 2026-12-01

SPEC §5 "Several writers, one truth" and "Integrity". ``journal_records.incarnation`` is
the record's epoch (one leadership term); the key becomes (incarnation, lsn) so that
two writers, or a spool drained after another leader began, never compete for an LSN,
and an index on ``lsn`` keeps reading in LSN order cheap. ``chain_hash`` links every
record to the one before it in its epoch (``kruntimes.journal.chain``), and
``journal_epochs`` holds each epoch's head.

Existing records are chained here, epoch by epoch in LSN order: with the plain
SHA-256 link, or the HMAC one when ``KRUNTIMES_JOURNAL_KEY_FILE`` names a key during
the upgrade. The epochs found get ``end_reason`` ``before-epochs`` (they were written
without end records): ``verify`` reports them as closed at the upgrade, not as
failures. A ``prune`` record (LSN 0) is outside every chain and gets an empty link.

SQLite cannot change a primary key in place, so the table is rebuilt (Alembic's batch
mode); SQLite checks views while renaming the rebuilt table, so the views are dropped
and recreated around it from their stored SQL, whatever revision defined them.
Downgrade restores the old shape, and refuses (saying why) when two epochs share an LSN.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from alembic import op

from kruntimes.journal import chain
from kruntimes.journal.schema import UtcDateTime

revision: str = "0003_epochs"
down_revision: str | Sequence[str] | None = "0002_history_views"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LSN = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
BEFORE_EPOCHS = "before-epochs"
CHUNK = 10_000

_records = sa.table(
    "journal_records",
    sa.column("lsn", LSN), sa.column("incarnation", sa.String(64)), sa.column("recorded_at", UtcDateTime()),
    sa.column("kind", sa.String(16)), sa.column("schema_version", sa.Integer()),
    sa.column("payload_sha256", sa.String(64)), sa.column("chain_hash", sa.String(64)),
)


def upgrade() -> None:
    sqlite = op.get_context().dialect.name == "sqlite"
    op.add_column("journal_records", sa.Column("chain_hash", sa.String(length=64), nullable=True))
    epochs = op.create_table(
        "journal_epochs",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("first_lsn", sa.BigInteger(), nullable=False),
        sa.Column("head_lsn", sa.BigInteger(), nullable=False),
        sa.Column("head_hash", sa.String(length=64), nullable=False),
        sa.Column("algorithm", sa.String(length=16), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_lsn", sa.BigInteger(), nullable=True),
        sa.Column("end_reason", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("epoch", name="pk_journal_epochs"),
    )
    _chain_existing_records(epochs)
    if sqlite:
        views = _drop_sqlite_views()
        with op.batch_alter_table("journal_records", recreate="always") as batch:
            batch.alter_column("chain_hash", existing_type=sa.String(64), nullable=False)
            batch.drop_index("ix_journal_records_incarnation_lsn")
            batch.drop_constraint("pk_journal_records", type_="primary")
            batch.create_primary_key("pk_journal_records", ["incarnation", "lsn"])
            batch.create_index("ix_journal_records_lsn", ["lsn"])
        _create_sqlite_views(views)
    else:
        op.alter_column("journal_records", "chain_hash", existing_type=sa.String(64), nullable=False)
        op.drop_constraint("pk_journal_records", "journal_records", type_="primary")
        op.create_primary_key("pk_journal_records", "journal_records", ["incarnation", "lsn"])
        op.drop_index("ix_journal_records_incarnation_lsn", table_name="journal_records")
        op.create_index("ix_journal_records_lsn", "journal_records", ["lsn"])


def downgrade() -> None:
    conn = op.get_bind()
    shared = conn.execute(sa.text(
        "SELECT lsn, COUNT(*) FROM journal_records GROUP BY lsn HAVING COUNT(*) > 1 ORDER BY lsn LIMIT 5")).all()
    if shared:
        raise RuntimeError(
            "cannot downgrade below 0003_epochs: epochs share LSNs (first "
            + ", ".join(str(row[0]) for row in shared)
            + "), which the old key (lsn alone) cannot hold; export or prune those epochs first")
    op.drop_table("journal_epochs")
    if op.get_context().dialect.name == "sqlite":
        views = _drop_sqlite_views()
        with op.batch_alter_table("journal_records", recreate="always") as batch:
            batch.drop_index("ix_journal_records_lsn")
            batch.drop_constraint("pk_journal_records", type_="primary")
            batch.create_primary_key("pk_journal_records", ["lsn"])
            batch.create_index("ix_journal_records_incarnation_lsn", ["incarnation", "lsn"])
            batch.drop_column("chain_hash")
        _create_sqlite_views(views)
    else:
        op.drop_index("ix_journal_records_lsn", table_name="journal_records")
        op.drop_constraint("pk_journal_records", "journal_records", type_="primary")
        op.create_primary_key("pk_journal_records", "journal_records", ["lsn"])
        op.create_index("ix_journal_records_incarnation_lsn", "journal_records", ["incarnation", "lsn"])
        op.drop_column("journal_records", "chain_hash")


def _chain_existing_records(epochs: sa.Table) -> None:
    """Link every stored record of every epoch, in LSN order, and store each epoch's head."""
    conn = op.get_bind()
    key = chain.load_key()
    r = _records
    conn.execute(sa.update(r).where(r.c.kind == "prune").values(chain_hash=""))
    found = conn.execute(
        sa.select(r.c.incarnation, sa.func.min(r.c.lsn), sa.func.min(r.c.recorded_at), sa.func.max(r.c.recorded_at))
        .where(r.c.kind != "prune").group_by(r.c.incarnation)
    ).all()
    update = sa.update(r).where(r.c.lsn == sa.bindparam("b_lsn")).values(chain_hash=sa.bindparam("b_hash"))
    heads: list[dict[str, Any]] = []
    for epoch, first_lsn, started_at, updated_at in found:
        prev, last, head_lsn = chain.GENESIS, -1, first_lsn
        while True:
            rows = conn.execute(
                sa.select(r.c.lsn, r.c.recorded_at, r.c.kind, r.c.schema_version, r.c.payload_sha256)
                .where(r.c.incarnation == epoch, r.c.kind != "prune", r.c.lsn > last)
                .order_by(r.c.lsn).limit(CHUNK)
            ).all()
            if not rows:
                break
            links = []
            for lsn, at, kind, version, sha in rows:
                prev = chain.link(prev, epoch, lsn, _aware(at), kind, version, sha, key)
                links.append({"b_lsn": lsn, "b_hash": prev})
            conn.execute(update, links)
            last = head_lsn = rows[-1][0]
        heads.append({
            "epoch": epoch, "first_lsn": first_lsn, "head_lsn": head_lsn, "head_hash": prev,
            "algorithm": chain.algorithm(key), "key_id": None if key is None else key.key_id,
            "started_at": _aware(started_at), "updated_at": _aware(updated_at),
            "end_lsn": None, "end_reason": BEFORE_EPOCHS,
        })
    if heads:
        conn.execute(sa.insert(sa.table(epochs.name, *[sa.column(c.name, c.type) for c in epochs.columns])), heads)


def _aware(at: Any) -> datetime:
    # An aggregate (min/max) skips the column's type on some backends: SQLite gives its text back.
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


def _drop_sqlite_views() -> list[tuple[str, str]]:
    conn = op.get_bind()
    views = [(name, sql) for name, sql in conn.execute(sa.text(
        "SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY rowid")).all()]
    for name, _sql in reversed(views):
        op.execute(f'DROP VIEW "{name}"')
    return views


def _create_sqlite_views(views: list[tuple[str, str]]) -> None:
    for _name, sql in views:
        op.execute(sql)
