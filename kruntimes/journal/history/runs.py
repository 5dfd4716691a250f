"""Placement history for people: the questions `kruntimes history` answers, over the history tables.

Every function here is one parameterized SQLAlchemy statement (or two) on the typed,
indexed tables of ``derived`` - user input is only ever a bound parameter, never SQL
text - and returns plain dicts with named fields (datetimes are aware UTC) that the CLI
renders as tables or JSON. Each question touches the rows it answers through an index,
so a question about one Run or one pod costs the same in a journal of any length.
Nothing here is read by the scheduler: the journal is an audit log.

The same questions are written out as SQL in ``docs/journal.md`` for people at a
``sqlite3``/``psql`` prompt; the tests run those too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import errors
from kruntimes.journal.history import derive as derived
from kruntimes.journal.history import order as epoch_order
from kruntimes.journal.store import backends, schema
from kruntimes.scheduler import status as status_bodies

OUTCOMES = ("scheduled", "unschedulable", "invalid", "conflict", "error")
#: Bind results whose outcome was a lost race or is not known.
TROUBLED_BINDS = ("conflict", "unknown", "error")


def _rows(journal: backends.Journal, stmt: sa.Executable) -> list[dict[str, Any]]:
    try:
        with journal.engine.connect() as conn:
            return [dict(row) for row in conn.execute(stmt).mappings()]
    except sa_exc.DBAPIError as exc:
        raise errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}") from exc


def _order(journal: backends.Journal, when: Any, epoch: Any, lsn: Any, *, newest_first: bool = False) -> list[Any]:
    """ORDER BY time, then epoch order (``epoch_order``: by chained data), then LSN.

    (epoch, LSN) is a record's identity and LSNs overlap between epochs begun while the
    database was away: neither the LSN nor the epoch's ID says which of two records
    recorded at the same instant came first.
    """
    spans = _rows(journal, epoch_order.spans_query())
    oldest_first = [s.epoch for s in epoch_order.ordered((r["epoch"], r["first_lsn"], r["first_at"]) for r in spans)]
    return epoch_order.order(when, epoch, lsn, oldest_first, newest_first=newest_first)


def _runtime(p: sa.Table) -> sa.ScalarSelect[Any]:
    """The Run's runtime in the snapshot a placing cycle read: its latest observation at or before it."""
    r = derived.runs
    return (sa.select(r.c.runtime)
            .where(r.c.namespace == p.c.namespace, r.c.uid == p.c.run_uid, r.c.epoch == p.c.epoch,
                   r.c.lsn <= p.c.snapshot_lsn)
            .order_by(r.c.lsn.desc()).limit(1).scalar_subquery().label("runtime"))


# -- Runs --------------------------------------------------------------------------------


def run_cycles(journal: backends.Journal, namespace: str, name: str, *,
               limit: int | None = None) -> list[dict[str, Any]]:
    """Every cycle of the Run(s) named ``namespace/name``, oldest first (the newest ``limit``)."""
    c = derived.cycles
    stmt = (sa.select(c.c.lsn, c.c.decided_at, c.c.run_uid, c.c.result, c.c.chosen, c.c.total, c.c.message,
                      c.c.pods_evaluated, c.c.pods_feasible, c.c.duration_us, c.c.snapshot_lsn)
            .where(c.c.namespace == namespace, c.c.run == name)
            .order_by(*_order(journal, c.c.decided_at, c.c.epoch, c.c.lsn, newest_first=True)))
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(_rows(journal, stmt)))


def _placement(journal: backends.Journal, namespace: str, name: str) -> dict[str, Any] | None:
    p = derived.placements
    stmt = (sa.select(p.c.epoch, p.c.lsn, p.c.run, p.c.run_uid, _runtime(p), p.c.pod, p.c.decided_at, p.c.now,
                      p.c.total, p.c.outcome, p.c.snapshot_lsn)
            .where(p.c.namespace == namespace, p.c.run == name, p.c.outcome == "scheduled")
            .order_by(*_order(journal, p.c.decided_at, p.c.epoch, p.c.lsn, newest_first=True)).limit(1))
    found = _rows(journal, stmt)
    return found[0] if found else None


