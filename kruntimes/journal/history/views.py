"""The history views, declared for SQLAlchemy so queries on them are typed and parameterized.

The views themselves are created by the Alembic revision ``0002_history_views`` and
redefined over the history tables (``tables``) by ``0004_history_tables``, with the same
names and columns (SQL per dialect, frozen with each revision); the query layer
(``runs``, ``pods``, ``cycles``, ...) reads the tables themselves. Here they are declared
as ``Table`` objects on the journal's metadata, marked ``info={"view": True}``, so that
a query on them is a ``select()`` with bound parameters that gets UTC datetimes, ints
and bools back on both backends. They are not tables: ``include_object`` keeps Alembic's
autogenerate from proposing to create them, and nothing may call
``metadata.create_all`` (the migrations own the DDL).

``docs/journal.md`` documents every column.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kruntimes.journal.store import schema

_INFO = {"view": True}


def _view(name: str, *columns: sa.Column[Any]) -> sa.Table:
    return sa.Table(name, schema.metadata, *columns, info=dict(_INFO))


def _col(name: str, type_: Any) -> sa.Column[Any]:
    return sa.Column(name, type_)


def _text(*names: str) -> list[sa.Column[Any]]:
    return [sa.Column(n, sa.Text) for n in names]


def _int(*names: str) -> list[sa.Column[Any]]:
    return [sa.Column(n, sa.BigInteger) for n in names]


cycles = _view(
    "cycles", _col("lsn", sa.BigInteger), *_text("incarnation"), _col("decided_at", schema.UtcDateTime()),
    *_text("namespace", "run", "run_uid"), *_int("snapshot_lsn"),
    *_text("now", "status", "result", "chosen", "chosen_uid"), *_int("total"), *_text("message"),
    *_int("pods_evaluated", "pods_feasible", "duration_us"), *_text("digest", "planner_version", "config_hash"),
)

placements = _view(
    "placements", _col("lsn", sa.BigInteger), *_text("incarnation", "namespace", "run", "run_uid", "runtime",
                                                     "pod", "pod_uid"),
    _col("decided_at", schema.UtcDateTime()), *_text("now"), *_int("total"), *_text("outcome"),
    *_int("snapshot_lsn"),
)

pending_reasons = _view(
    "pending_reasons", _col("lsn", sa.BigInteger), *_text("incarnation", "namespace", "run", "run_uid"),
    _col("decided_at", schema.UtcDateTime()), *_text("now", "result", "message"), *_int("pods_evaluated"),
)

cycle_rejections = _view(
    "cycle_rejections", _col("lsn", sa.BigInteger), _col("decided_at", schema.UtcDateTime()),
    *_text("namespace", "run", "run_uid", "status", "result", "plugin", "reason"), *_int("pods"),
)

pending_rejections = _view(
    "pending_rejections", _col("lsn", sa.BigInteger), _col("decided_at", schema.UtcDateTime()),
    *_text("namespace", "run", "run_uid", "result", "plugin", "reason"), *_int("pods"),
)

cycle_candidates = _view(
    "cycle_candidates", _col("lsn", sa.BigInteger), _col("decided_at", schema.UtcDateTime()),
    *_text("namespace", "run", "run_uid", "chosen"), *_int("rank"), *_text("pod"), *_int("total"),
    *_text("plugin", "raw"), *_int("normalized"),
)

pod_observations = _view(
    "pod_observations", _col("lsn", sa.BigInteger), _col("recorded_at", schema.UtcDateTime()),
    *_text("event", "namespace", "name", "uid", "runtime", "resource_version"),
    _col("ready", sa.Boolean), _col("terminating", sa.Boolean), *_text("heartbeat", "capacity", "capacity_problem"),
)

run_observations = _view(
    "run_observations", _col("lsn", sa.BigInteger), _col("recorded_at", schema.UtcDateTime()),
    *_text("event", "namespace", "name", "uid", "runtime", "resource_version", "phase", "pod_name",
           "pending_message"),
)

bind_results = _view(
    "bind_results", _col("lsn", sa.BigInteger), _col("recorded_at", schema.UtcDateTime()),
    *_text("namespace", "run_uid", "result", "error"),
)

VIEWS: tuple[sa.Table, ...] = (cycles, placements, pending_reasons, cycle_rejections, pending_rejections,
                               cycle_candidates, pod_observations, run_observations, bind_results)
VIEW_NAMES = frozenset(v.name for v in VIEWS)

#: The journal's metadata with the views declared on it (what Alembic compares against).
metadata = schema.metadata


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic's ``include_object`` hook: views are not tables, autogenerate leaves them alone."""
    if type_ != "table":
        return True
    if getattr(obj, "info", {}).get("view"):
        return False
    return not (reflected and name in VIEW_NAMES)
