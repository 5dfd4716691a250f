"""The derived history tables: typed, indexed rows for the questions people ask of the journal.

``journal_records`` is the source of truth, but its payloads are JSON text: a question
asked of them re-parses every record of its kind, so it slows down with the journal's
length. These tables hold what the questions read - cycles, their candidates and
rejections, placements and when they ended, pending episodes (a Run's wait from its
first Pending cycle to its placement), pod and Run observations, bind results, and two
hourly aggregates - each keyed by the record it came from, ``(epoch, lsn)``, where the
epoch is the record's ``incarnation`` (one leadership term; LSNs are only promised to be
unique within it).

They are written by the journal writer IN THE SAME TRANSACTION as the records they
come from (``Journal.append_batch``), from the payload dicts the writer built before
encoding, so they can never disagree with the log; records handed over already encoded
(a spool drain) are parsed once here. Deriving never rejects a record: a field of the
wrong type becomes NULL, and a record with no namespace or Run uid changes no episode
or placement.

Most rows are a pure function of one record. Three things follow a Run across records
and are kept by statements in LSN order instead: a placement's end (the Run's terminal
phase, its deletion, or a newer placement of it), a pending episode (opened by an
unschedulable cycle, extended by the next, closed by a placement, an invalid verdict or
the Run's deletion), and the counts (per hour, per epoch). Applying a journal's records in
the writer's order - epoch by epoch, oldest first, each in LSN order (LSNs of different
epochs may overlap: (epoch, LSN) is the identity) - gives the same tables whatever the
batch boundaries, so ``rebuild`` (``kruntimes journal reindex``) reproduces what the
writer built incrementally; a test holds both backends to that.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kruntimes import wire
from kruntimes.journal import records
# The tables live in ``tables``; their names stay readable here, where the rows are made.
from kruntimes.journal.history.tables import (  # noqa: F401
    COLUMNS, COPY_TYPES, ROW_TABLES, TABLE_NAMES, TABLES, binds, candidates, cycles, epochs, left_empty, placements,
    pod_hours, pods, rejection_hours, rejections, runs, waits, written_columns_exist)
from kruntimes.journal.history.values import bool_or_none as _bool
from kruntimes.journal.history.values import compact_json, hour_of, micros
from kruntimes.journal.history.values import int_or_none as _int
from kruntimes.journal.history.values import list_or_empty as _list
from kruntimes.journal.history.values import text_or_none as _str

TERMINAL_PHASES = {phase: phase.lower() for phase in wire.TERMINAL_PHASES}  # phase -> why its Run left the pod


# -- deriving a batch ---------------------------------------------------------------------------------


@dataclass
class Derived:
    """What a batch of records adds to the history tables, in the order it must be applied."""

    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=lambda: {t.name: [] for t in ROW_TABLES})
    #: Per Run (namespace, run_uid): its episode and placement statements, in LSN order.
    run_ops: dict[tuple[str, str], list[list[Any]]] = field(default_factory=dict)
    pod_hours: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    rejection_hours: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    epoch_cycles: Counter[str] = field(default_factory=Counter)
    #: Per Run (namespace, run_uid): its latest reservation in the batch, (epoch, lsn, requests as compact JSON).
    reserves: dict[tuple[str, str], tuple[str, int, str | None]] = field(default_factory=dict)
    #: Placements (epoch, lsn) whose reservation came before the batch: their requests are filled by SQL.
    unresolved: list[tuple[str, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return (any(self.rows.values()) or bool(self.run_ops) or bool(self.pod_hours) or bool(self.rejection_hours)
                or bool(self.epoch_cycles) or bool(self.unresolved))


# Statement kinds of ``Derived.run_ops`` (the first element of each op).
PENDING, STATUS, CLOSE, END = "pending", "status", "close", "end"


def derive(rows: Sequence[records.EncodedRecord], payloads: Sequence[Any] | None = None,
           stamp: Callable[[datetime], Any] | None = None, stamps: Sequence[Any] | None = None) -> Derived:
    """The history rows of ``rows`` (in LSN order); ``payloads[i]`` is row i's payload dict if known.

    A payload not given (or not a dict) is parsed from the stored text, for the kinds
    that have history rows only. ``stamp`` turns a record's time into what the backend
    stores (SQLite: text), once per record; ``stamps[i]``, when given, is row i's already
    (the writer stamps each record once for its own row and its history rows). Without
    either, rows hold the datetimes.
    """
    out = Derived()
    state: dict[tuple[str, str], _RunState] = {}
    for i, r in enumerate(rows):
        kind = r.kind
        handler = _HANDLERS.get(kind)
        if handler is None:
            continue
        payload = payloads[i] if payloads is not None else None
        if type(payload) is not dict:
            try:
                payload = json.loads(r.payload)
            except ValueError:
                continue
            if type(payload) is not dict:
                continue
        when = r.recorded_at
        at = stamps[i] if stamps is not None else stamp(when) if stamp is not None else when
        handler(out, state, r.incarnation, r.lsn, at, when, payload)
    return out


class _RunState:
    """Within one batch, what the last statements for a Run were (so repeats can be folded)."""

    __slots__ = ("key", "ops", "pending", "closed", "ended")

    def __init__(self, key: tuple[str, str], ops: list[list[Any]]) -> None:
        self.key = key
        self.ops = ops
        self.pending: list[Any] | None = None  # the open episode's statement, while the next can extend it
        self.closed = False  # the episode was closed in this batch: no open one is left to update
        self.ended = False  # the Run's placements were ended in this batch and none was made since


def _run_state(out: Derived, state: dict[tuple[str, str], _RunState], key: tuple[str, str]) -> _RunState:
    s = state.get(key)
    if s is None:
        s = state[key] = _RunState(key, out.run_ops.setdefault(key, []))
    return s


def _cycle(out: Derived, state: dict[tuple[str, str], _RunState], epoch: str, lsn: int, at: Any, when: datetime,
           p: dict[str, Any]) -> None:
    get, s, i = p.get, _str, _int
    namespace, run, run_uid = s(get("namespace")), s(get("run")), s(get("run_uid"))
    status, result, message = s(get("status")), s(get("result")), s(get("message"))
    chosen, total, snapshot = s(get("chosen")), i(get("total")), i(get("snapshot_lsn"))
    rows = out.rows
    out.epoch_cycles[epoch] += 1
    rows["history_cycles"].append((
        epoch, lsn, at, namespace, run, run_uid, snapshot, s(get("now")), status, result, chosen,
        s(get("chosen_uid")), total, message, i(get("pods_evaluated")), i(get("pods_feasible")),
        i(get("duration_us")), s(get("digest")), s(get("planner_version")), s(get("config_hash"))))
    candidates = get("candidates")
    if candidates:
        add = rows["history_candidates"].append
        for rank, c in enumerate(_list(candidates), 1):
            if type(c) is not dict:
                c = {}
            add((epoch, lsn, rank, s(c.get("pod")), i(c.get("total")), compact_json(c.get("scores"))))
    rejected = _list(get("rejections"))
    if rejected:
        _rejections(out, epoch, lsn, at, when, (namespace, run, run_uid, status, result), rejected)
    if chosen is not None:
        rows["history_placements"].append((
            epoch, lsn, at, namespace, run, run_uid, chosen, _str(p.get("chosen_uid")), _str(p.get("now")), total,
            result, snapshot, None, None, None, None, _requests(out, epoch, lsn, namespace, run_uid, snapshot)))
        if result == "scheduled" and namespace is not None:
            out.pod_hours[(namespace, chosen, hour_of(when))] += 1
    if namespace is None or run_uid is None:
        return
    _cycle_run_state(_run_state(out, state, (namespace, run_uid)), epoch, lsn, at, when,
                     (namespace, run, run_uid, status, result), chosen, message)

def _rejections(out: Derived, epoch: str, lsn: int, at: Any, when: datetime,
                run: tuple[str | None, str | None, str | None, str | None, str | None], rejected: list[Any]) -> None:
    """A cycle's rejection rows, and their counts in the hour's roll-up."""
    namespace, name, run_uid, status, result = run
    add = out.rows["history_rejections"].append
    hour = hour_of(when)
    counts = out.rejection_hours
    for position, entry in enumerate(rejected, 1):
        plugin, reason, n = (entry + [None, None, None])[:3] if type(entry) is list else (None, None, None)
        plugin, reason, n = _str(plugin), _str(reason), _int(n)
        add((epoch, lsn, position, at, namespace, name, run_uid, status, result, plugin, reason, n))
        if plugin is not None and reason is not None:
            total_for = counts.get((hour, plugin, reason))
            if total_for is None:
                counts[(hour, plugin, reason)] = [n or 0, 1]
            else:
                total_for[0] += n or 0
                total_for[1] += 1


def _cycle_run_state(rs: _RunState, epoch: str, lsn: int, at: Any, when: datetime,
                     run: tuple[str | None, str | None, str | None, str | None, str | None],
                     chosen: str | None, message: str | None) -> None:
    """What a cycle does to its Run's wait: a placement closes it, a Pending cycle opens or extends it."""
    namespace, name, run_uid, status, result = run
    if result == "scheduled" and chosen is not None:
        # A newer placement ends the one the Run held (its pod went away, it was re-planned).
        if not rs.ended:
            rs.ops.append([END, epoch, lsn, at, "replaced", namespace, run_uid])
        rs.ended = False
        _close(rs, epoch, lsn, at, when, "scheduled", chosen, status)
    elif status == "invalid":
        _close(rs, epoch, lsn, at, when, "invalid", None, status)
    elif status == "unschedulable":
        op = rs.pending
        if op is not None:  # extends the episode this batch opened or extended
            op[9:14] = [epoch, lsn, at, message, status]
            op[14] += 1
        else:
            rs.pending = [PENDING, epoch, lsn, namespace, name, run_uid, at, micros(when), message,
                          epoch, lsn, at, message, status, 1]
            rs.ops.append(rs.pending)
            rs.closed = False
    elif not rs.closed:
        if rs.pending is not None:
            rs.pending[13] = status
        else:
            rs.ops.append([STATUS, status, namespace, run_uid])


