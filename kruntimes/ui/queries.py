"""Every database read the web view makes, behind one class, over a read-only connection.

Why one module: the pages must not care where an answer comes from. Today the answers
come from ``journal_records`` itself, read by the two indexes it has (LSN and
``recorded_at``) and parsed here with orjson: a time window reads only the records
recorded in it (plus the stretch back to the checkpoint before it, which holds the
state the window starts from); a Run's or a pod's story finds its records with a
substring filter on the canonical payload (``"kind":"Run","name":"x","namespace":"y"``
is contiguous because keys are sorted) and checks every match after parsing. When the
typed history tables exist, these methods read them instead and no page changes.

The connection is read-only twice over: SQLite is opened with ``mode=ro`` (and
``PRAGMA query_only``), PostgreSQL sessions with ``default_transaction_read_only``;
``deploy/README.md`` also shows a role that can only ``SELECT``.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal import backends, errors, migrate, schema
from kruntimes.ui import indexed

_R = schema.journal_records

#: Parsed checkpoints kept in memory (each ~1 MB of JSON at 1,000 pods and 2,400 placed Runs).
CHECKPOINTS_KEPT = 4
TERMINAL = frozenset({"Succeeded", "Failed"})


class JournalNotFound(errors.JournalError):
    """The URL names no journal (an SQLite file that is not there)."""


def open_reader(url: str) -> Reader:
    """A ``Reader`` on the journal at ``url``, read-only; its schema must be current."""
    parsed = backends.parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database or ""
        if path in ("", ":memory:") or not Path(path).is_file():
            raise JournalNotFound(f"no journal at {path or '(in-memory)'}: pass --journal sqlite:///PATH of an "
                                  "existing journal (the scheduler's, or the one `kruntimes demo` wrote)")
        engine = _sqlite_read_only(str(Path(path).resolve()), parsed)
    else:
        # Added to the URL's own options (a search_path, say), not instead of them.
        options = " ".join(filter(None, (str(parsed.query.get("options") or ""),
                                         "-c default_transaction_read_only=on")))
        engine = sa.create_engine(parsed.update_query_dict({"options": options}), pool_pre_ping=True)
    try:
        migrate.require_head(engine)
    except BaseException:
        engine.dispose()
        raise
    return Reader(backends.Journal(engine))


def _sqlite_read_only(path: str, url: sa.URL) -> sa.Engine:
    uri = f"file:{quote(path)}?mode=ro"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=10)
        conn.execute("PRAGMA query_only=1")
        return conn

    return sa.create_engine(url, creator=connect)


def _at(value: Any) -> datetime:
    """``recorded_at`` as stored (SQLite text, PostgreSQL datetime) → aware UTC datetime."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
    parsed = datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def _needle(**fields: str) -> str:
    """The canonical JSON text of consecutive (sorted) payload fields, to find records by substring."""
    return ",".join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=False)}" for k, v in fields.items())


@dataclass(frozen=True)
class Record:
    lsn: int
    at: datetime
    kind: str
    incarnation: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Bounds:
    first_lsn: int
    last_lsn: int
    first_at: datetime
    last_at: datetime


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
    """One placement: a Run on a pod from its reservation (or from before the window) to its end."""

    namespace: str
    run: str
    run_uid: str
    pod: str
    requests: dict[str, int]
    start: datetime | None  # None: placed before the window's starting checkpoint
    end: datetime | None = None  # None: still there at the window's end
    ended: str = ""  # Succeeded, Failed, deleted, bind_conflict, bind_error, aborted, ...
    lsn: int = 0


@dataclass
class Window:
    """What happened in ``[since, until)``: the lanes, the bars, the pending reasons, the binds."""

    since: datetime
    until: datetime
    lanes: dict[tuple[str, str], Lane] = field(default_factory=dict)
    bars: list[Bar] = field(default_factory=list)
    pending: list[tuple[datetime, str, str]] = field(default_factory=list)  # (at, reason, run_uid)
    binds: list[tuple[datetime, str]] = field(default_factory=list)  # (at, ok|conflict|error)
    records_read: int = 0


