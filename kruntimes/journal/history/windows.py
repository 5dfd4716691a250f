"""A time window of the journal: where each epoch's stretch of it starts and ends, its Runtime Pods, its bars.

What the web view's Timeline and pod pages ask. A window ``[since, until)`` maps to a
*cut* per epoch (``order.Cut``: the newest LSN of each epoch recorded by then; LSNs
overlap between epochs, so a bare LSN range would mix one epoch's records into
another's stretch). Its starting state is the newest checkpoint at or before ``since``
(kept parsed for the next page: a record never changes), then the pods added and
deleted after it are folded in from ``history_pods``, a key range per epoch. The Runs
on the pods drawn are ``history_placements`` rows, one index range per pod. Nothing
scans the journal, and no payload but that checkpoint's is parsed for a window.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from kruntimes import wire
from kruntimes.journal.history import order, read, stored, tables
from kruntimes.journal.store import backends, schema

_R = schema.journal_records

#: Parsed checkpoints kept in memory (each ~1 MB of JSON at 1,000 pods and 2,400 placed Runs).
CHECKPOINTS_KEPT = 4


@dataclass
class Lane:
    """A Runtime Pod as the window saw it (latest observation wins)."""

    namespace: str
    name: str
    runtime: str
    capacity: dict[str, int]
    ready: bool
    terminating: bool
    heartbeat: str | None
    deleted_at: datetime | None = None


@dataclass
class Bar:
    """One placement: a Run on a pod from its cycle's record to its end (``history_placements``)."""

    namespace: str
    run: str
    run_uid: str
    pod: str
    requests: dict[str, int]
    start: datetime
    end: datetime | None = None  # None: still there at the window's end
    ended: str = ""  # succeeded, failed, deleted, replaced
    lsn: int = 0


@dataclass
class Window:
    """The Runtime Pods of ``[since, until)`` and where the window's look-ups start from.

    ``after`` is where the newest checkpoint at or before ``since`` stands, per epoch (its
    pods, and the Runs it shows placed, ``placed_before``, are the starting state);
    ``upto``, per epoch, the newest LSN recorded at or before ``until``. Both are cuts.
    """

    since: datetime
    until: datetime
    lanes: dict[tuple[str, str], Lane] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    upto: dict[str, int] = field(default_factory=dict)
    placed_before: dict[str, set[str]] = field(default_factory=dict)  # namespace -> Run names
    records_read: int = 0  # pod additions and deletions folded after the checkpoint


# -- where a window starts and ends ---------------------------------------------------------------


def newest_at(journal: backends.Journal, at: datetime, spans: list[read.Span] | None = None, *,
              strictly: bool = False) -> tuple[str, int] | None:
    """(epoch, LSN) of the newest record recorded at or before ``at`` (before it, ``strictly``): by time,
    then epoch order, then LSN. One probe of the ``recorded_at`` index, walking back from ``at``."""
    oldest_first = [s.epoch for s in (read.spans(journal) if spans is None else spans)]
    found = read.execute(journal, sa.select(_R.c.incarnation, _R.c.lsn)
                         .where(_R.c.recorded_at < at if strictly else _R.c.recorded_at <= at,
                                _R.c.lsn >= order.FIRST_SCHEDULER_LSN)
                         .order_by(*order.order(_R.c.recorded_at, _R.c.incarnation, _R.c.lsn, oldest_first,
                                                newest_first=True)).limit(1))
    return (str(found[0][0]), int(found[0][1])) if found else None