def _requests(out: Derived, epoch: str, lsn: int, namespace: str | None, run_uid: str | None,
              snapshot: int | None) -> str | None:
    """A placement's requests: those of the Run's reservation between the cycle's snapshot and the cycle.

    The scheduler reserves after planning on its snapshot and records the cycle once the
    bind is answered, so that reservation is the latest of the Run's in the same epoch
    with ``snapshot_lsn < lsn``. Usually it is in the same batch; when the batch began
    after it, ``_REQUESTS_SQL`` reads it from the stored record (a key range, no scan)
    and gives the same text, so batch boundaries change nothing.
    """
    if namespace is None or run_uid is None or snapshot is None:
        return None
    found = out.reserves.get((namespace, run_uid))
    if found is not None and found[0] == epoch:
        return found[2] if found[1] > snapshot else None  # a later one would be the latest
    out.unresolved.append((epoch, lsn))
    return None


def _reserve(out: Derived, state: dict[tuple[str, str], _RunState], epoch: str, lsn: int, at: Any,
             when: datetime, p: dict[str, Any]) -> None:
    a = p.get("assumption")
    if type(a) is not dict:
        return
    namespace, run_uid, requests = _str(a.get("namespace")), _str(a.get("run_uid")), a.get("requests")
    if namespace is not None and run_uid is not None:
        out.reserves[(namespace, run_uid)] = (epoch, lsn, compact_json(requests) if type(requests) is list else None)