def run_placement(journal: backends.Journal, namespace: str, name: str) -> dict[str, Any] | None:
    """The Run's latest successful placement (run, runtime, pod, cycle, score), or None."""
    found = _placement(journal, namespace, name)
    if found is not None:
        del found["epoch"]
    return found


def candidates(journal: backends.Journal, lsn: int, *, epoch: str | None = None) -> list[dict[str, Any]]:
    """The recorded candidates of cycle ``lsn`` (of ``epoch``), best first, each with its per-plugin scores.

    Without ``epoch``, the newest epoch that has a cycle at that LSN.
    """
    c, y = derived.candidates, derived.cycles
    if epoch is None:
        epoch_of = _rows(journal, sa.select(y.c.epoch).where(y.c.lsn == lsn)
                         .order_by(*_order(journal, y.c.decided_at, y.c.epoch, y.c.lsn, newest_first=True)).limit(1))
        if not epoch_of:
            return []
        epoch = epoch_of[0]["epoch"]
    stmt = (sa.select(c.c.rank, c.c.pod, c.c.total, c.c.plugin_scores, y.c.chosen)
            .join(y, sa.and_(y.c.epoch == c.c.epoch, y.c.lsn == c.c.lsn))
            .where(c.c.epoch == epoch, c.c.lsn == lsn).order_by(c.c.rank))
    return [{"rank": row["rank"], "pod": row["pod"], "total": row["total"], "chosen": row["pod"] == row["chosen"],
             "scores": _plugin_scores(row["plugin_scores"])}
            for row in _rows(journal, stmt)]


def _plugin_scores(text: str | None) -> list[dict[str, Any]]:
    """A candidate's stored ``[[plugin, raw, normalized]]``, by plugin; raw as text (an int or a JSON list)."""
    try:
        entries = json.loads(text) if text else []
    except ValueError:
        return []
    scores = [{"plugin": e[0], "raw": derived.compact_json(e[1]) if isinstance(e[1], list) else str(e[1]),
               "normalized": e[2]}
              for e in entries if isinstance(e, list) and len(e) == 3 and isinstance(e[0], str)]
    return sorted(scores, key=lambda s: s["plugin"])


def binds(journal: backends.Journal, namespace: str, run_uids: Sequence[str]) -> list[dict[str, Any]]:
    """Bind results (ok, conflict, unknown, error) of the given Run uids, oldest first."""
    if not run_uids:
        return []
    b = derived.binds
    stmt = (sa.select(b.c.lsn, b.c.recorded_at, b.c.run_uid, b.c.result, b.c.error)
            .where(b.c.namespace == namespace, b.c.run_uid.in_(sorted(set(run_uids))))
            .order_by(*_order(journal, b.c.recorded_at, b.c.epoch, b.c.lsn)))
    return _rows(journal, stmt)


def run_ended(journal: backends.Journal, namespace: str, run_uids: Sequence[str],
              cycles: Sequence[dict[str, Any]] = ()) -> dict[str, Any] | None:
    """How the Run ended, from its latest terminal or deleted observation: when, phase, reason, message.

    Journals written before a Run's end was projected (``0009_run_end_reason``) have no
    reason; an invalid Run's then comes from its invalid cycle, which says why. None while
    the journal saw the Run neither end nor go.
    """
    if not run_uids:
        return None
    r = derived.runs
    stmt = (sa.select(r.c.recorded_at, r.c.lsn, r.c.event, r.c.phase, r.c.end_reason, r.c.end_message)
            .where(r.c.namespace == namespace, r.c.uid.in_(sorted(set(run_uids))),
                   sa.or_(r.c.phase.in_(sorted(derived.TERMINAL_PHASES)), r.c.event == "DELETED"))
            .order_by(*_order(journal, r.c.recorded_at, r.c.epoch, r.c.lsn, newest_first=True)).limit(1))
    found = _rows(journal, stmt)
    if not found:
        return None
    ended = found[0]
    ended["phase"] = "Deleted" if ended.pop("event") == "DELETED" else ended["phase"]
    invalid = next((c for c in reversed(cycles) if c.get("result") == "invalid"), None)
    if ended["end_reason"] is None and invalid is not None:
        ended["end_reason"], ended["end_message"] = status_bodies.REASON_INVALID, invalid["message"]
    return ended