def cut_at(journal: backends.Journal, at: datetime, spans: list[read.Span] | None = None, *,
           strictly_before: Iterable[str] = ()) -> dict[str, int]:
    """Per epoch, the newest LSN recorded at or before ``at`` (before it, for the epochs ``strictly_before``
    names); an epoch with none is absent. The per-epoch LSN ranges a time window maps to.

    An epoch wholly before or after ``at`` is answered from its span. One that ``at``
    falls inside (usually one: epochs seldom overlap in time) from the newest record
    before ``at`` when that is the epoch's (a probe of the ``recorded_at`` index; LSNs
    grow with time within an epoch), else by a search within the epoch.
    """
    spans = read.spans(journal) if spans is None else spans
    strict = set(strictly_before)
    newest: dict[bool, tuple[str, int] | None] = {}
    cut: dict[str, int] = {}
    for s in spans:
        strictly = s.epoch in strict
        before = (lambda t: t < at) if strictly else (lambda t: t <= at)  # noqa: E731
        if not before(s.first_at):
            continue
        if before(s.last_at):
            cut[s.epoch] = s.last_lsn
            continue
        if strictly not in newest:
            newest[strictly] = newest_at(journal, at, spans, strictly=strictly)
        found_at = newest[strictly]
        if found_at is not None and found_at[0] == s.epoch:
            cut[s.epoch] = found_at[1]
            continue
        when = _R.c.recorded_at < at if strictly else _R.c.recorded_at <= at
        found = read.execute(journal, sa.select(_R.c.lsn).where(_R.c.incarnation == s.epoch, when,
                                                                 _R.c.lsn >= order.FIRST_SCHEDULER_LSN)
                             .order_by(_R.c.recorded_at.desc(), _R.c.lsn.desc()).limit(1))
        if found:
            cut[s.epoch] = int(found[0][0])
    return cut


class StartStates:
    """The last few checkpoints, parsed: their lanes and the Runs they show placed, by (epoch, LSN).

    A checkpoint never changes once written, so what it parses to is kept and shared: the
    next page over the same stretch of time starts from it without reading a megabyte of
    JSON again (a lane that changes is replaced, never changed in place).
    """

    def __init__(self, kept: int = CHECKPOINTS_KEPT) -> None:
        self._kept = kept
        self._lock = threading.Lock()
        self._parsed: OrderedDict[tuple[str, int], tuple[dict[tuple[str, str], Lane], dict[str, set[str]]]] = (
            OrderedDict())

    def of(self, journal: backends.Journal,
           key: tuple[str, int]) -> tuple[dict[tuple[str, str], Lane], dict[str, set[str]]]:
        with self._lock:
            cached = self._parsed.get(key)
            if cached is not None:
                self._parsed.move_to_end(key)
                return cached
        checkpoint = stored.record(journal, key[1], key[0])
        assert checkpoint is not None
        scratch = Window(checkpoint.at, checkpoint.at)
        placed: dict[str, set[str]] = {}
        for pod in checkpoint.payload.get("pods", ()):
            _observe_pod(scratch, pod, None)
        for run in checkpoint.payload.get("runs", ()):
            if run.get("pod_name") and run.get("phase") not in wire.TERMINAL_PHASES:
                placed.setdefault(run["namespace"], set()).add(run["name"])
        for a in checkpoint.payload.get("assumed", ()):
            placed.setdefault(a["namespace"], set()).add(a["run_name"])
        cached = (scratch.lanes, placed)
        with self._lock:
            self._parsed[key] = cached
            while len(self._parsed) > self._kept:
                self._parsed.popitem(last=False)
        return cached


def start_state(journal: backends.Journal, at: datetime, spans: list[read.Span], starts: StartStates
                ) -> tuple[dict[str, int], dict[tuple[str, str], Lane], dict[str, set[str]]]:
    """The newest checkpoint at or before ``at``: where it stands per epoch (``Window.after``), its pods as
    lanes, the Runs it shows placed.

    Where it stands: its own (epoch, LSN); of the epochs before its own in epoch order,
    what they recorded up to its instant; of those after, before it. With no checkpoint,
    the start of every epoch.
    """
    found = stored.checkpoints(journal, 1, at=at)
    if not found:
        return {}, {}, {}
    epoch, checkpoint_lsn, recorded = found[0]
    oldest_first = [s.epoch for s in spans]
    later = oldest_first[oldest_first.index(epoch) + 1:] if epoch in oldest_first else []
    after = {**cut_at(journal, recorded, spans, strictly_before=later), epoch: checkpoint_lsn}
    lanes, placed = starts.of(journal, (epoch, checkpoint_lsn))
    # Shared, not copied: ``_observe_pod`` replaces a lane it changes instead of changing it in place.
    return after, dict(lanes), placed


# -- a window's pods and bars ---------------------------------------------------------------------


