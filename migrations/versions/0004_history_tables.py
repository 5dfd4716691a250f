"""History tables: typed, indexed rows derived from the journal's records, and the views over them.

Revision ID: 0004_history_tables
Revises: 0003_epochs
Create Date: 2026-12-01

Why: the views of ``0002_history_views`` re-parse every payload of their kind on each
query, so a question took time in proportion to the journal's length. From here on the
journal writer fills typed tables (``kruntimes.journal.derived``) in the same
transaction as the records they come from, each row keyed by its record's
``(epoch, lsn)`` (the epoch is the record's ``incarnation``), with indexes for the
questions of ``docs/journal.md``.

This revision creates the tables, backfills them from the records already stored (the
same derivation the writer and ``kruntimes journal reindex`` use, applied in LSN order)
and redefines the old views over the tables, with the same names and columns, so SQL
written against them keeps working and is index-backed too. A later change to the
tables is a new revision that reindexes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0004_history_tables"
down_revision: str | Sequence[str] | None = "0003_epochs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "history_cycles", "history_candidates", "history_rejections", "history_placements", "history_pods",
    "history_runs", "history_binds", "history_waits", "history_pod_hours", "history_rejection_hours", "history_epochs",
)
# Dependants after what they read, so creation runs in order and dropping in reverse.
VIEWS = (
    "cycles", "placements", "pending_reasons", "cycle_rejections", "pending_rejections",
    "cycle_candidates", "pod_observations", "run_observations", "bind_results",
)

# A placement's runtime is the Run's, as of the snapshot its cycle read: its latest Run
# observation of the same epoch at or before the snapshot LSN (NULL once pruned).
_COMMON = {
    "cycles": """
SELECT lsn, epoch AS incarnation, decided_at, namespace, run, run_uid, snapshot_lsn, now, status, result, chosen,
       chosen_uid, total, message, pods_evaluated, pods_feasible, duration_us, digest, planner_version, config_hash
FROM history_cycles""",
    "placements": """
SELECT p.lsn, p.epoch AS incarnation, p.namespace, p.run, p.run_uid,
       (SELECT r.runtime FROM history_runs r
        WHERE r.namespace = p.namespace AND r.uid = p.run_uid AND r.epoch = p.epoch AND r.lsn <= p.snapshot_lsn
        ORDER BY r.lsn DESC LIMIT 1) AS runtime,
       p.pod, p.pod_uid, p.decided_at, p.now, p.total, p.outcome, p.snapshot_lsn
FROM history_placements p""",
    "pending_reasons": """
SELECT lsn, incarnation, namespace, run, run_uid, decided_at, now, result, message, pods_evaluated
FROM cycles WHERE status = 'unschedulable'""",
    "cycle_rejections": """
SELECT lsn, decided_at, namespace, run, run_uid, status, result, plugin, reason, pods
FROM history_rejections""",
    "pending_rejections": """
SELECT lsn, decided_at, namespace, run, run_uid, result, plugin, reason, pods
FROM cycle_rejections WHERE status = 'unschedulable'""",
    "pod_observations": """
SELECT lsn, recorded_at, event, namespace, name, uid, runtime, resource_version, ready, terminating, heartbeat,
       capacity, capacity_problem
FROM history_pods""",
    "run_observations": """
SELECT lsn, recorded_at, event, namespace, name, uid, runtime, resource_version, phase, pod_name, pending_message
FROM history_runs""",
    "bind_results": """
SELECT lsn, recorded_at, namespace, run_uid, result, error
FROM history_binds""",
}

# One row per (cycle, candidate, plugin): the candidate's scores are compact JSON text.
_CANDIDATES = {
    "sqlite": """
SELECT c.lsn, y.decided_at, y.namespace, y.run, y.run_uid, y.chosen, c.rank, c.pod, c.total,
       json_extract(s.value, '$[0]') AS plugin, CAST(json_extract(s.value, '$[1]') AS TEXT) AS raw,
       json_extract(s.value, '$[2]') AS normalized
FROM history_candidates c
JOIN history_cycles y ON y.epoch = c.epoch AND y.lsn = c.lsn
LEFT JOIN json_each(c.plugin_scores) s""",
    # `json`, not jsonb: it keeps the stored compact text of a vector score as it is.
    "postgresql": """
