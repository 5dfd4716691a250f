"""How long Runs waited to be placed, named apart: in queue (no cycle had evaluated them yet) and
unschedulable (cycles found no pod for them).

``kruntimes history waits`` prints ``longest_waits``, the web view's Waits page shows
``waits``, and both a Run's page and ``kruntimes history run`` show ``run_waits``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from kruntimes import wire
from kruntimes.journal.history import read, tables
from kruntimes.journal.store import backends

_US = timedelta(microseconds=1)
#: What the two waits mean, for the tables that show them (`history waits`, the UI's Waits page).
WAITS_LEGEND = ("In queue: from the Run's first observation to its first cycle (no cycle had evaluated it yet). "
                "Unschedulable: from its first Pending cycle to its placement (cycles found no pod for it). "
                "Waited is both.")


def longest_waits(journal: backends.Journal, *, limit: int = 10, waiting: bool = True) -> list[dict[str, Any]]:
    """The ``limit`` Runs that waited longest from first seen to placement (``waits``), each wait also in seconds."""
    found = waits(journal, waiting=waiting)[:limit]
    for row in found:
        for what in ("queued", "unschedulable", "waited"):
            row[f"{what}_s"] = round(row[f"{what}_us"] / 1_000_000, 3)
    return found


def waits(journal: backends.Journal, *, waiting: bool = True) -> list[dict[str, Any]]:
    """Every Run placed (or, with ``waiting``, still Pending), longest wait first, the two waits named apart.

    A Pending Run waits in one of two ways, and each row says how long in each:

    - ``queued_us``, *waiting in queue*: from the Run's first observation (its creation
      as the scheduler saw it, ``history_runs``) to its first cycle (``history_cycles``):
      the time the queue held it before any cycle evaluated it;
    - ``unschedulable_us``: from its first Pending cycle to its placement (the
      ``history_waits`` episodes, summed): the time cycles found no pod for it.

    ``waited_us`` is their sum. Runs placed on their first cycle count too (their wait is
    the queue's alone). With ``waiting``, Runs still Pending count with their waits so
    far: ``outcome`` None, still queued (never evaluated: up to the journal's newest
    record) or unschedulable (up to their latest Pending cycle). Runs that ended
    otherwise (invalid, deleted, failed before placement) are left out. Each row has the
    first and latest reason the Run was given and how many Pending cycles it had.

    A question about every Run: it reads one grouped row per Run from each table (the
    first observation, the first cycle, the first placement) and every wait episode.
    """
    seen, first_cycle, placed, episodes, newest = _wait_inputs(journal)
    found: list[dict[str, Any]] = []
    for run in seen:
        key = (run["namespace"], run["uid"])
        placement, spells, cycled = placed.get(key), episodes.get(key, []), first_cycle.get(key)
        still = placement is None and not run["ended"] and all(e["end_lsn"] is None for e in spells)
        if placement is None and not (waiting and still):
            continue
        found.append(_wait_row(run, placement, spells, cycled, newest))
    found.sort(key=lambda row: (-row["waited_us"], row["first_seen_at"], row["namespace"], row["run"]))
    return found


def _wait_inputs(journal: backends.Journal) -> tuple[list[dict[str, Any]], dict[tuple[str, str], Any],
                                                     dict[tuple[str, str], dict[str, Any]],
                                                     dict[tuple[str, str], list[dict[str, Any]]], Any]:
    """What ``waits`` reads, one grouped row per Run from each table: the first observation, the
    first cycle, the first placement, every wait episode, and the journal's newest record time."""
    r, c, p, w = tables.runs, tables.cycles, tables.placements, tables.waits
    ended = sa.func.max(sa.case((sa.or_(r.c.event == "DELETED", r.c.phase.in_(sorted(wire.TERMINAL_PHASES))), 1),
                                else_=0)).label("ended")
    seen = read.rows(journal, sa.select(r.c.namespace, r.c.uid, sa.func.min(r.c.name).label("run"),
                                        sa.func.min(r.c.recorded_at).label("first_seen_at"), ended)
                     .group_by(r.c.namespace, r.c.uid))
    first_cycle = {(row["namespace"], row["run_uid"]): row["at"] for row in read.rows(
        journal, sa.select(c.c.namespace, c.c.run_uid, sa.func.min(c.c.decided_at).label("at"))
        .group_by(c.c.namespace, c.c.run_uid))}
    placed: dict[tuple[str, str], dict[str, Any]] = {}
    for row in read.rows(journal, sa.select(p.c.namespace, p.c.run_uid, p.c.decided_at, p.c.pod)
                         .where(p.c.outcome == "scheduled")
                         .order_by(*read.order_by(journal, p.c.decided_at, p.c.epoch, p.c.lsn))):
        placed.setdefault((row["namespace"], row["run_uid"]), row)
    episodes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in read.rows(journal, sa.select(w.c.namespace, w.c.run_uid, w.c.first_pending_at, w.c.last_pending_at,
                                            w.c.waited_us, w.c.pending_cycles, w.c.first_reason, w.c.last_reason,
                                            w.c.end_lsn, w.c.outcome)
                         .order_by(*read.order_by(journal, w.c.first_pending_at, w.c.epoch, w.c.first_lsn))):
        episodes.setdefault((row["namespace"], row["run_uid"]), []).append(row)
    newest = read.rows(journal, sa.select(sa.func.max(r.c.recorded_at).label("at")))[0]["at"]
    return seen, first_cycle, placed, episodes, newest


def _wait_row(run: dict[str, Any], placement: dict[str, Any] | None, spells: list[dict[str, Any]],
              cycled: Any, newest: Any) -> dict[str, Any]:
    """One Run's row of ``waits``: its queue wait, its unschedulable episodes summed, its reasons."""
    queued_until = cycled or (placement or {}).get("decided_at") or newest
    unschedulable = sum(e["waited_us"] if e["end_lsn"] is not None else
                        (e["last_pending_at"] - e["first_pending_at"]) // _US for e in spells)
    queued = max(0, (queued_until - run["first_seen_at"]) // _US)
    return {
        "namespace": run["namespace"], "run": run["run"], "run_uid": run["uid"],
        "first_seen_at": run["first_seen_at"], "first_cycle_at": cycled,
        "first_pending_at": spells[0]["first_pending_at"] if spells else None,
        "placed_at": placement["decided_at"] if placement else None, "pod": placement["pod"] if placement else None,
        "queued_us": queued, "unschedulable_us": unschedulable, "waited_us": queued + unschedulable,
        "pending_cycles": sum(e["pending_cycles"] or 0 for e in spells),
        "first_reason": spells[0]["first_reason"] if spells else None,
        "last_reason": spells[-1]["last_reason"] if spells else None,
        "outcome": "scheduled" if placement else None,
        "state": "placed" if placement else "unschedulable" if cycled else "in queue",
    }


def run_waits(journal: backends.Journal, namespace: str, run_uids: Sequence[str]) -> dict[str, Any] | None:
    """One Run's two waits, as ``longest_waits`` names them: in queue (first seen to first cycle) and
    unschedulable (its Pending cycles' episodes), each in microseconds; None if the journal never saw it."""
    if not run_uids:
        return None
    r, c, w = tables.runs, tables.cycles, tables.waits
    uids = sorted(set(run_uids))
    first = read.rows(journal, sa.select(sa.func.min(r.c.recorded_at).label("at"))
                      .where(r.c.namespace == namespace, r.c.uid.in_(uids)))[0]["at"]
    if first is None:
        return None
    spells = read.rows(journal, sa.select(w.c.first_pending_at, w.c.last_pending_at, w.c.waited_us, w.c.end_lsn,
                                          w.c.outcome).where(w.c.namespace == namespace, w.c.run_uid.in_(uids)))
    first_cycle = read.rows(journal, sa.select(sa.func.min(c.c.decided_at).label("at"))
                            .where(c.c.namespace == namespace, c.c.run_uid.in_(uids)))[0]["at"]
    return {
        "first_seen_at": first, "first_cycle_at": first_cycle,
        "queued_us": max(0, (first_cycle - first) // _US) if first_cycle is not None else None,
        "unschedulable_us": sum(e["waited_us"] if e["end_lsn"] is not None else
                                (e["last_pending_at"] - e["first_pending_at"]) // _US for e in spells),
        "still_unschedulable": any(e["end_lsn"] is None for e in spells),
    }
