"""Churn: each scheduled placement keeps its previous cycle, its result and top candidate.

Revision ID: 0006_churn
Revises: 0005_placement_requests
Create Date: 2026-12-01

Why: the churn question (the Runs placed elsewhere than the top candidate of their
previous cycle) looked the previous cycle up for every placement of its window, three
index look-ups each: 111-164 ms for a busy hour at 1M records, over the 100 ms target,
and more as a journal grows. From here on the writer stores, with each scheduled
placement, the Run's latest cycle of the same epoch before it (``previous_lsn``), that
cycle's ``result`` (``previous_result``) and top candidate (``previous_top``), in the
same transaction (``kruntimes.journal.previous``); a partial index holds the placements
that went elsewhere by time, so the question reads only its answer.

This revision adds the columns, fills them for every placement already stored with the
same statement the writer runs per batch (frozen here), then builds the index. When
``0004_history_tables`` left the tables empty (its backfill waits for a revision whose
tables have every column the live derivation writes), they are rebuilt here instead, as
``kruntimes journal reindex`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_churn"
down_revision: str | Sequence[str] | None = "0005_placement_requests"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (("previous_lsn", sa.BigInteger), ("previous_result", sa.Text), ("previous_top", sa.Text))
CHURNED = "outcome = 'scheduled' AND previous_top <> pod"

_BACKFILL = """
UPDATE history_placements SET (previous_lsn, previous_result, previous_top) =
  (SELECT c.lsn, c.result, k.pod FROM history_cycles c
   LEFT JOIN history_candidates k ON k.epoch = c.epoch AND k.lsn = c.lsn AND k.rank = 1
   WHERE c.namespace = history_placements.namespace AND c.run_uid = history_placements.run_uid
     AND c.epoch = history_placements.epoch AND c.lsn < history_placements.lsn
   ORDER BY c.lsn DESC LIMIT 1)
WHERE outcome = 'scheduled'"""


def upgrade() -> None:
    for name, type_ in COLUMNS:
        op.add_column("history_placements", sa.Column(name, type_(), nullable=True))
    from kruntimes.journal import backends, derived  # the writer's own derivation

    conn = op.get_bind()
    if derived.left_empty(conn):
        if derived.written_columns_exist(conn):  # else a later revision added columns: it rebuilds
            backends.rebuild_history(conn)  # with each placement's previous cycle
    else:
        op.execute(_BACKFILL)
    op.create_index("ix_history_placements_churn", "history_placements", ["decided_at"],
                    sqlite_where=sa.text(CHURNED), postgresql_where=sa.text(CHURNED))


def downgrade() -> None:
    op.drop_index("ix_history_placements_churn", table_name="history_placements")
    # Plain ALTER TABLE ... DROP COLUMN on both backends (SQLite >= 3.35): nothing else
    # refers to these columns, so no table rebuild is needed.
    for name, _ in reversed(COLUMNS):
        op.execute(f"ALTER TABLE history_placements DROP COLUMN {name}")