class Reader:
    """The read side of the web view: one method per question a page asks."""

    def __init__(self, journal: backends.Journal) -> None:
        self.journal = journal
        self._lock = threading.Lock()
        self._starts: OrderedDict[int, tuple[dict[tuple[str, str], Lane], dict[str, Bar]]] = OrderedDict()
        #: Whether the journal has the typed history tables (issue 15): then look-ups use their indexes.
        self.tables = indexed.present(journal.engine)

    def close(self) -> None:
        self.journal.engine.dispose()

    @property
    def backend(self) -> str:
        return self.journal.backend

    # -- plumbing ----------------------------------------------------------------------------

    def _execute(self, stmt: sa.Executable) -> list[sa.Row[Any]]:
        try:
            with self.journal.engine.connect() as conn:
                return list(conn.execute(stmt))
        except sa_exc.DBAPIError as exc:
            raise errors.JournalUnavailable(f"cannot read the journal ({self.backend}): {exc.orig}") from exc

    def _records(self, stmt: sa.Select[Any]) -> Iterator[Record]:
        for lsn, at, kind, incarnation, payload in self._execute(stmt):
            yield Record(lsn, _at(at), kind, incarnation, orjson.loads(payload))

    @staticmethod
    def _select() -> sa.Select[Any]:
        # recorded_at as stored: parsing it through the column type costs more than the payload.
        return sa.select(_R.c.lsn, sa.type_coerce(_R.c.recorded_at, sa.String), _R.c.kind, _R.c.incarnation,
                         _R.c.payload)

    def _contains(self, text: str) -> sa.ColumnElement[bool]:
        if self.journal.engine.dialect.name == "sqlite":
            return sa.func.instr(_R.c.payload, text) > 0
        return sa.func.strpos(_R.c.payload, text) > 0

    # -- the journal as a whole ---------------------------------------------------------------

    def bounds(self) -> Bounds | None:
        """First and last LSN and instant (LSN 0, a prune record, is not a scheduler's record)."""
        # Two ordered look-ups on the key: MIN/MAX with a WHERE would scan on SQLite.
        at = sa.type_coerce(_R.c.recorded_at, sa.String)
        first = self._execute(sa.select(_R.c.lsn, at).where(_R.c.lsn > 0).order_by(_R.c.lsn).limit(1))
        if not first:
            return None
        last = self._execute(sa.select(_R.c.lsn, at).order_by(_R.c.lsn.desc()).limit(1))
        return Bounds(first[0][0], last[0][0], _at(first[0][1]), _at(last[0][1]))

    def recorded_at_lsn(self, lsn: int) -> datetime | None:
        """When the first record at or after ``lsn`` was recorded (to size a default window by records)."""
        found = self._execute(sa.select(sa.type_coerce(_R.c.recorded_at, sa.String)).where(_R.c.lsn >= lsn)
                              .order_by(_R.c.lsn).limit(1))
        return _at(found[0][0]) if found else None

    def incarnations(self) -> list[Record]:
        """Every scheduler incarnation's first record (its version and configuration), oldest first."""
        stmt = self._select().where(_R.c.kind == "incarnation").order_by(_R.c.lsn)
        return list(self._records(stmt))

    def config_at(self, lsn: int) -> dict[str, Any]:
        """The scheduler configuration of the incarnation that wrote LSN ``lsn`` (or the first one)."""
        found = [r for r in self.incarnations() if r.lsn <= lsn] or self.incarnations()
        return dict(found[-1].payload.get("config") or {}) if found else {}

    def kind_counts(self) -> dict[str, int]:
        stmt = sa.select(_R.c.kind, sa.func.count()).group_by(_R.c.kind)
        return {kind: n for kind, n in self._execute(stmt)}

    def leader_records(self, limit: int = 200) -> list[Record]:
        stmt = self._select().where(_R.c.kind == "leader").order_by(_R.c.lsn.desc()).limit(limit)
        return list(reversed(list(self._records(stmt))))

    def prune_record(self) -> Record | None:
        return next(self._records(self._select().where(_R.c.lsn == 0)), None)

    def checkpoints(self, limit: int = 20) -> list[tuple[int, datetime]]:
        stmt = (sa.select(_R.c.lsn, sa.type_coerce(_R.c.recorded_at, sa.String))
                .where(_R.c.kind == "checkpoint").order_by(_R.c.lsn.desc()).limit(limit))
        return [(lsn, _at(at)) for lsn, at in self._execute(stmt)]

    def cycles_between(self, since: datetime, until: datetime) -> int:
        stmt = (sa.select(sa.func.count()).select_from(_R)
                .where(_R.c.recorded_at >= since, _R.c.recorded_at < until, _R.c.kind == "cycle"))
        return int(self._execute(stmt)[0][0])

    # -- a time window ------------------------------------------------------------------------

    def _window_filter(self, since: datetime) -> sa.ColumnElement[bool]:
        """The records a window draws from, chosen in the database so that Python parses only those.

        Reservations and releases from the starting checkpoint on (they open and close
        bars); the Run mutation that ends a Run (the phase it ended in, or its deletion
        before it ended); Pod additions and deletions (the lanes);
        and, inside the window only, binds and the cycles that left a Run Pending. Pod
        heartbeat renewals, Run phase changes on the way and scheduled cycles - most
        of the journal - stay in the database.
        """
        has = self._contains
        # `kind || ''`: the window is one stretch of LSNs, read in order by the primary key;
        # an index on kind would turn it into scattered look-ups and a sort.
        kind = _R.c.kind.concat("")
        ended = sa.or_(has('"phase":"Succeeded"'), has('"phase":"Failed"'))
        return sa.or_(
            kind.in_(("reserve", "release")),
            sa.and_(kind == "mutation", sa.or_(
                has('"event":"ADDED","kind":"Pod"'), has('"event":"DELETED","kind":"Pod"'),
                sa.and_(has('"event":"MODIFIED","kind":"Run"'), ended),
                # A Run deleted after it ended was closed by the modification that ended it.
                sa.and_(has('"event":"DELETED","kind":"Run"'), sa.not_(ended)))),
            sa.and_(_R.c.recorded_at >= since,
                    sa.or_(kind == "bind", sa.and_(kind == "cycle", has('"status":"unschedulable"')))),
        )

    def lsn_at(self, at: datetime) -> int:
        """The newest LSN recorded at or before ``at`` (0 if none): a bound later look-ups walk back from.

        One probe of the ``recorded_at`` index; searching by LSN from there lets a query
        walk the primary key backwards instead of filtering every later record by time.
        """
        found = self._execute(sa.select(_R.c.lsn).where(_R.c.recorded_at <= at)
                              .order_by(_R.c.recorded_at.desc(), _R.c.lsn.desc()).limit(1))
        return int(found[0][0]) if found else 0

    def _checkpoint_before(self, at: datetime) -> Record | None:
        stmt = (self._select().where(_R.c.kind == "checkpoint", _R.c.lsn <= self.lsn_at(at))
                .order_by(_R.c.lsn.desc()).limit(1))
        return next(self._records(stmt), None)

    def _start_state(self, at: datetime) -> tuple[int, dict[tuple[str, str], Lane], dict[str, Bar]]:
        """The newest checkpoint at or before ``at``: its LSN, its pods as lanes, its placed Runs as open bars.

        A checkpoint never changes once written, so what it parses to is kept (the last
        few) and handed out as copies: the next page over the same stretch of time
        starts from it without reading a megabyte of JSON again.
        """
        found = self._execute(sa.select(_R.c.lsn, _R.c.incarnation).where(
            _R.c.kind == "checkpoint", _R.c.lsn <= self.lsn_at(at)).order_by(_R.c.lsn.desc()).limit(1))
        if not found:
            return 0, {}, {}
        checkpoint_lsn, epoch = found[0]
        with self._lock:
            cached = self._starts.get(checkpoint_lsn)
            if cached is not None:
                self._starts.move_to_end(checkpoint_lsn)
        if cached is None:
            checkpoint = self.record(checkpoint_lsn, epoch)
            assert checkpoint is not None
            scratch = Window(at, at)
            bars: dict[str, Bar] = {}
            for pod in checkpoint.payload.get("pods", ()):
                _observe_pod(scratch, pod, None)
            for run in checkpoint.payload.get("runs", ()):
                if run.get("pod_name") and run.get("phase") not in TERMINAL:
                    bars[run["uid"]] = Bar(run["namespace"], run["name"], run["uid"], run["pod_name"],
                                           dict(map(tuple, run.get("requests") or ())), None)
            for a in checkpoint.payload.get("assumed", ()):
                bars.setdefault(a["run_uid"], Bar(a["namespace"], a["run_name"], a["run_uid"], a["pod_name"],
                                                  dict(map(tuple, a.get("requests") or ())), None))
            cached = (scratch.lanes, bars)
            with self._lock:
                self._starts[checkpoint_lsn] = cached
                while len(self._starts) > CHECKPOINTS_KEPT:
                    self._starts.popitem(last=False)
        lanes, bars = cached
        return (checkpoint_lsn, {k: dataclasses.replace(v, capacity=dict(v.capacity)) for k, v in lanes.items()},
                {k: dataclasses.replace(v) for k, v in bars.items()})

    def window(self, since: datetime, until: datetime) -> Window:
        """Lanes, bars, Pending reasons and binds of ``[since, until)``.

        From the newest checkpoint recorded at or before ``since`` (its pods and the Runs
        on them are the window's starting state; a Run placed before it has no start and
        its bar begins at the window's edge), the events after it, in LSN order, open and
        close bars: a reservation opens one, a release, the Run's end or a new
        reservation closes it; pods added and deleted change the lanes.
        """
        out = Window(since, until)
        start_lsn, out.lanes, open_bars = self._start_state(since)
        if self.tables:
            upto = self.lsn_at(until)
            kinds = self._select().where(_R.c.kind.in_(("reserve", "release")), _R.c.lsn > start_lsn,
                                         _R.c.lsn <= upto)
            events = [_event(rec) for rec in self._records(kinds)]
            events += indexed.window_events(self._execute, [i.incarnation for i in self.journal.incarnations()],
                                            start_lsn, upto)
            events.sort(key=lambda e: e[1])
            out.binds = indexed.binds(self._execute, since, until)
            out.pending = indexed.pending(self._execute, since, until)
        else:
            events = self._events_from_records(out, start_lsn)
        closed: list[Bar] = []
        for event in events:
            out.records_read += 1
            what, lsn, at = event[:3]
            if what == "pod":
                _, _, _, change, namespace, name, obj = event
                _observe_pod(out, obj, at if change == "DELETED" else None, key=(namespace, name))
            elif what == "reserve":
                _, _, _, namespace, run, uid, pod, requests = event
                _close(open_bars, closed, uid, at, "replaced")
                open_bars[uid] = Bar(namespace, run, uid, pod, requests, at, lsn=lsn)
            else:  # an end or a release
                _close(open_bars, closed, event[3], at, event[4])
        out.bars = [b for b in closed + list(open_bars.values()) if b.end is None or b.end >= since]
        out.bars.sort(key=lambda b: (b.start or since, b.lsn))
        return out

    def _events_from_records(self, out: Window, start_lsn: int) -> list[tuple[Any, ...]]:
        """The window's events from the records themselves; binds and Pending cycles go straight to ``out``."""
        stmt = (self._select().where(_R.c.lsn > start_lsn, _R.c.recorded_at < out.until,
                                     self._window_filter(out.since)).order_by(_R.c.lsn))
        events: list[tuple[Any, ...]] = []
        for rec in self._records(stmt):
            p = rec.payload
            if rec.kind == "bind":
                out.binds.append((rec.at, str(p.get("result"))))
            elif rec.kind == "cycle":
                reasons = sorted({str(reason) for _plugin, reason, _pods in p.get("rejections") or ()})
                for reason in reasons or [str(p.get("message") or "unschedulable")]:
                    out.pending.append((rec.at, reason, str(p.get("run_uid", ""))))
            else:
                events.append(_event(rec))
        return events

    # -- one Run ------------------------------------------------------------------------------

    def run_records(self, namespace: str, name: str, *, limit: int = 2000) -> list[Record]:
        """Every record about the Run(s) named ``namespace/name``, in LSN order (the newest ``limit``).

        Two passes: the cycles, Run mutations and reservations that carry its name
        (one scan, matched on the quoted name and checked after parsing), then, from
        the first of those on, the binds, releases and drops that name one of its UIDs.
        """
        if self.tables:
            return self._by_keys(indexed.run_keys(self._execute, namespace, name, limit))[-limit:]
        named = self._select().where(_R.c.kind.in_(("cycle", "mutation", "reserve")),
                                     self._contains(json.dumps(name, ensure_ascii=False)))
        found: dict[int, Record] = {}
        for rec in self._records(named.order_by(_R.c.lsn.desc()).limit(limit * 4)):
            p = rec.payload
            if rec.kind == "cycle":
                mine = p.get("namespace") == namespace and p.get("run") == name
            elif rec.kind == "reserve":
                a = p.get("assumption") or {}
                mine = a.get("namespace") == namespace and a.get("run_name") == name
            else:
                mine = p.get("kind") == "Run" and p.get("namespace") == namespace and p.get("name") == name
            if mine:
                found[rec.lsn] = rec
        uids = sorted({_run_uid(r) for r in found.values()} - {""})
        if uids:
            stmt = self._select().where(_R.c.lsn >= min(found), _R.c.kind.in_(("release", "bind", "drop")),
                                        sa.or_(*(self._contains(_needle(run_uid=u)) for u in uids)))
            for rec in self._records(stmt.order_by(_R.c.lsn.desc()).limit(limit * 4)):
                if rec.payload.get("run_uid") in uids and rec.payload.get("namespace") == namespace:
                    found[rec.lsn] = rec
        return [found[lsn] for lsn in sorted(found)][-limit:]

    def record(self, lsn: int, epoch: str | None = None) -> Record | None:
        """The record at ``lsn`` (of ``epoch`` when given: LSNs are unique only within an epoch)."""
        stmt = self._select().where(_R.c.lsn == lsn)
        if epoch is not None:
            stmt = stmt.where(_R.c.incarnation == epoch)
        return next(self._records(stmt.order_by(_R.c.incarnation)), None)

    def records_at(self, lsn: int) -> list[Record]:
        """Every record at ``lsn``, one per epoch that has one."""
        return list(self._records(self._select().where(_R.c.lsn == lsn).order_by(_R.c.incarnation)))

    def epochs(self) -> list[sa.Row[Any]]:
        """Each epoch's stored head and end (``journal_epochs``), oldest first."""
        e = schema.journal_epochs
        return self._execute(sa.select(e.c.epoch, e.c.first_lsn, e.c.head_lsn, e.c.head_hash, e.c.algorithm,
                                       e.c.key_id, e.c.started_at, e.c.end_lsn, e.c.end_reason)
                             .order_by(e.c.started_at, e.c.epoch))

    def _by_keys(self, keys: Iterable[tuple[str, int]]) -> list[Record]:
        """The records at these (epoch, LSN) keys, in LSN order: primary-key look-ups, nothing scanned."""
        wanted = set(keys)
        lsns = sorted({lsn for _, lsn in wanted})
        found: list[Record] = []
        for start in range(0, len(lsns), 500):
            stmt = self._select().where(_R.c.lsn.in_(lsns[start:start + 500]))
            found += [r for r in self._records(stmt) if (r.incarnation, r.lsn) in wanted]
        return sorted(found, key=lambda r: r.lsn)

    # -- one pod ------------------------------------------------------------------------------

    def pod_observation(self, namespace: str, name: str, at: datetime) -> Record | None:
        """The newest mutation of the pod recorded at or before ``at``."""
        if self.tables:
            found = self._by_keys(indexed.pod_key(self._execute, namespace, name, at))
            if found:
                return found[0]
        stmt = (self._select().where(_R.c.lsn <= self.lsn_at(at), _R.c.kind.concat("") == "mutation",
                                     self._contains(_needle(kind="Pod", name=name, namespace=namespace)))
                .order_by(_R.c.lsn.desc()).limit(1))
        rec = next(self._records(stmt), None)
        if rec is None:
            checkpoint = self._checkpoint_before(at)
            for pod in (checkpoint.payload.get("pods", ()) if checkpoint else ()):
                if pod.get("namespace") == namespace and pod.get("name") == name:
                    return Record(checkpoint.lsn, checkpoint.at, "checkpoint", checkpoint.incarnation,  # type: ignore[union-attr]
                                  {"event": "CHECKPOINT", "object": pod})
        return rec

    def pod_runs(self, namespace: str, name: str, at: datetime) -> list[Bar]:
        """The Runs on the pod at ``at``: placed (or found in the checkpoint) and not yet ended."""
        if self.tables:
            bars = [Bar(namespace, run, uid, name, {}, placed, ended, str(why or ""), lsn)
                    for run, uid, placed, ended, why, lsn in indexed.held(self._execute, namespace, name, at)]
            for bar in bars:  # requests are not in the tables: the Run's observation up to T says them
                for rec in self._by_keys(indexed.run_key(self._execute, namespace, bar.run_uid, at)):
                    bar.requests = dict(map(tuple, (rec.payload.get("object") or {}).get("requests") or ()))
            return bars
        window = self.window(at, at)
        return [b for b in window.bars if b.namespace == namespace and b.pod == name
                and (b.start is None or b.start <= at) and (b.end is None or b.end > at)]