def _close(s: _RunState, epoch: str, lsn: int, at: Any, when: datetime, outcome: str, pod: str | None,
           status: str | None) -> None:
    s.pending = None
    if s.closed:
        return  # nothing is open any more
    s.ops.append([CLOSE, epoch, lsn, at, outcome, pod, micros(when), status, *s.key])
    s.closed = True


def _mutation(out: Derived, state: dict[tuple[str, str], _RunState], epoch: str, lsn: int, at: Any,
              when: datetime, p: dict[str, Any]) -> None:
    get, s = p.get, _str
    kind, event = get("kind"), s(get("event"))
    obj = get("object")
    if type(obj) is not dict:
        obj = {}
    namespace, name, uid = s(get("namespace")), s(get("name")), s(get("uid"))
    if kind == "Pod":
        out.rows["history_pods"].append((
            epoch, lsn, at, event, namespace, name, uid, s(obj.get("runtime")), s(get("resource_version")),
            _bool(obj.get("ready")), _bool(obj.get("terminating")), s(obj.get("heartbeat")),
            compact_json(obj["capacity"]) if type(obj.get("capacity")) is list else None,
            s(obj.get("capacity_problem"))))
        return
    if kind != "Run":
        return
    phase = s(obj.get("phase"))
    out.rows["history_runs"].append((
        epoch, lsn, at, event, namespace, name, uid, s(obj.get("runtime")), s(get("resource_version")),
        phase, s(obj.get("pod_name")), s(obj.get("pending_message")), s(obj.get("end_reason")),
        s(obj.get("end_message"))))
    if namespace is None or uid is None:
        return
    why = "deleted" if event == "DELETED" else TERMINAL_PHASES.get(phase or "")
    if why is None:
        return
    rs = _run_state(out, state, (namespace, uid))
    if not rs.ended:
        rs.ops.append([END, epoch, lsn, at, why, namespace, uid])
        rs.ended = True
    if event == "DELETED":
        _close(rs, epoch, lsn, at, when, "deleted", None, None)


