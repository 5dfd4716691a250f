"""Placement history for people: the questions `kruntimes history` answers, over the views.

Every function here is one parameterized SQLAlchemy statement (or two) on the history
views declared in ``views`` — user input is only ever a bound parameter, never SQL
text — and returns plain dicts (datetimes are aware UTC) that the CLI prints as tables
or JSON. Nothing here is read by the scheduler: the journal is an audit log.

The same questions are written out as SQL in ``docs/journal.md`` for people at a
``sqlite3``/``psql`` prompt; the tests run those too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import backends, errors, views

OUTCOMES = ("scheduled", "unschedulable", "invalid", "conflict", "error")


def _rows(journal: backends.Journal, stmt: sa.Executable) -> list[dict[str, Any]]:
    try:
        with journal.engine.connect() as conn:
            return [dict(row) for row in conn.execute(stmt).mappings()]
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}") from exc


# -- Runs --------------------------------------------------------------------------------


def run_cycles(journal: backends.Journal, namespace: str, name: str, *,
               limit: int | None = None) -> list[dict[str, Any]]:
    """Every cycle of the Run(s) named ``namespace/name``, oldest first (the newest ``limit``)."""
    c = views.cycles
    stmt = (sa.select(c.c.lsn, c.c.decided_at, c.c.run_uid, c.c.result, c.c.chosen, c.c.total, c.c.message,
                      c.c.pods_evaluated, c.c.pods_feasible, c.c.duration_us, c.c.snapshot_lsn)
            .where(c.c.namespace == namespace, c.c.run == name).order_by(c.c.lsn.desc()))
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(_rows(journal, stmt)))


def run_placement(journal: backends.Journal, namespace: str, name: str) -> dict[str, Any] | None:
    """The Run's latest successful placement (run, runtime, pod, cycle, score), or None."""
    p = views.placements
    stmt = (sa.select(p.c.lsn, p.c.run, p.c.run_uid, p.c.runtime, p.c.pod, p.c.decided_at, p.c.now, p.c.total,
                      p.c.outcome, p.c.snapshot_lsn)
            .where(p.c.namespace == namespace, p.c.run == name, p.c.outcome == "scheduled")
            .order_by(p.c.lsn.desc()).limit(1))
    found = _rows(journal, stmt)
    return found[0] if found else None


def candidates(journal: backends.Journal, lsn: int) -> list[dict[str, Any]]:
    """The recorded candidates of cycle ``lsn``, best first, each with its per-plugin scores."""
    v = views.cycle_candidates
    stmt = (sa.select(v.c.rank, v.c.pod, v.c.total, v.c.chosen, v.c.plugin, v.c.raw, v.c.normalized)
            .where(v.c.lsn == lsn).order_by(v.c.rank, v.c.plugin))
    out: dict[int, dict[str, Any]] = {}
    for row in _rows(journal, stmt):
        entry = out.setdefault(row["rank"], {"rank": row["rank"], "pod": row["pod"], "total": row["total"],
                                             "chosen": row["pod"] == row["chosen"], "scores": []})
        if row["plugin"] is not None:
            entry["scores"].append({"plugin": row["plugin"], "raw": row["raw"], "normalized": row["normalized"]})
    return list(out.values())


def binds(journal: backends.Journal, namespace: str, run_uids: Sequence[str]) -> list[dict[str, Any]]:
    """Bind results (ok, conflict, error) of the given Run uids, oldest first."""
    if not run_uids:
        return []
    b = views.bind_results
    stmt = (sa.select(b.c.lsn, b.c.recorded_at, b.c.run_uid, b.c.result, b.c.error)
            .where(b.c.namespace == namespace, b.c.run_uid.in_(sorted(set(run_uids)))).order_by(b.c.lsn))
    return _rows(journal, stmt)


def run_history(journal: backends.Journal, namespace: str, name: str, *, limit: int | None = None) -> dict[str, Any]:
    """Everything about one Run: its cycles, binds, placement and that cycle's candidates."""
    cycles = run_cycles(journal, namespace, name, limit=limit)
    placement = run_placement(journal, namespace, name)
    return {
        "namespace": namespace, "run": name, "cycles": cycles, "placement": placement,
        "candidates": candidates(journal, placement["lsn"]) if placement else [],
        "binds": binds(journal, namespace, [c["run_uid"] for c in cycles]),
    }


# -- Runtime Pods ------------------------------------------------------------------------