def _event(rec: Record) -> tuple[Any, ...]:
    """A window's record as its fold takes it (see ``indexed.window_events`` for the other two shapes)."""
    p = rec.payload
    if rec.kind == "reserve":
        a = p.get("assumption") or {}
        return ("reserve", rec.lsn, rec.at, a.get("namespace", ""), a.get("run_name", ""), a.get("run_uid", ""),
                a.get("pod_name", ""), dict(map(tuple, a.get("requests") or ())))
    if rec.kind == "release":
        return ("release", rec.lsn, rec.at, p.get("run_uid", ""), str(p.get("why", "released")))
    if p.get("kind") == "Pod":
        return ("pod", rec.lsn, rec.at, p.get("event"), p.get("namespace", ""), p.get("name", ""),
                p.get("object") or {})
    ended = "deleted" if p.get("event") == "DELETED" else str((p.get("object") or {}).get("phase"))
    return ("end", rec.lsn, rec.at, p.get("uid", ""), ended)


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
    lane.runtime = str(obj.get("runtime") or lane.runtime)
    lane.capacity = capacity or lane.capacity
    lane.ready, lane.terminating = bool(obj.get("ready")), bool(obj.get("terminating"))
    lane.heartbeat = obj.get("heartbeat", lane.heartbeat)
    lane.deleted_at = deleted_at


def _run_uid(rec: Record) -> str:
    if rec.kind == "cycle":
        return str(rec.payload.get("run_uid") or "")
    if rec.kind == "reserve":
        return str((rec.payload.get("assumption") or {}).get("run_uid") or "")
    return str(rec.payload.get("uid") or "")


def _close(open_bars: dict[str, Bar], closed: list[Bar], uid: str, at: datetime, why: str) -> None:
    bar = open_bars.pop(uid, None)
    if bar is not None:
        bar.end, bar.ended = at, why
        closed.append(bar)
