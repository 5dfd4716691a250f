"""The history tables: their definitions, and what a revision asks of them before it fills them.

The tables are typed, indexed rows derived from ``journal_records`` (``derive`` says how
each record becomes rows); they belong to the journal's metadata, so Alembic and the
schema checks see them beside the records.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import BigInteger, Boolean, Column, Index, Integer, String, Table, Text

from kruntimes.journal.store import schema

# -- the tables ------------------------------------------------------------------------------

_md = schema.metadata


def _key() -> list[Column[Any]]:
    return [Column("epoch", String(64), primary_key=True), Column("lsn", BigInteger, primary_key=True,
                                                                    autoincrement=False)]


def _t(name: str) -> Column[Any]:
    return Column(name, Text)


def _i(name: str) -> Column[Any]:
    return Column(name, BigInteger)


def _at(name: str, nullable: bool = True) -> Column[Any]:
    return Column(name, schema.UtcDateTime(), nullable=nullable)


cycles = Table(
    "history_cycles", _md, *_key(), _at("decided_at", False), _t("namespace"), _t("run"), _t("run_uid"),
    _i("snapshot_lsn"), _t("now"), _t("status"), _t("result"), _t("chosen"), _t("chosen_uid"), _i("total"),
    _t("message"), _i("pods_evaluated"), _i("pods_feasible"), _i("duration_us"), _t("digest"),
    _t("planner_version"), _t("config_hash"),
    Index("ix_history_cycles_run", "namespace", "run", "lsn"),
    Index("ix_history_cycles_run_uid", "namespace", "run_uid", "lsn"),
    Index("ix_history_cycles_decided_at", "decided_at"),
    Index("ix_history_cycles_duration", "duration_us"),
)

candidates = Table(
    "history_candidates", _md, *_key(), Column("rank", Integer, primary_key=True, autoincrement=False),
    _t("pod"), _i("total"), _t("plugin_scores"),
)

rejections = Table(
    "history_rejections", _md, *_key(), Column("position", Integer, primary_key=True, autoincrement=False),
    _at("decided_at", False), _t("namespace"), _t("run"), _t("run_uid"), _t("status"), _t("result"),
    _t("plugin"), _t("reason"), _i("pods"),
    Index("ix_history_rejections_reason", "reason", "status", "decided_at"),
)

placements = Table(
    "history_placements", _md, *_key(), _at("decided_at", False), _t("namespace"), _t("run"), _t("run_uid"),
    _t("pod"), _t("pod_uid"), _t("now"), _i("total"), _t("outcome"), _i("snapshot_lsn"),
    Column("end_epoch", String(64)), _i("end_lsn"), _at("ended_at"), _t("end_reason"),
    # What the Run's reservation charged the pod (compact JSON ``[[resource, amount]]``; revision 0005).
    _t("requests"),
    # A scheduled placement's previous cycle (the Run's latest of the same epoch before
    # it), its result and top candidate: the writer's ``previous.link`` (revision 0006).
    _i("previous_lsn"), _t("previous_result"), _t("previous_top"),
    Index("ix_history_placements_run", "namespace", "run", "lsn"),
    Index("ix_history_placements_pod", "namespace", "pod", "decided_at"),
    Index("ix_history_placements_decided_at", "decided_at"),
    # The placement a Run holds now, if any: what an end (its deletion, ...) closes.
    Index("ix_history_placements_open", "namespace", "run_uid",
          sqlite_where=sa.text("outcome = 'scheduled' AND end_lsn IS NULL"),
          postgresql_where=sa.text("outcome = 'scheduled' AND end_lsn IS NULL")),
    # Churn: the placements that went elsewhere than their previous cycle's top candidate.
    Index("ix_history_placements_churn", "decided_at",
          sqlite_where=sa.text("outcome = 'scheduled' AND previous_top <> pod"),
          postgresql_where=sa.text("outcome = 'scheduled' AND previous_top <> pod")),
)

waits = Table(
    "history_waits", _md, Column("epoch", String(64), primary_key=True),
    Column("first_lsn", BigInteger, primary_key=True, autoincrement=False),
    _t("namespace"), _t("run"), _t("run_uid"), _at("first_pending_at", False), _i("first_pending_us"),
    _t("first_reason"), Column("last_epoch", String(64)), _i("last_lsn"), _at("last_pending_at"),
    _t("last_reason"), _t("last_status"), _i("pending_cycles"),
    Column("end_epoch", String(64)), _i("end_lsn"), _at("ended_at"), _t("outcome"), _t("pod"), _i("waited_us"),
    # At most one open episode per Run: the pending cycles of a batch extend it in place.
    Index("ix_history_waits_open", "namespace", "run_uid", unique=True,
          sqlite_where=sa.text("end_lsn IS NULL"), postgresql_where=sa.text("end_lsn IS NULL")),
    Index("ix_history_waits_run", "namespace", "run"),
    Index("ix_history_waits_waited", "outcome", "waited_us"),
    Index("ix_history_waits_first_pending", "first_pending_at"),
)

pods = Table(
    "history_pods", _md, *_key(), _at("recorded_at", False), _t("event"), _t("namespace"), _t("name"), _t("uid"),
    _t("runtime"), _t("resource_version"), Column("ready", Boolean), Column("terminating", Boolean),
    _t("heartbeat"), _t("capacity"), _t("capacity_problem"),
    Index("ix_history_pods_name", "namespace", "name", "recorded_at"),
)

runs = Table(
    "history_runs", _md, *_key(), _at("recorded_at", False), _t("event"), _t("namespace"), _t("name"), _t("uid"),
    _t("runtime"), _t("resource_version"), _t("phase"), _t("pod_name"), _t("pending_message"),
    _t("end_reason"), _t("end_message"),  # why a terminal Run ended (0009_run_end_reason)
    Index("ix_history_runs_uid", "namespace", "uid", "lsn"),
)

binds = Table(
    "history_binds", _md, *_key(), _at("recorded_at", False), _t("namespace"), _t("run_uid"), _t("result"),
    _t("error"),
    Index("ix_history_binds_run", "namespace", "run_uid", "lsn"),
    Index("ix_history_binds_recorded_at", "recorded_at", "result"),
)

pod_hours = Table(
    "history_pod_hours", _md, Column("namespace", Text, primary_key=True), Column("pod", Text, primary_key=True),
    Column("hour", String(16), primary_key=True), _i("placements"),
)

rejection_hours = Table(
    "history_rejection_hours", _md, Column("hour", String(16), primary_key=True),
    Column("plugin", Text, primary_key=True), Column("reason", Text, primary_key=True), _i("pods"), _i("cycles"),
)

epochs = Table(
    "history_epochs", _md, Column("epoch", String(64), primary_key=True), _i("cycles"),
)

#: Rows a single record yields, in insert order (a placement before what ends it).
ROW_TABLES: tuple[Table, ...] = (cycles, candidates, rejections, placements, pods, runs, binds)
TABLES: tuple[Table, ...] = (*ROW_TABLES, waits, pod_hours, rejection_hours, epochs)
TABLE_NAMES = tuple(t.name for t in TABLES)
#: The columns of each row table, in order. A row may stop short of its table's last
#: columns: ``derive`` leaves a placement's previous cycle (``previous``) out, and the
#: backends insert only the columns a batch's rows give.
COLUMNS: dict[str, tuple[str, ...]] = {t.name: tuple(c.name for c in t.columns) for t in ROW_TABLES}
#: PostgreSQL COPY types per row table.
COPY_TYPES: dict[str, list[str]] = {
    t.name: ["timestamptz" if isinstance(c.type, schema.UtcDateTime) else "bool" if isinstance(c.type, Boolean)
             else "int8" if isinstance(c.type, BigInteger) else "int4" if isinstance(c.type, Integer) else "text"
             for c in t.columns]
    for t in ROW_TABLES}



def written_columns_exist(conn: sa.Connection) -> bool:
    """Whether the database's history tables have every column this derivation writes.

    A revision that backfills the tables with the live derivation asks this first: when a
    later revision added columns, it leaves the backfill to that one (which rebuilds).
    """
    inspector = sa.inspect(conn)
    return all({c["name"] for c in inspector.get_columns(t.name)} >= set(COLUMNS[t.name]) for t in ROW_TABLES)


def left_empty(conn: sa.Connection) -> bool:
    """Records that have history rows are stored, yet no history row is: ``0004`` left its backfill
    to a later revision (it does when the live derivation writes columns its tables lack)."""
    if conn.execute(sa.text("SELECT 1 FROM journal_records WHERE kind IN ('cycle', 'mutation', 'bind') LIMIT 1")) \
            .first() is None:
        return False
    return not any(conn.execute(sa.text(f"SELECT 1 FROM {table} LIMIT 1")).first()
                   for table in ("history_cycles", "history_pods", "history_runs", "history_binds"))
