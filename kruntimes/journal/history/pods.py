"""A Runtime Pod in the history: what the scheduler saw of it, which cycles chose it, what it held at a time.

"What did pod P hold at T" is one query here (``pod_held``), read by ``kruntimes history
held`` and by the web view's pod page alike; so is "what did the scheduler see of P at
T" (``pod_observations`` with ``at`` and ``limit=1``). Each is an index range of the pod's
rows in ``history_placements`` or ``history_pods``, by time, then epoch order, then LSN.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kruntimes.journal.history import buckets, read, runs, stored, tables, windows
from kruntimes.journal.store import backends


def pod_observations(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                     limit: int | None = None) -> list[dict[str, Any]]:
    """What the scheduler saw of a pod, oldest first: every observation, or the newest ``limit``.

    With ``at``, only observations recorded at or before that instant, so ``limit=1``
    answers "what did the scheduler see of pod P at time T". Each row has its record's
    key, ``epoch`` and ``lsn``.
    """
    o = tables.pods
    stmt = (sa.select(o.c.epoch, o.c.lsn, o.c.recorded_at, o.c.event, o.c.runtime, o.c.ready, o.c.terminating,
                      o.c.heartbeat, o.c.capacity, o.c.capacity_problem)
            .where(o.c.namespace == namespace, o.c.name == name))
    return _latest(journal, stmt, o.c.recorded_at, o.c.epoch, o.c.lsn, at, limit)


def _latest(journal: backends.Journal, stmt: sa.Select[Any], when: Any, epoch: Any, lsn: Any, at: datetime | None,
            limit: int | None) -> list[dict[str, Any]]:
    """The newest ``limit`` rows of ``stmt`` up to ``at`` (by time, epoch order, LSN), returned oldest first."""
    stmt = stmt.order_by(*read.order_by(journal, when, epoch, lsn, newest_first=True))
    if at is not None:
        stmt = stmt.where(when <= at)
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(read.rows(journal, stmt)))


def pod_placements(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                   limit: int | None = None) -> list[dict[str, Any]]:
    """Cycles that chose this pod (scheduled, or lost to a conflict or error), oldest first; up to ``at``."""
    p = tables.placements
    stmt = (sa.select(p.c.lsn, p.c.decided_at, p.c.run, runs.runtime(p), p.c.total, p.c.outcome)
            .where(p.c.namespace == namespace, p.c.pod == name))
    return _latest(journal, stmt, p.c.decided_at, p.c.epoch, p.c.lsn, at, limit)


def pod_history(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                limit: int | None = None) -> dict[str, Any]:
    """A pod's observations and the cycles that chose it; with ``at``, as of that instant.

    The document ``kruntimes history pod`` prints: observations without their epoch, as it always has.
    """
    seen = pod_observations(journal, namespace, name, at=at, limit=1 if at else limit)
    return {
        "namespace": namespace, "pod": name, "at": at,
        "observations": [{k: v for k, v in o.items() if k != "epoch"} for o in seen],
        "placements": pod_placements(journal, namespace, name, at=at, limit=limit),
    }


def pod_held(journal: backends.Journal, namespace: str, name: str, at: datetime) -> list[dict[str, Any]]:
    """The Runs placed on the pod at ``at``: placed at or before it and not yet ended then, oldest first.

    A placement ends when its Run succeeds, fails, is deleted or is placed again. Each
    row has what the Run's reservation charged the pod (``requests``, compact JSON).
    """
    p = tables.placements
    stmt = (sa.select(p.c.epoch, p.c.lsn, p.c.decided_at.label("placed_at"), p.c.run, p.c.run_uid, runs.runtime(p),
                      p.c.total, p.c.ended_at, p.c.end_reason, p.c.requests)
            .where(p.c.namespace == namespace, p.c.pod == name, p.c.outcome == "scheduled", p.c.decided_at <= at,
                   sa.or_(p.c.ended_at.is_(None), p.c.ended_at > at))
            .order_by(*read.order_by(journal, p.c.decided_at, p.c.epoch, p.c.lsn)))
    return read.rows(journal, stmt)


def pod_observation(journal: backends.Journal, namespace: str, name: str, at: datetime) -> stored.Record | None:
    """The newest mutation of the pod recorded at or before ``at`` (or its entry in the checkpoint a prune kept,
    when its older observations are gone), as the record itself."""
    seen = pod_observations(journal, namespace, name, at=at, limit=1)
    found = stored.by_keys(journal, [(o["epoch"], o["lsn"]) for o in seen])
    if found:
        return found[0]
    checkpoint = stored.checkpoint_before(journal, at)
    if checkpoint is None:
        return None
    for pod in checkpoint.payload.get("pods", ()):
        if pod.get("namespace") == namespace and pod.get("name") == name:
            return stored.Record(checkpoint.lsn, checkpoint.at, "checkpoint", checkpoint.incarnation,
                                 {"event": "CHECKPOINT", "object": pod})
    return None


def pod_runs(journal: backends.Journal, namespace: str, name: str, at: datetime) -> list[windows.Bar]:
    """The Runs placed on the pod at ``at`` (``pod_held``) as bars, each with what its reservation charged."""
    return [windows.Bar(namespace, p["run"], p["run_uid"], name,
                        dict(buckets.amounts(p["requests"])) if p["requests"] else {}, p["placed_at"], p["ended_at"],
                        str(p["end_reason"] or ""), p["lsn"])
            for p in pod_held(journal, namespace, name, at)]


def held_devices(journal: backends.Journal, namespace: str, name: str, at: datetime) -> dict[str, Any]:
    """Run uid → the devices its placing cycle chose (SPEC §7.8), for the Runs the pod held at ``at``.

    The placements ``pod_held`` reads, then their cycle records by key; a Run without a claim is absent."""
    keys = {(p["epoch"], p["lsn"]): p["run_uid"] for p in pod_held(journal, namespace, name, at)}
    found: dict[str, Any] = {}
    for rec in stored.by_keys(journal, keys):
        devices = rec.payload.get("devices") if rec.kind == "cycle" else None
        if isinstance(devices, dict) and devices.get("chosen") is not None:
            found[keys[(rec.incarnation, rec.lsn)]] = devices["chosen"]
    return found
