"""Journal records and incarnations: the generic append-only log.

Revision ID: 0001_journal_records
Revises:
Create Date: 2026-05-09

"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_journal_records"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# INTEGER PRIMARY KEY on SQLite aliases the rowid (rows kept in LSN order).
LSN = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "journal_records",
        sa.Column("lsn", LSN, autoincrement=False, nullable=False),
        sa.Column("incarnation", sa.String(length=64), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("payload_sha256", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("lsn", name="pk_journal_records"),
    )
    op.create_index("ix_journal_records_incarnation_lsn", "journal_records", ["incarnation", "lsn"])
    op.create_index("ix_journal_records_kind_lsn", "journal_records", ["kind", "lsn"])
    op.create_index("ix_journal_records_recorded_at", "journal_records", ["recorded_at"])
    op.create_table(
        "journal_incarnations",
        sa.Column("incarnation", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_lsn", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("incarnation", name="pk_journal_incarnations"),
    )


def downgrade() -> None:
    op.drop_table("journal_incarnations")
    op.drop_index("ix_journal_records_recorded_at", table_name="journal_records")
    op.drop_index("ix_journal_records_kind_lsn", table_name="journal_records")
    op.drop_index("ix_journal_records_incarnation_lsn", table_name="journal_records")
    op.drop_table("journal_records")