def placement_devices(journal: backends.Journal, epoch: str, lsn: int) -> list[dict[str, Any]] | None:
    """The devices cycle ``lsn`` of ``epoch`` chose (SPEC §7.8: `status.devices` results), None without a claim.

    Read from that cycle record itself, by its key: the history tables hold no devices.
    """
    t = schema.journal_records
    found = _rows(journal, sa.select(t.c.payload).where(t.c.incarnation == epoch, t.c.lsn == lsn, t.c.kind == "cycle"))
    try:
        devices = json.loads(found[0]["payload"]).get("devices") if found else None
    except (ValueError, AttributeError):
        return None
    chosen = devices.get("chosen") if isinstance(devices, dict) else None
    results = chosen.get("results") if isinstance(chosen, dict) else None
    return results if isinstance(results, list) else None


def run_history(journal: backends.Journal, namespace: str, name: str, *, limit: int | None = None) -> dict[str, Any]:
    """Everything about one Run: its cycles, binds, placement (with the devices it chose) and that cycle's
    candidates, and how it ended."""
    cycles = run_cycles(journal, namespace, name, limit=limit)
    placement = _placement(journal, namespace, name)
    epoch = placement.pop("epoch") if placement else None
    if placement is not None and epoch is not None:
        placement["devices"] = placement_devices(journal, epoch, placement["lsn"])
    uids = [c["run_uid"] for c in cycles] + ([placement["run_uid"]] if placement else [])
    return {
        "namespace": namespace, "run": name, "cycles": cycles, "placement": placement,
        "candidates": candidates(journal, placement["lsn"], epoch=epoch) if placement else [],
        "binds": binds(journal, namespace, [c["run_uid"] for c in cycles]),
        "ended": run_ended(journal, namespace, [u for u in uids if u], cycles),
        "waits": run_waits(journal, namespace, [u for u in uids if u]),
    }


# -- Runtime Pods ------------------------------------------------------------------------


def pod_observations(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                     limit: int | None = None) -> list[dict[str, Any]]:
    """What the scheduler saw of a pod, oldest first: every observation, or the newest ``limit``.

    With ``at``, only observations recorded at or before that instant, so ``limit=1``
    answers "what did the scheduler see of pod P at time T".
    """
    o = derived.pods
    stmt = (sa.select(o.c.lsn, o.c.recorded_at, o.c.event, o.c.runtime, o.c.ready, o.c.terminating,
                      o.c.heartbeat, o.c.capacity, o.c.capacity_problem)
            .where(o.c.namespace == namespace, o.c.name == name))
    return _latest(journal, stmt, o.c.recorded_at, o.c.epoch, o.c.lsn, at, limit)


def _latest(journal: backends.Journal, stmt: sa.Select[Any], when: Any, epoch: Any, lsn: Any, at: datetime | None,
            limit: int | None) -> list[dict[str, Any]]:
    """The newest ``limit`` rows of ``stmt`` up to ``at`` (by time, epoch order, LSN), returned oldest first."""
    stmt = stmt.order_by(*_order(journal, when, epoch, lsn, newest_first=True))
    if at is not None:
        stmt = stmt.where(when <= at)
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(_rows(journal, stmt)))


def pod_placements(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                   limit: int | None = None) -> list[dict[str, Any]]:
    """Cycles that chose this pod (scheduled, or lost to a conflict or error), oldest first; up to ``at``."""
    p = derived.placements
    stmt = (sa.select(p.c.lsn, p.c.decided_at, p.c.run, _runtime(p), p.c.total, p.c.outcome)
            .where(p.c.namespace == namespace, p.c.pod == name))
    return _latest(journal, stmt, p.c.decided_at, p.c.epoch, p.c.lsn, at, limit)


