"""The web view's look-ups through the typed history tables (issue 15).

Why a module of its own: these are the questions ``queries`` asks when the tables are
there, each answered by one of their indexes instead of a scan of the records. They
return keys and plain rows; ``queries`` fetches records by key and folds the rows into
the same ``Window`` and ``Bar`` values the records give (``tests/ui/test_tables.py``
holds both to the same pages). Only the columns read here are declared, so this module
depends on the tables' names and columns, not on the writer's code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from kruntimes.journal import schema

Execute = Callable[[sa.Executable], Sequence[sa.Row[Any]]]
Key = tuple[str, int]  # (epoch, lsn): the epoch is the record's incarnation
TERMINAL = ("Failed", "Succeeded")


def _table(name: str, *columns: str, times: tuple[str, ...] = ()) -> sa.TableClause:
    return sa.table(name, *(sa.column(c) for c in columns), *(sa.column(c, schema.UtcDateTime()) for c in times))


CYCLES = _table("history_cycles", "epoch", "lsn", "namespace", "run", "run_uid", "status", "message",
                times=("decided_at",))
REJECTIONS = _table("history_rejections", "epoch", "lsn", "reason")
PLACEMENTS = _table("history_placements", "epoch", "lsn", "namespace", "run", "run_uid", "pod", "outcome",
                    "end_epoch", "end_lsn", "end_reason", times=("decided_at", "ended_at"))
PODS = _table("history_pods", "epoch", "lsn", "event", "namespace", "name", "runtime", "ready", "terminating",
              "heartbeat", "capacity", times=("recorded_at",))
RUNS = _table("history_runs", "epoch", "lsn", "event", "namespace", "name", "uid", "phase", times=("recorded_at",))
BINDS = _table("history_binds", "epoch", "lsn", "namespace", "run_uid", "result", times=("recorded_at",))


def present(engine: sa.Engine) -> bool:
    """Whether the journal has the tables (a schema with the history-tables revision)."""
    return sa.inspect(engine).has_table(CYCLES.name)


def run_keys(execute: Execute, namespace: str, name: str, limit: int) -> set[Key]:
    """The Run's cycles and observations (by name), then its binds (by UID) and the records that ended
    its placements (a release, an end, a newer placement)."""
    keys: set[Key] = set()
    uids: set[str] = set()
    for table, column, uid in ((CYCLES, CYCLES.c.run, CYCLES.c.run_uid), (RUNS, RUNS.c.name, RUNS.c.uid)):
        stmt = (sa.select(table.c.epoch, table.c.lsn, uid).where(table.c.namespace == namespace, column == name)
                .order_by(table.c.lsn.desc()).limit(limit))
        for epoch, lsn, run_uid in execute(stmt):
            keys.add((epoch, lsn))
            uids.add(run_uid)
    if uids:
        binds = sa.select(BINDS.c.epoch, BINDS.c.lsn).where(BINDS.c.namespace == namespace,
                                                             BINDS.c.run_uid.in_(sorted(uids)))
        ends = sa.select(PLACEMENTS.c.end_epoch, PLACEMENTS.c.end_lsn).where(
            PLACEMENTS.c.namespace == namespace, PLACEMENTS.c.run == name, PLACEMENTS.c.end_lsn.is_not(None))
        keys.update((epoch, lsn) for epoch, lsn in execute(binds))
        keys.update((epoch, lsn) for epoch, lsn in execute(ends))
    return keys


def pod_key(execute: Execute, namespace: str, name: str, at: datetime) -> list[Key]:
    """The pod's newest observation at or before ``at``."""
    stmt = (sa.select(PODS.c.epoch, PODS.c.lsn)
            .where(PODS.c.namespace == namespace, PODS.c.name == name, PODS.c.recorded_at <= at)
            .order_by(PODS.c.recorded_at.desc(), PODS.c.lsn.desc()).limit(1))
    return [(epoch, lsn) for epoch, lsn in execute(stmt)]