SELECT c.lsn, y.decided_at, y.namespace, y.run, y.run_uid, y.chosen, c.rank, c.pod, c.total,
       s.value ->> 0 AS plugin, s.value ->> 1 AS raw, (s.value ->> 2)::bigint AS normalized
FROM history_candidates c
JOIN history_cycles y ON y.epoch = c.epoch AND y.lsn = c.lsn
LEFT JOIN LATERAL json_array_elements(c.plugin_scores::json) s(value) ON true""",
}


def upgrade() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.create_table(
        "history_cycles",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("lsn", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("run", sa.Text(), nullable=True),
        sa.Column("run_uid", sa.Text(), nullable=True),
        sa.Column("snapshot_lsn", sa.BigInteger(), nullable=True),
        sa.Column("now", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("chosen", sa.Text(), nullable=True),
        sa.Column("chosen_uid", sa.Text(), nullable=True),
        sa.Column("total", sa.BigInteger(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("pods_evaluated", sa.BigInteger(), nullable=True),
        sa.Column("pods_feasible", sa.BigInteger(), nullable=True),
        sa.Column("duration_us", sa.BigInteger(), nullable=True),
        sa.Column("digest", sa.Text(), nullable=True),
        sa.Column("planner_version", sa.Text(), nullable=True),
        sa.Column("config_hash", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", "lsn", name="pk_history_cycles"),
    )
    op.create_index("ix_history_cycles_decided_at", "history_cycles", ["decided_at"])
    op.create_index("ix_history_cycles_duration", "history_cycles", ["duration_us"])
    op.create_index("ix_history_cycles_run", "history_cycles", ["namespace", "run", "lsn"])
    op.create_index("ix_history_cycles_run_uid", "history_cycles", ["namespace", "run_uid", "lsn"])
    op.create_table(
        "history_candidates",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("lsn", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("rank", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("pod", sa.Text(), nullable=True),
        sa.Column("total", sa.BigInteger(), nullable=True),
        sa.Column("plugin_scores", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", "lsn", "rank", name="pk_history_candidates"),
    )
    op.create_table(
        "history_rejections",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("lsn", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("run", sa.Text(), nullable=True),
        sa.Column("run_uid", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("plugin", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("pods", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", "lsn", "position", name="pk_history_rejections"),
    )
    op.create_index("ix_history_rejections_reason", "history_rejections", ["reason", "status", "decided_at"])
    op.create_table(
        "history_placements",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("lsn", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("run", sa.Text(), nullable=True),
        sa.Column("run_uid", sa.Text(), nullable=True),
        sa.Column("pod", sa.Text(), nullable=True),
        sa.Column("pod_uid", sa.Text(), nullable=True),
        sa.Column("now", sa.Text(), nullable=True),
        sa.Column("total", sa.BigInteger(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("snapshot_lsn", sa.BigInteger(), nullable=True),
        sa.Column("end_epoch", sa.String(length=64), nullable=True),
        sa.Column("end_lsn", sa.BigInteger(), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", "lsn", name="pk_history_placements"),
    )
    op.create_index("ix_history_placements_decided_at", "history_placements", ["decided_at"])
    op.create_index("ix_history_placements_open", "history_placements", ["namespace", "run_uid"], sqlite_where=sa.text("outcome = 'scheduled' AND end_lsn IS NULL"), postgresql_where=sa.text("outcome = 'scheduled' AND end_lsn IS NULL"))
    op.create_index("ix_history_placements_pod", "history_placements", ["namespace", "pod", "decided_at"])
    op.create_index("ix_history_placements_run", "history_placements", ["namespace", "run", "lsn"])
    op.create_table(
        "history_pods",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("lsn", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.Text(), nullable=True),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("uid", sa.Text(), nullable=True),
        sa.Column("runtime", sa.Text(), nullable=True),
        sa.Column("resource_version", sa.Text(), nullable=True),
        sa.Column("ready", sa.Boolean(), nullable=True),
        sa.Column("terminating", sa.Boolean(), nullable=True),
        sa.Column("heartbeat", sa.Text(), nullable=True),
        sa.Column("capacity", sa.Text(), nullable=True),
        sa.Column("capacity_problem", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", "lsn", name="pk_history_pods"),
    )
    op.create_index("ix_history_pods_name", "history_pods", ["namespace", "name", "recorded_at"])
    op.create_table(
        "history_runs",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("lsn", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.Text(), nullable=True),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("uid", sa.Text(), nullable=True),
        sa.Column("runtime", sa.Text(), nullable=True),
        sa.Column("resource_version", sa.Text(), nullable=True),
        sa.Column("phase", sa.Text(), nullable=True),
        sa.Column("pod_name", sa.Text(), nullable=True),
        sa.Column("pending_message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", "lsn", name="pk_history_runs"),
    )
    op.create_index("ix_history_runs_uid", "history_runs", ["namespace", "uid", "lsn"])
    op.create_table(
        "history_binds",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("lsn", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("run_uid", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", "lsn", name="pk_history_binds"),
    )
    op.create_index("ix_history_binds_recorded_at", "history_binds", ["recorded_at", "result"])
    op.create_index("ix_history_binds_run", "history_binds", ["namespace", "run_uid", "lsn"])
    op.create_table(
        "history_waits",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("first_lsn", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("run", sa.Text(), nullable=True),
        sa.Column("run_uid", sa.Text(), nullable=True),
        sa.Column("first_pending_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_pending_us", sa.BigInteger(), nullable=True),
        sa.Column("first_reason", sa.Text(), nullable=True),
        sa.Column("last_epoch", sa.String(length=64), nullable=True),
        sa.Column("last_lsn", sa.BigInteger(), nullable=True),
        sa.Column("last_pending_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_reason", sa.Text(), nullable=True),
        sa.Column("last_status", sa.Text(), nullable=True),
        sa.Column("pending_cycles", sa.BigInteger(), nullable=True),
        sa.Column("end_epoch", sa.String(length=64), nullable=True),
        sa.Column("end_lsn", sa.BigInteger(), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("pod", sa.Text(), nullable=True),
        sa.Column("waited_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", "first_lsn", name="pk_history_waits"),
    )
    op.create_index("ix_history_waits_first_pending", "history_waits", ["first_pending_at"])
    op.create_index("ix_history_waits_open", "history_waits", ["namespace", "run_uid"], unique=True, sqlite_where=sa.text("end_lsn IS NULL"), postgresql_where=sa.text("end_lsn IS NULL"))
    op.create_index("ix_history_waits_run", "history_waits", ["namespace", "run"])
    op.create_index("ix_history_waits_waited", "history_waits", ["outcome", "waited_us"])
    op.create_table(
        "history_pod_hours",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("pod", sa.Text(), nullable=False),
        sa.Column("hour", sa.String(length=16), nullable=False),
        sa.Column("placements", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("namespace", "pod", "hour", name="pk_history_pod_hours"),
    )
    op.create_table(
        "history_rejection_hours",
        sa.Column("hour", sa.String(length=16), nullable=False),
        sa.Column("plugin", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("pods", sa.BigInteger(), nullable=True),
        sa.Column("cycles", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("hour", "plugin", "reason", name="pk_history_rejection_hours"),
    )
    op.create_table(
        "history_epochs",
        sa.Column("epoch", sa.String(length=64), nullable=False),
        sa.Column("cycles", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("epoch", name="pk_history_epochs"),
    )
    from kruntimes.journal import backends, derived  # the writer's own derivation, applied to what is stored

    # The live derivation writes the newest revision's columns: when a later revision added some,
    # the tables are filled there (it rebuilds them), not here.
    if derived.written_columns_exist(op.get_bind()):
        backends.rebuild_history(op.get_bind())
    dialect = op.get_context().dialect.name
    for name in VIEWS:
        definition = _CANDIDATES[dialect] if name == "cycle_candidates" else _COMMON[name]
        op.execute(f"CREATE VIEW {name} AS {definition.strip()}")


def downgrade() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name in reversed(TABLES):
        op.drop_table(name)
    # The views as they were: the previous revision's definitions, frozen there.
    path = Path(__file__).with_name("0002_history_views.py")
    spec = importlib.util.spec_from_file_location("_kruntimes_history_views_0002", path)
    assert spec is not None and spec.loader is not None
    previous = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(previous)
    previous.upgrade()