def _bind(out: Derived, state: dict[tuple[str, str], _RunState], epoch: str, lsn: int, at: Any, when: datetime,
          p: dict[str, Any]) -> None:
    out.rows["history_binds"].append((epoch, lsn, at, _str(p.get("namespace")), _str(p.get("run_uid")),
                                      _str(p.get("result")), _str(p.get("error"))))


_HANDLERS: dict[str, Callable[..., None]] = {"cycle": _cycle, "mutation": _mutation, "bind": _bind,
                                             "reserve": _reserve}
KINDS = frozenset(_HANDLERS)


# -- writing -------------------------------------------------------------------------------------------

# `?` placeholders; the PostgreSQL backend turns them into `%s`.
_PENDING_SQL = (
    "INSERT INTO history_waits (epoch, first_lsn, namespace, run, run_uid, first_pending_at, first_pending_us,"
    " first_reason, last_epoch, last_lsn, last_pending_at, last_reason, last_status, pending_cycles)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT (namespace, run_uid) WHERE end_lsn IS NULL DO UPDATE SET"
    " last_epoch = excluded.last_epoch, last_lsn = excluded.last_lsn, last_pending_at = excluded.last_pending_at,"
    " last_reason = excluded.last_reason, last_status = excluded.last_status,"
    " pending_cycles = history_waits.pending_cycles + excluded.pending_cycles")
_STATUS_SQL = "UPDATE history_waits SET last_status = ? WHERE namespace = ? AND run_uid = ? AND end_lsn IS NULL"
_CLOSE_SQL = (
    "UPDATE history_waits SET end_epoch = ?, end_lsn = ?, ended_at = ?, outcome = ?, pod = ?,"
    " waited_us = ? - first_pending_us, last_status = COALESCE(?, last_status)"
    " WHERE namespace = ? AND run_uid = ? AND end_lsn IS NULL")
_END_SQL = (
    "UPDATE history_placements SET end_epoch = ?, end_lsn = ?, ended_at = ?, end_reason = ?"
    " WHERE namespace = ? AND run_uid = ? AND outcome = 'scheduled' AND end_lsn IS NULL"
    " AND NOT (epoch = ? AND lsn >= ?)")
_POD_HOURS_SQL = (
    "INSERT INTO history_pod_hours (namespace, pod, hour, placements) VALUES (?,?,?,?)"
    " ON CONFLICT (namespace, pod, hour) DO UPDATE SET placements = history_pod_hours.placements + excluded.placements")
_REJECTION_HOURS_SQL = (
    "INSERT INTO history_rejection_hours (hour, plugin, reason, pods, cycles) VALUES (?,?,?,?,?)"
    " ON CONFLICT (hour, plugin, reason) DO UPDATE SET pods = history_rejection_hours.pods + excluded.pods,"
    " cycles = history_rejection_hours.cycles + excluded.cycles")