def pod_history(journal: backends.Journal, namespace: str, name: str, *, at: datetime | None = None,
                limit: int | None = None) -> dict[str, Any]:
    """A pod's observations and the cycles that chose it; with ``at``, as of that instant."""
    return {
        "namespace": namespace, "pod": name, "at": at,
        "observations": pod_observations(journal, namespace, name, at=at, limit=1 if at else limit),
        "placements": pod_placements(journal, namespace, name, at=at, limit=limit),
    }


def journal_start(journal: backends.Journal) -> tuple[datetime | None, bool]:
    """When the oldest record still stored was recorded (None: empty), and whether a prune cut older ones away
    (its record is at LSN 0): what an answer of "nothing" should add."""
    r = schema.journal_records  # a probe of the recorded_at index, one of the primary key
    start: datetime | None = _rows(journal, sa.select(sa.func.min(r.c.recorded_at).label("start")))[0]["start"]
    return start, bool(_rows(journal, sa.select(r.c.lsn).where(r.c.lsn == 0).limit(1)))


def pod_held(journal: backends.Journal, namespace: str, name: str, at: datetime) -> list[dict[str, Any]]:
    """The Runs placed on the pod at ``at``: placed at or before it and not yet ended then, oldest first.

    A placement ends when its Run succeeds, fails, is deleted or is placed again.
    """
    p = derived.placements
    stmt = (sa.select(p.c.epoch, p.c.lsn, p.c.decided_at.label("placed_at"), p.c.run, p.c.run_uid, _runtime(p),
                      p.c.total, p.c.ended_at, p.c.end_reason)
            .where(p.c.namespace == namespace, p.c.pod == name, p.c.outcome == "scheduled", p.c.decided_at <= at,
                   sa.or_(p.c.ended_at.is_(None), p.c.ended_at > at))
            .order_by(*_order(journal, p.c.decided_at, p.c.epoch, p.c.lsn)))
    return _rows(journal, stmt)


# -- cycles and reasons ------------------------------------------------------------------


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
    c = derived.cycles
    stmt = sa.select(c.c.lsn, c.c.decided_at, c.c.namespace, c.c.run, c.c.result, c.c.chosen, c.c.total,
                     c.c.pods_evaluated, c.c.pods_feasible, c.c.duration_us, c.c.message
                     ).order_by(*_order(journal, c.c.decided_at, c.c.epoch, c.c.lsn, newest_first=True))
    stmt = _window(stmt, c.c.decided_at, since, until)
    if outcome is not None:
        stmt = stmt.where(c.c.result == outcome)
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(_rows(journal, stmt)))


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
    c = derived.cycles
    stmt = _window(sa.select(c.c.epoch, c.c.lsn, c.c.decided_at, c.c.namespace, c.c.run, c.c.status, c.c.result,
                             c.c.chosen, c.c.total, c.c.pods_evaluated, c.c.pods_feasible, c.c.message),
                   c.c.decided_at, since, until).order_by(*_order(journal, c.c.decided_at, c.c.epoch, c.c.lsn))
    if limit is not None:
        stmt = stmt.limit(limit)
    found = _rows(journal, stmt)
    for row in found:
        row["reason"] = decision_reason(row)
    return found