def window(journal: backends.Journal, since: datetime, until: datetime, starts: StartStates) -> Window:
    """The Runtime Pods of ``[since, until)``: the newest checkpoint at or before ``since``, then the pods
    added and deleted after it (``history_pods``, a key range per epoch), by time, epoch order and LSN."""
    out = Window(since, until)
    spans = read.spans(journal)
    out.after, out.lanes, out.placed_before = start_state(journal, since, spans, starts)
    out.upto = cut_at(journal, until, spans)
    o = tables.pods
    pods = (sa.select(o.c.lsn, o.c.recorded_at, o.c.event, o.c.namespace, o.c.name, o.c.runtime, o.c.capacity,
                      o.c.ready, o.c.terminating, o.c.heartbeat)
            .where(order.between(o.c.epoch, o.c.lsn, out.after, out.upto), o.c.event.in_(("ADDED", "DELETED")))
            .order_by(*order.order(o.c.recorded_at, o.c.epoch, o.c.lsn, [s.epoch for s in spans])))
    found = read.execute(journal, pods)
    for _lsn, at, event, namespace, name, runtime, capacity, ready, terminating, heartbeat in found:
        out.records_read += 1
        obj = {"runtime": runtime, "capacity": orjson.loads(capacity) if capacity else (), "ready": ready,
               "terminating": terminating, "heartbeat": heartbeat}
        _observe_pod(out, obj, at if event == "DELETED" else None, key=(namespace, name))
    return out


def pods_of(p: sa.Table, lanes: Sequence[tuple[str, str]]) -> sa.ColumnElement[bool]:
    """``(namespace, pod)`` among ``lanes``: per namespace an IN list, which the indexes on both serve."""
    by_namespace: dict[str, list[str]] = {}
    for namespace, name in lanes:
        by_namespace.setdefault(namespace, []).append(name)
    return sa.or_(sa.false(), *(sa.and_(p.c.namespace == ns, p.c.pod.in_(sorted(names)))
                                for ns, names in sorted(by_namespace.items())))


def bars(journal: backends.Journal, w: Window, lanes: Sequence[tuple[str, str]]) -> list[Bar]:
    """The Runs placed on ``lanes`` (namespace, pod) during the window: scheduled placements begun before
    ``until`` and not ended before ``since``, by time, then epoch order, then LSN.

    One index range per pod (``(namespace, pod, decided_at)``): a page asks for the few
    dozen lanes it draws, never for every pod.
    """
    if not lanes:
        return []
    p = tables.placements
    # Times as stored (SQLite text): parsed once here, cheaper than the column type.
    stmt = (sa.select(p.c.namespace, p.c.pod, p.c.run, p.c.run_uid, sa.type_coerce(p.c.decided_at, sa.String),
                      sa.type_coerce(p.c.ended_at, sa.String), p.c.end_reason, p.c.lsn)
            .where(pods_of(p, lanes), p.c.decided_at < w.until, p.c.outcome == "scheduled",
                   sa.or_(p.c.ended_at.is_(None), p.c.ended_at >= w.since))
            .order_by(*read.order_by(journal, p.c.decided_at, p.c.epoch, p.c.lsn)))
    return [Bar(namespace, run, uid, pod, {}, read.at(placed), read.at(ended) if ended else None, str(why or ""), lsn)
            for namespace, pod, run, uid, placed, ended, why, lsn in read.execute(journal, stmt)]


def _observe_pod(out: Window, obj: dict[str, Any], deleted_at: datetime | None,
                 key: tuple[str, str] | None = None) -> None:
    key = key or (obj.get("namespace", ""), obj.get("name", ""))
    if not key[1]:
        return
    lane = out.lanes.get(key)
    capacity = {str(k): int(v) for k, v in (obj.get("capacity") or ()) if isinstance(v, int)}
    if lane is None:
        out.lanes[key] = Lane(key[0], key[1], str(obj.get("runtime") or ""), capacity, bool(obj.get("ready")),
                              bool(obj.get("terminating")), obj.get("heartbeat"), deleted_at)
        return
    lane = out.lanes[key] = dataclasses.replace(lane)  # lanes may be shared with a cached starting state
    lane.runtime = str(obj.get("runtime") or lane.runtime)
    lane.capacity = capacity or lane.capacity
    lane.ready, lane.terminating = bool(obj.get("ready")), bool(obj.get("terminating"))
    lane.heartbeat = obj.get("heartbeat", lane.heartbeat)
    lane.deleted_at = deleted_at