def pod_observations(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                     limit: int | None = None) -> list[dict[str, Any]]:
    """What the scheduler saw of a pod, oldest first: every observation, or the newest ``limit``.

    With ``at``, only observations recorded at or before that instant, so ``limit=1``
    answers "what did the scheduler see of pod P at time T".
    """
    o = views.pod_observations
    stmt = (sa.select(o.c.lsn, o.c.recorded_at, o.c.event, o.c.runtime, o.c.ready, o.c.terminating,
                      o.c.heartbeat, o.c.capacity, o.c.capacity_problem)
            .where(o.c.namespace == namespace, o.c.name == name))
    return _latest(journal, stmt, o.c.lsn, o.c.recorded_at, at, limit)


def _latest(journal: backends.Journal, stmt: sa.Select[Any], lsn: Any, when: Any, at: datetime | None,
            limit: int | None) -> list[dict[str, Any]]:
    """The newest ``limit`` rows of ``stmt`` up to ``at``, returned oldest first."""
    stmt = stmt.order_by(lsn.desc())
    if at is not None:
        stmt = stmt.where(when <= at)
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(_rows(journal, stmt)))


def pod_placements(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                   limit: int | None = None) -> list[dict[str, Any]]:
    """Cycles that chose this pod (scheduled, or lost to a conflict or error), oldest first; up to ``at``."""
    p = views.placements
    stmt = (sa.select(p.c.lsn, p.c.decided_at, p.c.run, p.c.runtime, p.c.total, p.c.outcome)
            .where(p.c.namespace == namespace, p.c.pod == name))
    return _latest(journal, stmt, p.c.lsn, p.c.decided_at, at, limit)


def pod_history(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                limit: int | None = None) -> dict[str, Any]:
    """A pod's observations and the cycles that chose it; with ``at``, as of that instant."""
    return {
        "namespace": namespace, "pod": name, "at": at,
        "observations": pod_observations(journal, namespace, name, at=at, limit=1 if at else limit),
        "placements": pod_placements(journal, namespace, name, at=at, limit=limit),
    }


# -- cycles and reasons ------------------------------------------------------------------


def cycles(journal: backends.Journal, *, since: datetime | None = None, until: datetime | None = None,
           outcome: str | None = None, limit: int | None = 50) -> list[dict[str, Any]]:
    """Cycles decided in ``[since, until)`` with that outcome, oldest first (the newest ``limit``)."""
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    c = views.cycles
    stmt = sa.select(c.c.lsn, c.c.decided_at, c.c.namespace, c.c.run, c.c.result, c.c.chosen, c.c.total,
                     c.c.pods_evaluated, c.c.pods_feasible, c.c.duration_us, c.c.message).order_by(c.c.lsn.desc())
    if since is not None:
        stmt = stmt.where(c.c.decided_at >= since)
    if until is not None:
        stmt = stmt.where(c.c.decided_at < until)
    if outcome is not None:
        stmt = stmt.where(c.c.result == outcome)
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(_rows(journal, stmt)))


def pending_by_reason(journal: backends.Journal) -> list[dict[str, Any]]:
    """Runs whose latest cycle left them Pending, counted by the reason they were given."""
    c = views.cycles
    last = (sa.select(c.c.namespace, c.c.run_uid, sa.func.max(c.c.lsn).label("lsn"))
            .group_by(c.c.namespace, c.c.run_uid).subquery("last"))
    runs = sa.func.count().label("runs")
    stmt = (sa.select(c.c.message.label("reason"), runs)
            .join(last, last.c.lsn == c.c.lsn)
            .where(c.c.status == "unschedulable")
            .group_by(c.c.message).order_by(runs.desc(), c.c.message))
    return _rows(journal, stmt)


def latest_placement(journal: backends.Journal) -> dict[str, Any] | None:
    """The newest successful placement in the journal, or None."""
    p = views.placements
    stmt = (sa.select(p.c.lsn, p.c.namespace, p.c.run, p.c.runtime, p.c.pod, p.c.total, p.c.decided_at)
            .where(p.c.outcome == "scheduled").order_by(p.c.lsn.desc()).limit(1))
    found = _rows(journal, stmt)
    return found[0] if found else None


def examples(journal: backends.Journal) -> list[tuple[str, list[dict[str, Any]]]]:
    """Two history questions with their answers, for the end of `kruntimes demo`."""
    answers: list[tuple[str, list[dict[str, Any]]]] = []
    placed = latest_placement(journal)
    if placed is not None:
        question = (f"Why was {placed['namespace']}/{placed['run']} placed on {placed['pod']}? "
                    f"(cycle {placed['lsn']}, its recorded candidates and scores)")
        rows = [{"rank": c["rank"], "pod": c["pod"], "total": c["total"],
                 **{s["plugin"]: f"{s['normalized']} (raw {s['raw']})" for s in c["scores"]}}
                for c in candidates(journal, placed["lsn"])]
        answers.append((question, rows))
    answers.append(("Which Runs are Pending, by reason? (as of each Run's latest cycle)",
                    pending_by_reason(journal)))
    return answers
