"""History: what each placement's reservation charged its pod, as a column of ``history_placements``.

Revision ID: 0005_placement_requests
Revises: 0004_history_tables
Create Date: 2026-12-01

Why: the web view's utilisation figure needs every placement's requests. They were
only in the ``reserve`` records' payloads, so the Timeline parsed those for each window
(issue 17: every page within 300 ms on a million records, never scanning payloads).
``history_placements.requests`` holds them as compact JSON ``[[resource, amount]]``,
one column rather than a row per resource, so the write path stays cheap: the writer's
derivation takes them from the Run's reservation in the same batch, or by key range
from the stored reservation when the batch began after it (``derived._requests``).

Existing journals are backfilled with the derivation's own statement for a placement
whose reservation came in an earlier batch (``derived.REQUESTS_FROM_RESERVE``: the
Run's reservation between the cycle's snapshot and the cycle, by key range), so the
column holds what the writer would have written. When the tables are still empty
because ``0004_history_tables`` left its backfill to this revision (an upgrade from
before it), they are rebuilt instead, as ``kruntimes journal reindex`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_placement_requests"
down_revision: str | Sequence[str] | None = "0004_history_tables"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("history_placements", sa.Column("requests", sa.Text(), nullable=True))
    from kruntimes.journal import backends, derived  # the writer's own derivation, applied to what is stored

    conn = op.get_bind()
    if derived.left_empty(conn):
        # 0004 left the tables empty: the live derivation fills them, once it has every column
        # it writes (when a later revision adds some, that revision rebuilds instead).
        if derived.written_columns_exist(conn):
            backends.rebuild_history(conn)
        return
    # Tables already filled: only the new column, by SQL that needs no later revision's columns.
    dialect = op.get_context().dialect.name
    conn.execute(sa.text(f"UPDATE history_placements SET requests = {derived.REQUESTS_FROM_RESERVE[dialect]}"))


def downgrade() -> None:
    op.drop_column("history_placements", "requests")