_EPOCHS_SQL = (
    "INSERT INTO history_epochs (epoch, cycles) VALUES (?,?)"
    " ON CONFLICT (epoch) DO UPDATE SET cycles = history_epochs.cycles + excluded.cycles")


# A placement's requests from its reservation's stored record (see ``_requests``): the Run's latest
# ``reserve`` in the placement's epoch between its snapshot and its cycle, found by key range. The
# payload is canonical JSON, so the array's text is what ``compact_json`` makes of it.
_RESERVE_RANGE = ("FROM journal_records j WHERE j.incarnation = history_placements.epoch"
                  " AND j.lsn > history_placements.snapshot_lsn AND j.lsn < history_placements.lsn"
                  " AND j.kind = 'reserve' AND {ns} = history_placements.namespace"
                  " AND {uid} = history_placements.run_uid ORDER BY j.lsn DESC LIMIT 1")
REQUESTS_FROM_RESERVE = {
    "sqlite": "(SELECT CASE WHEN json_type(j.payload, '$.assumption.requests') = 'array'"
              " THEN json_extract(j.payload, '$.assumption.requests') END "
              + _RESERVE_RANGE.format(ns="json_extract(j.payload, '$.assumption.namespace')",
                                      uid="json_extract(j.payload, '$.assumption.run_uid')") + ")",
    "postgresql": "(SELECT CASE WHEN json_typeof(j.payload::json #> '{assumption,requests}') = 'array'"
                  " THEN (j.payload::json #> '{assumption,requests}')::text END "
                  + _RESERVE_RANGE.format(ns="j.payload::json #>> '{assumption,namespace}'",
                                          uid="j.payload::json #>> '{assumption,run_uid}'") + ")",
}


def statements(derived: Derived, dialect: str = "sqlite") -> Iterable[tuple[str, list[tuple[Any, ...]]]]:
    """The (SQL, parameter rows) that apply ``derived`` after its rows are inserted, in order.

    A Run's statements go in its LSN order; different Runs' are independent, so the
    k-th statement of every Run goes in one round, grouped by kind (``executemany``).
    """
    if derived.unresolved:
        yield (f"UPDATE history_placements SET requests = {REQUESTS_FROM_RESERVE[dialect]}"
               " WHERE epoch = ? AND lsn = ?", list(derived.unresolved))
    queues = [ops for ops in derived.run_ops.values() if ops]
    k = 0
    while queues:
        by_kind: dict[str, list[tuple[Any, ...]]] = {}
        for ops in queues:
            op = ops[k]
            kind = op[0]
            if kind == PENDING:
                params: tuple[Any, ...] = (op[1], op[2], op[3], op[4], op[5], op[6], op[7], op[8], op[9],
                                           op[10], op[11], op[12], op[13], op[14])
            elif kind == STATUS:
                params = (op[1], op[2], op[3])
            elif kind == CLOSE:
                params = (op[1], op[2], op[3], op[4], op[5], op[6], op[7], op[8], op[9])
            else:
                params = (op[1], op[2], op[3], op[4], op[5], op[6], op[1], op[2])
            by_kind.setdefault(kind, []).append(params)
        for kind, sql in ((END, _END_SQL), (CLOSE, _CLOSE_SQL), (STATUS, _STATUS_SQL), (PENDING, _PENDING_SQL)):
            if kind in by_kind:
                yield sql, by_kind[kind]
        k += 1
        queues = [ops for ops in queues if len(ops) > k]
    if derived.pod_hours:
        yield _POD_HOURS_SQL, [(ns, pod, hour, n) for (ns, pod, hour), n in sorted(derived.pod_hours.items())]
    if derived.epoch_cycles:
        yield _EPOCHS_SQL, sorted(derived.epoch_cycles.items())
    if derived.rejection_hours:
        yield _REJECTION_HOURS_SQL, [(hour, plugin, reason, n, c)
                                     for (hour, plugin, reason), (n, c) in sorted(derived.rejection_hours.items())]


