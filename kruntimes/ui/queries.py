"""Every database read the web view makes, behind one class, over a read-only connection.

Why one module: the pages must not care where an answer comes from. A Run's story, a
pod at an instant, a window's pods and the bars of the lanes on screen are looked up
through the typed history tables' indexes (``indexed``), and the records they point at
are fetched by key; a window's figures are SQL aggregates per time bucket over the same
tables (``buckets``), and its starting state is the newest checkpoint before it (kept
parsed for the next page: a record never changes). Nothing scans the journal, and no
payload but that checkpoint's is parsed for a window.

The connection is read-only twice over: SQLite is opened with ``mode=ro`` (and
``PRAGMA query_only``), PostgreSQL sessions with ``default_transaction_read_only``;
``deploy/README.md`` also shows a role that can only ``SELECT``.
"""

from __future__ import annotations

import dataclasses
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

from kruntimes import wire
from kruntimes.journal import errors
from kruntimes.journal.history import buckets, indexer
from kruntimes.journal.history import order as epoch_order
from kruntimes.journal.history import runs as history
from kruntimes.journal.history import windows as indexed
from kruntimes.journal.store import backends, engines, migrate, schema

_R = schema.journal_records

#: Parsed checkpoints kept in memory (each ~1 MB of JSON at 1,000 pods and 2,400 placed Runs).
CHECKPOINTS_KEPT = 4
TERMINAL = wire.TERMINAL_PHASES


class JournalNotFound(errors.JournalError):
    """The URL names no journal (an SQLite file that is not there)."""


def open_reader(url: str) -> Reader:
    """A ``Reader`` on the journal at ``url``, read-only; its schema must be current."""
    parsed = engines.parse_url(url)
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


@dataclass(frozen=True)
class Record:
    lsn: int
    at: datetime
    kind: str
    incarnation: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Bounds:
    """The journal's first record (the oldest epoch's first) and its newest (the newest epoch's last)."""

    first_lsn: int
    last_lsn: int
    first_at: datetime
    last_at: datetime
    first_epoch: str
    last_epoch: str


