"""One Run's history: its cycles, its placement and why (the candidates), its binds, how it ended, its records.

``kruntimes history run`` prints ``run_history``; the web view's Run page tells the
Run's story from its records (``run_records``), found through the same tables' indexes
and fetched by key. Every function is one parameterized statement (or a few) on the
typed, indexed history tables (``tables``) and returns plain dicts with named fields
(datetimes are aware UTC) or records; a question about one Run costs the same in a
journal of any length. Nothing here is read by the scheduler: the journal is an audit log.

The same questions are written out as SQL in ``docs/journal.md`` for people at a
``sqlite3``/``psql`` prompt; the tests run those too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from kruntimes import wire
from kruntimes.journal.history import order, read, stored, tables, values, waits
from kruntimes.journal.store import backends, schema
from kruntimes.scheduler import status as status_bodies


def runtime(p: sa.Table) -> sa.ScalarSelect[Any]:
    """The Run's runtime in the snapshot a placing cycle read: its latest observation at or before it."""
    r = tables.runs
    return (sa.select(r.c.runtime)
            .where(r.c.namespace == p.c.namespace, r.c.uid == p.c.run_uid, r.c.epoch == p.c.epoch,
                   r.c.lsn <= p.c.snapshot_lsn)
            .order_by(r.c.lsn.desc()).limit(1).scalar_subquery().label("runtime"))


def run_cycles(journal: backends.Journal, namespace: str, name: str, *,
               limit: int | None = None) -> list[dict[str, Any]]:
    """Every cycle of the Run(s) named ``namespace/name``, oldest first (the newest ``limit``)."""
    c = tables.cycles
    stmt = (sa.select(c.c.lsn, c.c.decided_at, c.c.run_uid, c.c.result, c.c.chosen, c.c.total, c.c.message,
                      c.c.pods_evaluated, c.c.pods_feasible, c.c.duration_us, c.c.snapshot_lsn)
            .where(c.c.namespace == namespace, c.c.run == name)
            .order_by(*read.order_by(journal, c.c.decided_at, c.c.epoch, c.c.lsn, newest_first=True)))
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(reversed(read.rows(journal, stmt)))


def _placement(journal: backends.Journal, namespace: str, name: str) -> dict[str, Any] | None:
    p = tables.placements
    stmt = (sa.select(p.c.epoch, p.c.lsn, p.c.run, p.c.run_uid, runtime(p), p.c.pod, p.c.decided_at, p.c.now,
                      p.c.total, p.c.outcome, p.c.snapshot_lsn)
            .where(p.c.namespace == namespace, p.c.run == name, p.c.outcome == "scheduled")
            .order_by(*read.order_by(journal, p.c.decided_at, p.c.epoch, p.c.lsn, newest_first=True)).limit(1))
    found = read.rows(journal, stmt)
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
    c, y = tables.candidates, tables.cycles
    if epoch is None:
        newest = read.order_by(journal, y.c.decided_at, y.c.epoch, y.c.lsn, newest_first=True)
        epoch_of = read.rows(journal, sa.select(y.c.epoch).where(y.c.lsn == lsn).order_by(*newest).limit(1))
        if not epoch_of:
            return []
        epoch = epoch_of[0]["epoch"]
    stmt = (sa.select(c.c.rank, c.c.pod, c.c.total, c.c.plugin_scores, y.c.chosen)
            .join(y, sa.and_(y.c.epoch == c.c.epoch, y.c.lsn == c.c.lsn))
            .where(c.c.epoch == epoch, c.c.lsn == lsn).order_by(c.c.rank))
    return [{"rank": row["rank"], "pod": row["pod"], "total": row["total"], "chosen": row["pod"] == row["chosen"],
             "scores": _plugin_scores(row["plugin_scores"])}
            for row in read.rows(journal, stmt)]


def _plugin_scores(text: str | None) -> list[dict[str, Any]]:
    """A candidate's stored ``[[plugin, raw, normalized]]``, by plugin; raw as text (an int or a JSON list)."""
    try:
        entries = json.loads(text) if text else []
    except ValueError:
        return []
    scores = [{"plugin": e[0], "raw": values.compact_json(e[1]) if isinstance(e[1], list) else str(e[1]),
               "normalized": e[2]}
              for e in entries if isinstance(e, list) and len(e) == 3 and isinstance(e[0], str)]
    return sorted(scores, key=lambda s: s["plugin"])


