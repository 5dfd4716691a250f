"""The web view's look-ups through the typed history tables (issue 15).

Why a module of its own: these are the questions ``queries`` asks of the tables, each
answered by one of their indexes. They return keys and plain rows; ``queries``
fetches records by key and folds the rows into ``Window`` and ``Bar`` values. Only the
columns read here are declared, so this module depends on the tables' names and
columns (``kruntimes.journal.derived``), not on the writer's code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from kruntimes.journal.history import order as epoch_order
from kruntimes.journal.store import schema

Execute = Callable[[sa.Executable], Sequence[sa.Row[Any]]]
Key = tuple[str, int]  # (epoch, lsn): the epoch is the record's incarnation


def _table(name: str, *columns: str, times: tuple[str, ...] = ()) -> sa.TableClause:
    return sa.table(name, *(sa.column(c) for c in columns), *(sa.column(c, schema.UtcDateTime()) for c in times))


CYCLES = _table("history_cycles", "epoch", "lsn", "namespace", "run", "run_uid", "status", "message",
                times=("decided_at",))
REJECTIONS = _table("history_rejections", "epoch", "lsn", "reason")
PLACEMENTS = _table("history_placements", "epoch", "lsn", "namespace", "run", "run_uid", "pod", "outcome",
                    "end_epoch", "end_lsn", "end_reason", "requests", times=("decided_at", "ended_at"))
PODS = _table("history_pods", "epoch", "lsn", "event", "namespace", "name", "runtime", "ready", "terminating",
              "heartbeat", "capacity", times=("recorded_at",))
RUNS = _table("history_runs", "epoch", "lsn", "event", "namespace", "name", "uid", "phase", times=("recorded_at",))
BINDS = _table("history_binds", "epoch", "lsn", "namespace", "run_uid", "result", times=("recorded_at",))


def run_keys(execute: Execute, namespace: str, name: str, limit: int) -> set[Key]:
    """The Run's cycles (by name), then by its UIDs its observations and binds, and the records that
    ended its placements (a release, an end, a newer placement); of each, the newest ``limit``.

    Newest by time, then (epoch, LSN): LSNs overlap between epochs begun while the
    database was away, so the highest LSNs may be an older epoch's.
    """
    c = CYCLES
    stmt = (sa.select(c.c.epoch, c.c.lsn, c.c.run_uid).where(c.c.namespace == namespace, c.c.run == name)
            .order_by(c.c.decided_at.desc(), c.c.epoch.desc(), c.c.lsn.desc()).limit(limit))
    keys: set[Key] = set()
    uids: set[str] = set()
    for epoch, lsn, run_uid in execute(stmt):
        keys.add((epoch, lsn))
        uids.add(run_uid)
    if uids:
        for table, column in ((RUNS, RUNS.c.uid), (BINDS, BINDS.c.run_uid)):
            stmt = (sa.select(table.c.epoch, table.c.lsn).where(table.c.namespace == namespace,
                                                                 column.in_(sorted(uids)))
                    .order_by(table.c.recorded_at.desc(), table.c.epoch.desc(), table.c.lsn.desc()).limit(limit))
            keys.update((epoch, lsn) for epoch, lsn in execute(stmt))
        ends = sa.select(PLACEMENTS.c.end_epoch, PLACEMENTS.c.end_lsn).where(
            PLACEMENTS.c.namespace == namespace, PLACEMENTS.c.run == name, PLACEMENTS.c.end_lsn.is_not(None))
        keys.update((epoch, lsn) for epoch, lsn in execute(ends))
    return keys


def pod_key(execute: Execute, namespace: str, name: str, at: datetime, epochs: Sequence[str]) -> list[Key]:
    """The pod's newest observation at or before ``at``: by time, then epoch order (``epochs``, oldest first),
    then LSN."""
    stmt = (sa.select(PODS.c.epoch, PODS.c.lsn)
            .where(PODS.c.namespace == namespace, PODS.c.name == name, PODS.c.recorded_at <= at)
            .order_by(*epoch_order.order(PODS.c.recorded_at, PODS.c.epoch, PODS.c.lsn, epochs, newest_first=True))
            .limit(1))
    return [(epoch, lsn) for epoch, lsn in execute(stmt)]


def held(execute: Execute, namespace: str, pod: str, at: datetime, epochs: Sequence[str]) -> Sequence[sa.Row[Any]]:
    """(run, run_uid, placed, ended, why, lsn, requests) of the placements on the pod that had begun and not
    ended at ``at``, by time, then epoch order (``epochs``, oldest first), then LSN."""
    p = PLACEMENTS
    stmt = (sa.select(p.c.run, p.c.run_uid, p.c.decided_at, p.c.ended_at, p.c.end_reason, p.c.lsn, p.c.requests)
            .where(p.c.namespace == namespace, p.c.pod == pod, p.c.outcome == "scheduled", p.c.decided_at <= at,
                   sa.or_(p.c.ended_at.is_(None), p.c.ended_at > at))
            .order_by(*epoch_order.order(p.c.decided_at, p.c.epoch, p.c.lsn, epochs)))
    return execute(stmt)


def pod_events(execute: Execute, epochs: Sequence[str], after: epoch_order.Cut,
               upto: epoch_order.Cut) -> list[tuple[Any, ...]]:
    """Pods added or deleted after ``after`` and within ``upto`` (per epoch, LSN ranges):
    ``(lsn, at, event, namespace, name, object)`` by time, then epoch order (``epochs``, oldest first), then LSN.

    A key range of ``history_pods`` per epoch (from the window's starting checkpoint on), not a scan.
    """
    pods = (sa.select(PODS.c.lsn, PODS.c.recorded_at, PODS.c.event, PODS.c.namespace, PODS.c.name, PODS.c.runtime,
                      PODS.c.capacity, PODS.c.ready, PODS.c.terminating, PODS.c.heartbeat)
            .where(epoch_order.between(PODS.c.epoch, PODS.c.lsn, after, upto),
                   PODS.c.event.in_(("ADDED", "DELETED")))
            .order_by(*epoch_order.order(PODS.c.recorded_at, PODS.c.epoch, PODS.c.lsn, epochs)))
    return [(lsn, at, event, namespace, name,
             {"runtime": runtime, "capacity": orjson.loads(capacity) if capacity else (), "ready": ready,
              "terminating": terminating, "heartbeat": heartbeat})
            for lsn, at, event, namespace, name, runtime, capacity, ready, terminating, heartbeat in execute(pods)]


def pods_of(p: sa.TableClause, lanes: Sequence[tuple[str, str]]) -> sa.ColumnElement[bool]:
    """``(namespace, pod)`` among ``lanes``: per namespace an IN list, which the indexes on both serve."""
    by_namespace: dict[str, list[str]] = {}
    for namespace, name in lanes:
        by_namespace.setdefault(namespace, []).append(name)
    return sa.or_(sa.false(), *(sa.and_(p.c.namespace == ns, p.c.pod.in_(sorted(names)))
                                for ns, names in sorted(by_namespace.items())))


def bars(execute: Execute, lanes: Sequence[tuple[str, str]], since: datetime, until: datetime,
         epochs: Sequence[str]) -> Sequence[sa.Row[Any]]:
    """(namespace, pod, run, run_uid, placed, ended, why, lsn) of the Runs placed on ``lanes`` during
    ``[since, until)``: scheduled placements begun before ``until`` and not ended before ``since``, by time,
    then epoch order (``epochs``, oldest first), then LSN.

    One index range per pod (``(namespace, pod, decided_at)``): a page asks for the few
    dozen lanes it draws, never for every pod.
    """
    p = PLACEMENTS
    # Times as stored (SQLite text): the caller parses them once, cheaper than the column type.
    stmt = (sa.select(p.c.namespace, p.c.pod, p.c.run, p.c.run_uid, sa.type_coerce(p.c.decided_at, sa.String),
                      sa.type_coerce(p.c.ended_at, sa.String), p.c.end_reason, p.c.lsn)
            .where(pods_of(p, lanes), p.c.decided_at < until, p.c.outcome == "scheduled",
                   sa.or_(p.c.ended_at.is_(None), p.c.ended_at >= since))
            .order_by(*epoch_order.order(p.c.decided_at, p.c.epoch, p.c.lsn, epochs)))
    return execute(stmt)