@dataclass(frozen=True)
class Span:
    """One epoch's stored records: its first and last LSN and when they were recorded."""

    epoch: str
    first_lsn: int
    first_at: datetime
    last_lsn: int
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
    ``upto``, per epoch, the newest LSN recorded at or before ``until``. Both are cuts
    (``epoch_order.Cut``): LSNs overlap between epochs, so a bare LSN range would mix
    one epoch's records into another's stretch.
    """

    since: datetime
    until: datetime
    lanes: dict[tuple[str, str], Lane] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    upto: dict[str, int] = field(default_factory=dict)
    placed_before: dict[str, set[str]] = field(default_factory=dict)  # namespace -> Run names
    records_read: int = 0  # pod additions and deletions folded after the checkpoint


class Reader:
    """The read side of the web view: one method per question a page asks."""

    def __init__(self, journal: backends.Journal) -> None:
        self.journal = journal
        self._lock = threading.Lock()
        # Parsed checkpoints by (epoch, LSN): their lanes and the Runs they show placed.
        self._starts: OrderedDict[tuple[str, int], tuple[dict[tuple[str, str], Lane], dict[str, set[str]]]] = (
            OrderedDict())

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

    # -- the journal as a whole ---------------------------------------------------------------

    def spans(self) -> list[Span]:
        """Each epoch's first and last record, oldest epoch first (``epoch_order``).

        Probes of the primary key (epoch, LSN), no pass over it; LSN 0, a prune record,
        is not a scheduler's record.
        """
        rows = {epoch: (int(first), _at(first_at), int(last), _at(last_at))
                for epoch, first, first_at, last, last_at in self._execute(epoch_order.spans_query())}
        return [Span(s.epoch, *rows[s.epoch])
                for s in epoch_order.ordered((e, first, at) for e, (first, at, _, _) in rows.items())]

    def bounds(self, spans: list[Span] | None = None) -> Bounds | None:
        """The first record (the oldest epoch's first) and the newest (the last of the epoch that recorded last)."""
        spans = self.spans() if spans is None else spans
        if not spans:
            return None
        last = max(reversed(spans), key=lambda s: s.last_at)  # a tie goes to the newer epoch
        return Bounds(spans[0].first_lsn, last.last_lsn, spans[0].first_at, last.last_at, spans[0].epoch, last.epoch)

    def recorded_at_back(self, records: int) -> datetime | None:
        """When the record ``records`` back from the newest was recorded, counting epoch by epoch from the newest
        (to size a default window by records); None if the journal holds fewer.

        An epoch's count is its LSN span (gap-free within an epoch); then one probe of the key.
        """
        for s in reversed(self.spans()):
            count = s.last_lsn - s.first_lsn + 1
            if records < count:
                found = self._execute(sa.select(sa.type_coerce(_R.c.recorded_at, sa.String))
                                      .where(_R.c.incarnation == s.epoch, _R.c.lsn >= s.last_lsn - records)
                                      .order_by(_R.c.lsn).limit(1))
                return _at(found[0][0]) if found else None
            records -= count
        return None

    def incarnations(self) -> list[Record]:
        """Every scheduler incarnation's first record (its version and configuration), oldest first.

        By time, then epoch order (not the epoch's ID), then LSN: LSNs overlap between epochs
        begun while the database was away.
        """
        stmt = self._select().where(_R.c.kind == "incarnation").order_by(
            *epoch_order.order(_R.c.recorded_at, _R.c.incarnation, _R.c.lsn, self._epochs()))
        return list(self._records(stmt))

    def config_at(self, lsn: int, epoch: str | None = None) -> dict[str, Any]:
        """The scheduler configuration of the incarnation that wrote (``epoch``, ``lsn``).

        Without the epoch, the newest incarnation at or below ``lsn`` (or the first one):
        a guess where epochs' LSNs overlap.
        """
        every = self.incarnations()
        found = [r for r in every if r.incarnation == epoch] if epoch is not None else []
        found = found or [r for r in every if r.lsn <= lsn] or every
        return dict(found[-1].payload.get("config") or {}) if found else {}

    def kind_counts(self) -> dict[str, int]:
        stmt = sa.select(_R.c.kind, sa.func.count()).group_by(_R.c.kind)
        return {kind: n for kind, n in self._execute(stmt)}

    def leader_records(self, limit: int = 200) -> list[Record]:
        """The newest ``limit`` leader records, oldest first: by time, then epoch order, then LSN."""
        stmt = (self._select().where(_R.c.kind == "leader")
                .order_by(*epoch_order.order(_R.c.recorded_at, _R.c.incarnation, _R.c.lsn, self._epochs(),
                                             newest_first=True)).limit(limit))
        return list(reversed(list(self._records(stmt))))

    def history_lag(self) -> list[indexer.Lag]:
        """The epochs the history tables trail (empty: caught up); one query on the tiny journal_epochs."""
        return self.journal.history_lag()

    def prune_record(self) -> Record | None:
        """The newest prune record (each prune adds one at LSN 0: ``journal.prune_record``)."""
        return next(self._records(self._select().where(_R.c.lsn == 0).order_by(_R.c.recorded_at.desc()).limit(1)),
                    None)

    def checkpoints(self, limit: int = 20, *, at: datetime | None = None) -> list[tuple[str, int, datetime]]:
        """The newest checkpoints (recorded at or before ``at``, if given) as (epoch, LSN, when), newest first.

        Newest by time, then epoch order, then LSN: the highest LSN may be an older epoch's.
        """
        stmt = (sa.select(_R.c.incarnation, _R.c.lsn, sa.type_coerce(_R.c.recorded_at, sa.String))
                .where(_R.c.kind == "checkpoint")
                .order_by(*epoch_order.order(_R.c.recorded_at, _R.c.incarnation, _R.c.lsn, self._epochs(),
                                             newest_first=True)).limit(limit))
        if at is not None:
            stmt = stmt.where(_R.c.recorded_at <= at)
        return [(epoch, lsn, _at(when)) for epoch, lsn, when in self._execute(stmt)]

    def cycles_between(self, since: datetime, until: datetime) -> int:
        stmt = (sa.select(sa.func.count()).select_from(_R)
                .where(_R.c.recorded_at >= since, _R.c.recorded_at < until, _R.c.kind == "cycle"))
        return int(self._execute(stmt)[0][0])

    # -- a time window ------------------------------------------------------------------------

    def newest_at(self, at: datetime, spans: list[Span] | None = None, *,
                  strictly: bool = False) -> tuple[str, int] | None:
        """(epoch, LSN) of the newest record recorded at or before ``at`` (before it, ``strictly``): by time,
        then epoch order, then LSN. One probe of the ``recorded_at`` index, walking back from ``at``."""
        oldest_first = [s.epoch for s in (self.spans() if spans is None else spans)]
        found = self._execute(sa.select(_R.c.incarnation, _R.c.lsn)
                              .where(_R.c.recorded_at < at if strictly else _R.c.recorded_at <= at,
                                     _R.c.lsn >= epoch_order.FIRST_SCHEDULER_LSN)
                              .order_by(*epoch_order.order(_R.c.recorded_at, _R.c.incarnation, _R.c.lsn,
                                                           oldest_first, newest_first=True)).limit(1))
        return (str(found[0][0]), int(found[0][1])) if found else None

    def cut_at(self, at: datetime, spans: list[Span] | None = None, *,
               strictly_before: Iterable[str] = ()) -> dict[str, int]:
        """Per epoch, the newest LSN recorded at or before ``at`` (before it, for the epochs ``strictly_before``
        names); an epoch with none is absent. The per-epoch LSN ranges a time window maps to.

        An epoch wholly before or after ``at`` is answered from its span. One that ``at``
        falls inside (usually one: epochs seldom overlap in time) from the newest record
        before ``at`` when that is the epoch's (a probe of the ``recorded_at`` index; LSNs
        grow with time within an epoch), else by a search within the epoch.
        """
        spans = self.spans() if spans is None else spans
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
                newest[strictly] = self.newest_at(at, spans, strictly=strictly)
            found_at = newest[strictly]
            if found_at is not None and found_at[0] == s.epoch:
                cut[s.epoch] = found_at[1]
                continue
            when = _R.c.recorded_at < at if strictly else _R.c.recorded_at <= at
            found = self._execute(sa.select(_R.c.lsn).where(_R.c.incarnation == s.epoch, when,
                                                            _R.c.lsn >= epoch_order.FIRST_SCHEDULER_LSN)
                                  .order_by(_R.c.recorded_at.desc(), _R.c.lsn.desc()).limit(1))
            if found:
                cut[s.epoch] = int(found[0][0])
        return cut

    def _checkpoint_before(self, at: datetime) -> Record | None:
        found = self.checkpoints(1, at=at)
        return self.record(found[0][1], found[0][0]) if found else None

    def _start_state(self, at: datetime, spans: list[Span]) -> tuple[dict[str, int], dict[tuple[str, str], Lane],
                                                                     dict[str, set[str]]]:
        """The newest checkpoint at or before ``at``: where it stands per epoch (``Window.after``), its pods as
        lanes, the Runs it shows placed.

        Where it stands: its own (epoch, LSN); of the epochs before its own in epoch
        order, what they recorded up to its instant; of those after, before it. With no
        checkpoint, the start of every epoch.

        A checkpoint never changes once written, so what it parses to is kept (the last
        few) and shared: the next page over the same stretch of time starts from it
        without reading a megabyte of JSON again (a lane that changes is replaced, never
        changed in place).
        """
        found = self.checkpoints(1, at=at)
        if not found:
            return {}, {}, {}
        epoch, checkpoint_lsn, recorded = found[0]
        oldest_first = [s.epoch for s in spans]
        later = oldest_first[oldest_first.index(epoch) + 1:] if epoch in oldest_first else []
        after = {**self.cut_at(recorded, spans, strictly_before=later), epoch: checkpoint_lsn}
        key = (epoch, checkpoint_lsn)
        with self._lock:
            cached = self._starts.get(key)
            if cached is not None:
                self._starts.move_to_end(key)
        if cached is None:
            checkpoint = self.record(checkpoint_lsn, epoch)
            assert checkpoint is not None
            scratch = Window(at, at)
            placed: dict[str, set[str]] = {}
            for pod in checkpoint.payload.get("pods", ()):
                _observe_pod(scratch, pod, None)
            for run in checkpoint.payload.get("runs", ()):
                if run.get("pod_name") and run.get("phase") not in TERMINAL:
                    placed.setdefault(run["namespace"], set()).add(run["name"])
            for a in checkpoint.payload.get("assumed", ()):
                placed.setdefault(a["namespace"], set()).add(a["run_name"])
            cached = (scratch.lanes, placed)
            with self._lock:
                self._starts[key] = cached
                while len(self._starts) > CHECKPOINTS_KEPT:
                    self._starts.popitem(last=False)
        lanes, placed = cached
        # Shared, not copied: ``_observe_pod`` replaces a lane it changes instead of changing it in place.
        return after, dict(lanes), placed

    def window(self, since: datetime, until: datetime) -> Window:
        """The Runtime Pods of ``[since, until)``: the newest checkpoint at or before ``since``, then the pods
        added and deleted after it (``history_pods``, a key range per epoch), by time, epoch order and LSN."""
        out = Window(since, until)
        spans = self.spans()
        out.after, out.lanes, out.placed_before = self._start_state(since, spans)
        out.upto = self.cut_at(until, spans)
        for lsn, at, event, namespace, name, obj in indexed.pod_events(self._execute, [s.epoch for s in spans],
                                                                       out.after, out.upto):
            out.records_read += 1
            _observe_pod(out, obj, at if event == "DELETED" else None, key=(namespace, name))
        return out

    def _epochs(self) -> list[str]:
        """Every epoch with records, oldest first (``epoch_order``: by chained data, not a plain column)."""
        return [s.epoch for s in self.spans()]

    def bars(self, w: Window, lanes: list[tuple[str, str]]) -> list[Bar]:
        """The Runs placed on ``lanes`` (namespace, pod) during the window, from ``history_placements``."""
        if not lanes:
            return []
        return [Bar(namespace, run, uid, pod, {}, _at(placed), _at(ended) if ended else None, str(why or ""), lsn)
                for namespace, pod, run, uid, placed, ended, why, lsn in indexed.bars(self._execute, lanes, w.since,
                                                                                        w.until, self._epochs())]

    def held(self, w: Window, lanes: list[tuple[str, str]], b: buckets.Buckets) -> buckets.Held:
        """What the placements on ``lanes`` held during the window, grouped for ``buckets.utilisation``."""
        return buckets.held(self._execute, self.backend, b, lanes, w.after, w.upto, w.placed_before)

    def bind_counts(self, b: buckets.Buckets) -> dict[str, list[int]]:
        return buckets.binds(self._execute, self.backend, b)

    def pending_counts(self, b: buckets.Buckets) -> dict[str, list[int]]:
        return buckets.pending(self._execute, self.backend, b)

    # -- one Run ------------------------------------------------------------------------------

    def run_records(self, namespace: str, name: str, *, limit: int = 2000) -> list[Record]:
        """Every record about the Run(s) named ``namespace/name``, epoch by epoch in LSN order (the newest ``limit``):
        its cycles, observations and binds, and the records that ended its placements."""
        return self._by_keys(indexed.run_keys(self._execute, namespace, name, limit))[-limit:]

    def run_waits(self, namespace: str, run_uids: list[str]) -> dict[str, Any] | None:
        """The Run's wait in queue and unschedulable, as ``kruntimes history run`` reads them."""
        return history.run_waits(self.journal, namespace, run_uids)

    def record(self, lsn: int, epoch: str | None = None) -> Record | None:
        """The record at ``lsn`` (of ``epoch`` when given: LSNs are unique only within an epoch)."""
        stmt = self._select().where(_R.c.lsn == lsn)
        if epoch is not None:
            stmt = stmt.where(_R.c.incarnation == epoch)
        return next(self._records(stmt.order_by(_R.c.incarnation)), None)

    def held_devices(self, namespace: str, name: str, at: datetime) -> dict[str, Any]:
        """Run uid → the devices its placing cycle chose (SPEC §7.8), for the Runs the pod held at ``at``.

        The placements ``pod_runs`` reads, then their cycle records by key; a Run without a claim is absent."""
        p = indexed.PLACEMENTS
        keys = {(epoch, lsn): uid for uid, epoch, lsn in self._execute(
            sa.select(p.c.run_uid, p.c.epoch, p.c.lsn)
            .where(p.c.namespace == namespace, p.c.pod == name, p.c.outcome == "scheduled", p.c.decided_at <= at,
                   sa.or_(p.c.ended_at.is_(None), p.c.ended_at > at)))}
        found: dict[str, Any] = {}
        for rec in self._by_keys(keys):
            devices = rec.payload.get("devices") if rec.kind == "cycle" else None
            if isinstance(devices, dict) and devices.get("chosen") is not None:
                found[keys[(rec.incarnation, rec.lsn)]] = devices["chosen"]
        return found

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
        """The records at these (epoch, LSN) keys, epoch by epoch (oldest first), each in LSN order.

        Primary-key look-ups, nothing scanned. (epoch, LSN) is the identity and the order
        the writer stored them in (``epoch_order``): a bare LSN order would interleave
        epochs whose LSNs overlap.
        """
        wanted = set(keys)
        lsns = sorted({lsn for _, lsn in wanted})
        found: list[Record] = []
        for start in range(0, len(lsns), 500):
            stmt = self._select().where(_R.c.lsn.in_(lsns[start:start + 500]))
            found += [r for r in self._records(stmt) if (r.incarnation, r.lsn) in wanted]
        epochs = {r.incarnation for r in found}
        starts = epoch_order.ordered(self._execute(epoch_order.starts_query(epochs)))
        rank = {s.epoch: i for i, s in enumerate(starts)}
        return sorted(found, key=lambda r: (rank.get(r.incarnation, -1), r.lsn))

    # -- one pod ------------------------------------------------------------------------------

    def pod_observation(self, namespace: str, name: str, at: datetime) -> Record | None:
        """The newest mutation of the pod recorded at or before ``at`` (or its entry in the checkpoint
        a prune kept, when its older observations are gone)."""
        found = self._by_keys(indexed.pod_key(self._execute, namespace, name, at, self._epochs()))
        if found:
            return found[0]
        checkpoint = self._checkpoint_before(at)
        for pod in (checkpoint.payload.get("pods", ()) if checkpoint else ()):
            if pod.get("namespace") == namespace and pod.get("name") == name:
                return Record(checkpoint.lsn, checkpoint.at, "checkpoint", checkpoint.incarnation,  # type: ignore[union-attr]
                              {"event": "CHECKPOINT", "object": pod})
        return None

    def pod_runs(self, namespace: str, name: str, at: datetime) -> list[Bar]:
        """The Runs placed on the pod at ``at``: placed at or before it and not yet ended then."""
        return [Bar(namespace, run, uid, name, dict(buckets.amounts(requests)) if requests else {}, placed, ended,
                    str(why or ""), lsn)
                for run, uid, placed, ended, why, lsn, requests in indexed.held(self._execute, namespace, name, at,
                                                                                self._epochs())]


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