def binds(journal: backends.Journal, namespace: str, run_uids: Sequence[str]) -> list[dict[str, Any]]:
    """Bind results (ok, conflict, unknown, error) of the given Run uids, oldest first."""
    if not run_uids:
        return []
    b = tables.binds
    stmt = (sa.select(b.c.lsn, b.c.recorded_at, b.c.run_uid, b.c.result, b.c.error)
            .where(b.c.namespace == namespace, b.c.run_uid.in_(sorted(set(run_uids))))
            .order_by(*read.order_by(journal, b.c.recorded_at, b.c.epoch, b.c.lsn)))
    return read.rows(journal, stmt)


def run_ended(journal: backends.Journal, namespace: str, run_uids: Sequence[str],
              cycles: Sequence[dict[str, Any]] = ()) -> dict[str, Any] | None:
    """How the Run ended, from its latest terminal or deleted observation: when, phase, reason, message.

    Journals written before a Run's end was projected (``0009_run_end_reason``) have no
    reason; an invalid Run's then comes from its invalid cycle, which says why. None while
    the journal saw the Run neither end nor go.
    """
    if not run_uids:
        return None
    r = tables.runs
    stmt = (sa.select(r.c.recorded_at, r.c.lsn, r.c.event, r.c.phase, r.c.end_reason, r.c.end_message)
            .where(r.c.namespace == namespace, r.c.uid.in_(sorted(set(run_uids))),
                   sa.or_(r.c.phase.in_(sorted(wire.TERMINAL_PHASES)), r.c.event == "DELETED"))
            .order_by(*read.order_by(journal, r.c.recorded_at, r.c.epoch, r.c.lsn, newest_first=True)).limit(1))
    found = read.rows(journal, stmt)
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
    found = read.rows(journal, sa.select(t.c.payload).where(t.c.incarnation == epoch, t.c.lsn == lsn,
                                                            t.c.kind == "cycle"))
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
        "waits": waits.run_waits(journal, namespace, [u for u in uids if u]),
    }


def run_records(journal: backends.Journal, namespace: str, name: str, *, limit: int = 2000) -> list[stored.Record]:
    """Every record about the Run(s) named ``namespace/name``, epoch by epoch in LSN order (the newest ``limit``):
    its cycles, observations and binds, and the records that ended its placements."""
    return stored.by_keys(journal, _run_keys(journal, namespace, name, limit))[-limit:]


def _run_keys(journal: backends.Journal, namespace: str, name: str, limit: int) -> set[tuple[str, int]]:
    """The Run's cycles (by name), then by its UIDs its observations and binds, and the records that
    ended its placements (a release, an end, a newer placement); of each, the newest ``limit``.

    Newest by time, then epoch order, then LSN: LSNs overlap between epochs begun while
    the database was away, so the highest LSNs may be an older epoch's.
    """
    c, p = tables.cycles, tables.placements
    oldest_first = read.oldest_first(journal)
    stmt = (sa.select(c.c.epoch, c.c.lsn, c.c.run_uid).where(c.c.namespace == namespace, c.c.run == name)
            .order_by(*order.order(c.c.decided_at, c.c.epoch, c.c.lsn, oldest_first, newest_first=True)).limit(limit))
    keys: set[tuple[str, int]] = set()
    uids: set[str] = set()
    for epoch, lsn, run_uid in read.execute(journal, stmt):
        keys.add((epoch, lsn))
        uids.add(run_uid)
    if uids:
        for table, column in ((tables.runs, tables.runs.c.uid), (tables.binds, tables.binds.c.run_uid)):
            stmt = (sa.select(table.c.epoch, table.c.lsn).where(table.c.namespace == namespace,
                                                                 column.in_(sorted(uids)))
                    .order_by(*order.order(table.c.recorded_at, table.c.epoch, table.c.lsn, oldest_first,
                                           newest_first=True)).limit(limit))
            keys.update((epoch, lsn) for epoch, lsn in read.execute(journal, stmt))
        ends = sa.select(p.c.end_epoch, p.c.end_lsn).where(p.c.namespace == namespace, p.c.run == name,
                                                           p.c.end_lsn.is_not(None))
        keys.update((epoch, lsn) for epoch, lsn in read.execute(journal, ends))
    return keys


def latest_placement(journal: backends.Journal) -> dict[str, Any] | None:
    """The newest successful placement in the journal, or None."""
    p = tables.placements
    stmt = (sa.select(p.c.epoch, p.c.lsn, p.c.namespace, p.c.run, runtime(p), p.c.pod, p.c.total, p.c.decided_at)
            .where(p.c.outcome == "scheduled")
            .order_by(*read.order_by(journal, p.c.decided_at, p.c.epoch, p.c.lsn, newest_first=True)).limit(1))
    found = read.rows(journal, stmt)
    return found[0] if found else None
