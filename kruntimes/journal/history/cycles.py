"""Scheduling cycles of a time window: what was decided and why, which Runs wait by which reason, churn,
conflicts and binds that did not land.

``kruntimes history cycles|decisions|churn|conflicts`` print these; ``examples`` are the
two questions the demo ends with. Each is one parameterized statement on the history
tables, by time, then epoch order, then LSN.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kruntimes.journal.history import read, runs, tables
from kruntimes.journal.store import backends

OUTCOMES = ("scheduled", "unschedulable", "invalid", "conflict", "error")
#: Bind results whose outcome was a lost race or is not known.
TROUBLED_BINDS = ("conflict", "unknown", "error")


def _window(stmt: sa.Select[Any], column: Any, since: datetime | None, until: datetime | None) -> sa.Select[Any]:
    if since is not None:
        stmt = stmt.where(column >= since)
    if until is not None:
        stmt = stmt.where(column < until)
    return stmt


def cycles(journal: backends.Journal, *, since: datetime | None = None, until: datetime | None = None,
           outcome: str | None = None, limit: int | None = 50) -> list[dict[str, Any]]:
    """Cycles decided in ``[since, until)`` with that outcome, oldest first (the newest ``limit``)."""
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    c = tables.cycles
    stmt = sa.select(c.c.lsn, c.c.decided_at, c.c.namespace, c.c.run, c.c.result, c.c.chosen, c.c.total,
                     c.c.pods_evaluated, c.c.pods_feasible, c.c.duration_us, c.c.message
                     ).order_by(*read.order_by(journal, c.c.decided_at, c.c.epoch, c.c.lsn, newest_first=True))
    stmt = _window(stmt, c.c.decided_at, since, until)
    if outcome is not None:
        stmt = stmt.where(c.c.result == outcome)
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(read.rows(journal, stmt)))


def decision_reason(cycle: dict[str, Any]) -> str:
    """Why a cycle decided what it did, in one line: its message, else how its pod won."""
    if cycle.get("message"):
        return str(cycle["message"])
    if cycle.get("chosen") is not None:
        won = f"highest total {cycle['total']} of {cycle['pods_feasible']}/{cycle['pods_evaluated']} feasible pods"
        if cycle.get("result") == "scheduled":
            return won
        return f"{won}; the reservation or status write lost ({cycle.get('result')})"
    return str(cycle.get("result") or "")


def decisions(journal: backends.Journal, *, since: datetime, until: datetime,
              limit: int | None = None) -> list[dict[str, Any]]:
    """Every cycle decided in ``[since, until)``, oldest first, each with its reason (``decision_reason``)."""
    c = tables.cycles
    stmt = _window(sa.select(c.c.epoch, c.c.lsn, c.c.decided_at, c.c.namespace, c.c.run, c.c.status, c.c.result,
                             c.c.chosen, c.c.total, c.c.pods_evaluated, c.c.pods_feasible, c.c.message),
                   c.c.decided_at, since, until)
    stmt = stmt.order_by(*read.order_by(journal, c.c.decided_at, c.c.epoch, c.c.lsn))
    if limit is not None:
        stmt = stmt.limit(limit)
    found = read.rows(journal, stmt)
    for row in found:
        row["reason"] = decision_reason(row)
    return found


def pending_by_reason(journal: backends.Journal) -> list[dict[str, Any]]:
    """Runs whose latest cycle left them Pending, counted by the reason they were given.

    A Run deleted since, placed since or found invalid no longer counts.
    """
    w = tables.waits
    counted = sa.func.count().label("runs")
    stmt = (sa.select(w.c.last_reason.label("reason"), counted)
            .where(w.c.end_lsn.is_(None), w.c.last_status == "unschedulable")
            .group_by(w.c.last_reason).order_by(counted.desc(), w.c.last_reason))
    return read.rows(journal, stmt)


def churn(journal: backends.Journal, *, since: datetime | None = None, until: datetime | None = None,
          limit: int | None = 50) -> list[dict[str, Any]]:
    """Runs placed on another pod than the top candidate of their previous cycle, oldest first.

    The previous cycle is the Run's latest cycle of the same epoch before the placing
    one: usually a choice that lost a race (a conflict), whose top pod then went
    elsewhere. The writer stores it with the placement (``history.previous``)
    and a partial index holds the placements that went elsewhere, so this reads only
    its answer; the previous top candidate's total is one look-up per answered row.
    """
    p, k = tables.placements, tables.candidates
    top_total = (sa.select(k.c.total).where(k.c.epoch == p.c.epoch, k.c.lsn == p.c.previous_lsn, k.c.rank == 1)
                 .scalar_subquery())
    # Literals, as the partial index ix_history_placements_churn states them, so both databases use it.
    stmt = _window(sa.select(p.c.epoch, p.c.lsn, p.c.decided_at, p.c.namespace, p.c.run, p.c.pod, p.c.total,
                             p.c.previous_lsn, p.c.previous_result, p.c.previous_top,
                             top_total.label("previous_top_total"))
                   .where(p.c.outcome == sa.literal_column("'scheduled'"), p.c.previous_top != p.c.pod),
                   p.c.decided_at, since, until)
    stmt = stmt.order_by(*read.order_by(journal, p.c.decided_at, p.c.epoch, p.c.lsn, newest_first=True))
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(read.rows(journal, stmt)))


def conflicts(journal: backends.Journal, *, since: datetime | None = None, until: datetime | None = None,
              limit: int | None = 100) -> list[dict[str, Any]]:
    """Cycles that lost a race (result ``conflict``) and binds that did not land or whose outcome is unknown.

    Oldest first, the newest ``limit``; ``what`` says which: ``cycle conflict``,
    ``bind conflict``, ``bind unknown`` (ambiguous: the status write may have landed),
    ``bind error``.
    """
    c, b = tables.cycles, tables.binds
    lost = _window(sa.select(c.c.epoch, c.c.lsn, c.c.decided_at.label("at"), c.c.namespace, c.c.run, c.c.run_uid,
                             sa.literal("cycle conflict").label("what"), c.c.chosen.label("pod"),
                             c.c.message.label("detail"))
                   .where(c.c.result == "conflict"), c.c.decided_at, since, until)
    named = (sa.select(c.c.run).where(c.c.namespace == b.c.namespace, c.c.run_uid == b.c.run_uid)
             .order_by(*read.order_by(journal, c.c.decided_at, c.c.epoch, c.c.lsn, newest_first=True)).limit(1)
             .scalar_subquery())
    binds_ = _window(sa.select(b.c.epoch, b.c.lsn, b.c.recorded_at.label("at"), b.c.namespace, named.label("run"),
                               b.c.run_uid, ("bind " + b.c.result).label("what"), sa.null().label("pod"),
                               b.c.error.label("detail"))
                     .where(b.c.result.in_(TROUBLED_BINDS)), b.c.recorded_at, since, until)
    both = sa.union_all(lost, binds_).subquery()
    stmt = sa.select(both).order_by(*read.order_by(journal, both.c.at, both.c.epoch, both.c.lsn, newest_first=True))
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(read.rows(journal, stmt)))


def examples(journal: backends.Journal) -> list[tuple[str, list[dict[str, Any]]]]:
    """Two history questions with their answers, for the end of `kruntimes demo`."""
    answers: list[tuple[str, list[dict[str, Any]]]] = []
    placed = runs.latest_placement(journal)
    if placed is not None:
        question = (f"Why was {placed['namespace']}/{placed['run']} placed on {placed['pod']}? "
                    f"(cycle {placed['lsn']}, its recorded candidates and scores)")
        rows = [{"rank": c["rank"], "pod": c["pod"], "total": c["total"],
                 **{s["plugin"]: f"{s['normalized']} (raw {s['raw']})" for s in c["scores"]}}
                for c in runs.candidates(journal, placed["lsn"], epoch=placed["epoch"])]
        answers.append((question, rows))
    answers.append(("Which Runs are Pending, by reason? (as of each Run's latest cycle)",
                    pending_by_reason(journal)))
    return answers
