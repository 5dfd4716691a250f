"""History progress: how far each epoch's records are in the history tables (``journal_epochs.history_lsn``).

Revision ID: 0007_history_progress
Revises: 0006_churn
Create Date: 2026-12-02

Why: deriving the history rows in the records' own transaction costs the writer most
of its throughput (the rows and their indexes are more work for the database than
the record itself), so a writer may now leave them to ``kruntimes journal index``,
which derives them a chunk at a time after the fact (``kruntimes.journal.follow``).
``history_lsn`` says, per epoch, through which record the tables are complete: the
indexer starts after it, a writer deriving in its own transaction does so only while
no epoch lags behind (so rows are still applied in LSN order), and history readers
can say how far behind the tables are.

Every history table is complete when this revision runs (revisions 0004-0006 filled
them), so each epoch's ``history_lsn`` starts at its head.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_history_progress"
down_revision: str | Sequence[str] | None = "0006_churn"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("journal_epochs", sa.Column("history_lsn", sa.BigInteger(), nullable=True))
    op.execute("UPDATE journal_epochs SET history_lsn = head_lsn")


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN on both backends (SQLite >= 3.35): no index or
    # constraint refers to it.
    op.execute("ALTER TABLE journal_epochs DROP COLUMN history_lsn")
