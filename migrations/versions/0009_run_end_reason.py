"""History: why a terminal Run ended, as columns of ``history_runs`` (``end_reason``, ``end_message``).

Revision ID: 0009_run_end_reason
Revises: 0008_chained_prunes
Create Date: 2026-12-04

Why: a failed Run had no reason in history or the web view (issue 27): the journal
recorded the Run's projection, which kept its phase but not its Completed condition,
so "Failed" was all anyone could read. The projection now carries that condition's
reason and first message line (``RunInfo.end_reason``/``end_message``, bounded, never
the process's output), the Run mutation records carry them, and the writer's derivation
stores them with each observation of the Run in ``history_runs``.

Existing rows are backfilled from their own stored records with what the derivation
takes from them (records written before this revision carry no reason: those rows stay
NULL, and readers fall back to the Run's invalid cycle where there is one). When
``0004_history_tables`` left the tables empty (an upgrade from before it), they are
rebuilt here instead, as ``kruntimes journal reindex`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_run_end_reason"
down_revision: str | Sequence[str] | None = "0008_chained_prunes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("end_reason", "end_message")
# The field of the record a row came from, when it is a string (the derivation's ``_str``; NUL aside).
_FIELD = {
    "sqlite": ("(SELECT CASE WHEN json_type(j.payload, '$.object.{name}') = 'text'"
               " THEN json_extract(j.payload, '$.object.{name}') END"),
    "postgresql": ("(SELECT CASE WHEN json_typeof(j.payload::json #> '{{object,{name}}}') = 'string'"
                   " THEN j.payload::json #>> '{{object,{name}}}' END"),
}
_FROM_RECORD = (" FROM journal_records j WHERE j.incarnation = history_runs.epoch AND j.lsn = history_runs.lsn"
                " AND j.kind = 'mutation')")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("history_runs", sa.Column(name, sa.Text(), nullable=True))
    from kruntimes.journal import backends, derived  # the writer's own derivation

    conn = op.get_bind()
    if derived.left_empty(conn):
        if derived.written_columns_exist(conn):  # else a later revision added columns: it rebuilds
            backends.rebuild_history(conn)
        return
    dialect = op.get_context().dialect.name
    assignments = ", ".join(f"{name} = {_FIELD[dialect].format(name=name)}{_FROM_RECORD}" for name in COLUMNS)
    op.execute(f"UPDATE history_runs SET {assignments} WHERE phase IN ('Succeeded', 'Failed')")


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN on both backends (SQLite >= 3.35): nothing else refers to them.
    for name in reversed(COLUMNS):
        op.execute(f"ALTER TABLE history_runs DROP COLUMN {name}")