def held(execute: Execute, namespace: str, pod: str, at: datetime) -> Sequence[sa.Row[Any]]:
    """(run, run_uid, placed, ended, why, lsn) of the placements on the pod that had begun and not ended at ``at``."""
    p = PLACEMENTS
    stmt = (sa.select(p.c.run, p.c.run_uid, p.c.decided_at, p.c.ended_at, p.c.end_reason, p.c.lsn)
            .where(p.c.namespace == namespace, p.c.pod == pod, p.c.outcome == "scheduled", p.c.decided_at <= at,
                   sa.or_(p.c.ended_at.is_(None), p.c.ended_at > at))
            .order_by(p.c.decided_at, p.c.lsn))
    return execute(stmt)


def run_key(execute: Execute, namespace: str, uid: str, at: datetime) -> list[Key]:
    """The Run's newest observation at or before ``at`` (it says what the Run requests)."""
    stmt = (sa.select(RUNS.c.epoch, RUNS.c.lsn)
            .where(RUNS.c.namespace == namespace, RUNS.c.uid == uid, RUNS.c.recorded_at <= at)
            .order_by(RUNS.c.lsn.desc()).limit(1))
    return [(epoch, lsn) for epoch, lsn in execute(stmt)]


def window_events(execute: Execute, epochs: Sequence[str], after: int, upto: int) -> list[tuple[Any, ...]]:
    """Pods added or deleted and Runs ended with LSN in ``(after, upto]``, as the window's fold takes them.

    ``("pod", lsn, at, event, namespace, name, object)`` and ``("end", lsn, at, uid, why)``.
    """
    pods = (sa.select(PODS.c.lsn, PODS.c.recorded_at, PODS.c.event, PODS.c.namespace, PODS.c.name, PODS.c.runtime,
                      PODS.c.capacity, PODS.c.ready, PODS.c.terminating, PODS.c.heartbeat)
            .where(PODS.c.epoch.in_(epochs), PODS.c.lsn > after, PODS.c.lsn <= upto,
                   PODS.c.event.in_(("ADDED", "DELETED"))))
    events: list[tuple[Any, ...]] = [
        ("pod", lsn, at, event, namespace, name,
         {"runtime": runtime, "capacity": orjson.loads(capacity) if capacity else (), "ready": ready,
          "terminating": terminating, "heartbeat": heartbeat})
        for lsn, at, event, namespace, name, runtime, capacity, ready, terminating, heartbeat in execute(pods)]
    # A Run deleted after it ended was closed by the modification that ended it.
    ends = (sa.select(RUNS.c.lsn, RUNS.c.recorded_at, RUNS.c.event, RUNS.c.uid, RUNS.c.phase)
            .where(RUNS.c.epoch.in_(epochs), RUNS.c.lsn > after, RUNS.c.lsn <= upto,
                   sa.or_(sa.and_(RUNS.c.event == "MODIFIED", RUNS.c.phase.in_(TERMINAL)),
                          sa.and_(RUNS.c.event == "DELETED", RUNS.c.phase.not_in(TERMINAL)))))
    events += [("end", lsn, at, uid, "deleted" if event == "DELETED" else str(phase))
               for lsn, at, event, uid, phase in execute(ends)]
    return events


def binds(execute: Execute, since: datetime, until: datetime) -> list[tuple[datetime, str]]:
    stmt = (sa.select(BINDS.c.recorded_at, BINDS.c.result)
            .where(BINDS.c.recorded_at >= since, BINDS.c.recorded_at < until).order_by(BINDS.c.recorded_at))
    return [(at, str(result)) for at, result in execute(stmt)]


def pending(execute: Execute, since: datetime, until: datetime) -> list[tuple[datetime, str, str]]:
    """(decided_at, reason, run_uid) per reason of every cycle in the window that left its Run Pending."""
    c, r = CYCLES, REJECTIONS
    stmt = (sa.select(c.c.decided_at, c.c.run_uid, c.c.message, r.c.reason)
            .select_from(c.outerjoin(r, sa.and_(r.c.epoch == c.c.epoch, r.c.lsn == c.c.lsn)))
            .where(c.c.decided_at >= since, c.c.decided_at < until, c.c.status == "unschedulable")
            .order_by(c.c.lsn))
    seen: dict[tuple[datetime, str, str], None] = {}
    for at, uid, message, reason in execute(stmt):
        seen.setdefault((at, str(reason or message or "unschedulable"), str(uid)))
    return list(seen)