def pending_by_reason(journal: backends.Journal) -> list[dict[str, Any]]:
    """Runs whose latest cycle left them Pending, counted by the reason they were given.

    A Run deleted since, placed since or found invalid no longer counts.
    """
    w = derived.waits
    runs = sa.func.count().label("runs")
    stmt = (sa.select(w.c.last_reason.label("reason"), runs)
            .where(w.c.end_lsn.is_(None), w.c.last_status == "unschedulable")
            .group_by(w.c.last_reason).order_by(runs.desc(), w.c.last_reason))
    return _rows(journal, stmt)


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
    r, c, p, w = derived.runs, derived.cycles, derived.placements, derived.waits
    ended = sa.func.max(sa.case((sa.or_(r.c.event == "DELETED", r.c.phase.in_(sorted(derived.TERMINAL_PHASES))), 1),
                                else_=0)).label("ended")
    seen = _rows(journal, sa.select(r.c.namespace, r.c.uid, sa.func.min(r.c.name).label("run"),
                                    sa.func.min(r.c.recorded_at).label("first_seen_at"), ended)
                 .group_by(r.c.namespace, r.c.uid))
    first_cycle = {(row["namespace"], row["run_uid"]): row["at"] for row in _rows(
        journal, sa.select(c.c.namespace, c.c.run_uid, sa.func.min(c.c.decided_at).label("at"))
        .group_by(c.c.namespace, c.c.run_uid))}
    placed: dict[tuple[str, str], dict[str, Any]] = {}
    for row in _rows(journal, sa.select(p.c.namespace, p.c.run_uid, p.c.decided_at, p.c.pod)
                     .where(p.c.outcome == "scheduled")
                     .order_by(*_order(journal, p.c.decided_at, p.c.epoch, p.c.lsn))):
        placed.setdefault((row["namespace"], row["run_uid"]), row)
    episodes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in _rows(journal, sa.select(w.c.namespace, w.c.run_uid, w.c.first_pending_at, w.c.last_pending_at,
                                        w.c.waited_us, w.c.pending_cycles, w.c.first_reason, w.c.last_reason,
                                        w.c.end_lsn, w.c.outcome)
                             .order_by(*_order(journal, w.c.first_pending_at, w.c.epoch, w.c.first_lsn))):
        episodes.setdefault((row["namespace"], row["run_uid"]), []).append(row)
    newest = _rows(journal, sa.select(sa.func.max(r.c.recorded_at).label("at")))[0]["at"]
    found: list[dict[str, Any]] = []
    for run in seen:
        key = (run["namespace"], run["uid"])
        placement, spells, cycled = placed.get(key), episodes.get(key, []), first_cycle.get(key)
        still = placement is None and not run["ended"] and all(e["end_lsn"] is None for e in spells)
        if placement is None and not (waiting and still):
            continue
        queued_until = cycled or (placement or {}).get("decided_at") or newest
        unschedulable = sum(e["waited_us"] if e["end_lsn"] is not None else
                            (e["last_pending_at"] - e["first_pending_at"]) // _US for e in spells)
        queued = max(0, (queued_until - run["first_seen_at"]) // _US)
        found.append({
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
        })
    found.sort(key=lambda row: (-row["waited_us"], row["first_seen_at"], row["namespace"], row["run"]))
    return found


def run_waits(journal: backends.Journal, namespace: str, run_uids: Sequence[str]) -> dict[str, Any] | None:
    """One Run's two waits, as ``longest_waits`` names them: in queue (first seen to first cycle) and
    unschedulable (its Pending cycles' episodes), each in microseconds; None if the journal never saw it."""
    if not run_uids:
        return None
    r, c, w = derived.runs, derived.cycles, derived.waits
    uids = sorted(set(run_uids))
    first = _rows(journal, sa.select(sa.func.min(r.c.recorded_at).label("at"))
                  .where(r.c.namespace == namespace, r.c.uid.in_(uids)))[0]["at"]
    if first is None:
        return None
    spells = _rows(journal, sa.select(w.c.first_pending_at, w.c.last_pending_at, w.c.waited_us, w.c.end_lsn,
                                      w.c.outcome).where(w.c.namespace == namespace, w.c.run_uid.in_(uids)))
    first_cycle = _rows(journal, sa.select(sa.func.min(c.c.decided_at).label("at"))
                        .where(c.c.namespace == namespace, c.c.run_uid.in_(uids)))[0]["at"]
    return {
        "first_seen_at": first, "first_cycle_at": first_cycle,
        "queued_us": max(0, (first_cycle - first) // _US) if first_cycle is not None else None,
        "unschedulable_us": sum(e["waited_us"] if e["end_lsn"] is not None else
                                (e["last_pending_at"] - e["first_pending_at"]) // _US for e in spells),
        "still_unschedulable": any(e["end_lsn"] is None for e in spells),
    }


def churn(journal: backends.Journal, *, since: datetime | None = None, until: datetime | None = None,
          limit: int | None = 50) -> list[dict[str, Any]]:
    """Runs placed on another pod than the top candidate of their previous cycle, oldest first.

    The previous cycle is the Run's latest cycle of the same epoch before the placing
    one: usually a choice that lost a race (a conflict), whose top pod then went
    elsewhere. The writer stores it with the placement (``kruntimes.journal.previous``)
    and a partial index holds the placements that went elsewhere, so this reads only
    its answer; the previous top candidate's total is one look-up per answered row.
    """
    p, k = derived.placements, derived.candidates
    top_total = (sa.select(k.c.total).where(k.c.epoch == p.c.epoch, k.c.lsn == p.c.previous_lsn, k.c.rank == 1)
                 .scalar_subquery())
    # Literals, as the partial index ix_history_placements_churn states them, so both databases use it.
    stmt = _window(sa.select(p.c.epoch, p.c.lsn, p.c.decided_at, p.c.namespace, p.c.run, p.c.pod, p.c.total,
                             p.c.previous_lsn, p.c.previous_result, p.c.previous_top,
                             top_total.label("previous_top_total"))
                   .where(p.c.outcome == sa.literal_column("'scheduled'"), p.c.previous_top != p.c.pod),
                   p.c.decided_at, since, until).order_by(*_order(journal, p.c.decided_at, p.c.epoch, p.c.lsn,
                                                                  newest_first=True))
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(_rows(journal, stmt)))


def conflicts(journal: backends.Journal, *, since: datetime | None = None, until: datetime | None = None,
              limit: int | None = 100) -> list[dict[str, Any]]:
    """Cycles that lost a race (result ``conflict``) and binds that did not land or whose outcome is unknown.

    Oldest first, the newest ``limit``; ``what`` says which: ``cycle conflict``,
    ``bind conflict``, ``bind unknown`` (ambiguous: the status write may have landed),
    ``bind error``.
    """
    c, b = derived.cycles, derived.binds
    lost = _window(sa.select(c.c.epoch, c.c.lsn, c.c.decided_at.label("at"), c.c.namespace, c.c.run, c.c.run_uid,
                             sa.literal("cycle conflict").label("what"), c.c.chosen.label("pod"),
                             c.c.message.label("detail"))
                   .where(c.c.result == "conflict"), c.c.decided_at, since, until)
    named = (sa.select(c.c.run).where(c.c.namespace == b.c.namespace, c.c.run_uid == b.c.run_uid)
             .order_by(*_order(journal, c.c.decided_at, c.c.epoch, c.c.lsn, newest_first=True)).limit(1)
             .scalar_subquery())
    binds_ = _window(sa.select(b.c.epoch, b.c.lsn, b.c.recorded_at.label("at"), b.c.namespace, named.label("run"),
                               b.c.run_uid, ("bind " + b.c.result).label("what"), sa.null().label("pod"),
                               b.c.error.label("detail"))
                     .where(b.c.result.in_(TROUBLED_BINDS)), b.c.recorded_at, since, until)
    both = sa.union_all(lost, binds_).subquery()
    stmt = sa.select(both).order_by(*_order(journal, both.c.at, both.c.epoch, both.c.lsn, newest_first=True))
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(_rows(journal, stmt)))


def latest_placement(journal: backends.Journal) -> dict[str, Any] | None:
    """The newest successful placement in the journal, or None."""
    p = derived.placements
    stmt = (sa.select(p.c.epoch, p.c.lsn, p.c.namespace, p.c.run, _runtime(p), p.c.pod, p.c.total, p.c.decided_at)
            .where(p.c.outcome == "scheduled")
            .order_by(*_order(journal, p.c.decided_at, p.c.epoch, p.c.lsn, newest_first=True)).limit(1))
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
                for c in candidates(journal, placed["lsn"], epoch=placed["epoch"])]
        answers.append((question, rows))
    answers.append(("Which Runs are Pending, by reason? (as of each Run's latest cycle)",
                    pending_by_reason(journal)))
    return answers
