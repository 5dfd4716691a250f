"""The history layer's questions the web view asks, on SQLite and on PostgreSQL (the journal contract's backends).

One small journal whose every answer is known: a pod observed, then checkpointed with a
pod never observed since, a Run waiting a second in queue and four unschedulable, then
reserved, placed with a device, bound and succeeded, a second pod added and deleted.
Each function the web view's ``Reader`` delegates to is asked here and must give exactly
the known answer, so a query that reads the wrong rows, orders them wrongly or
computes a bucket differently on one backend fails here.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from kruntimes.journal import records
from kruntimes.journal.history import buckets, pods, read, runs, stored, waits, windows
from kruntimes.journal.store import backends

T = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
E = "e" * 32
NS = "team-a"
DEVICES = {"chosen": {"results": [{"request": "gpu", "device": "gpu-0"}]}}


def _at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def _pod(name: str) -> dict[str, Any]:
    return {"namespace": NS, "name": name, "runtime": "rt", "capacity": [["slots", 4]], "ready": True,
            "terminating": False, "heartbeat": f"beat-{name}"}


def _mutation(lsn: int, seconds: float, kind: str, event: str, name: str, obj: dict[str, Any]) -> records.JournalRecord:
    return records.JournalRecord(E, lsn, _at(seconds), "mutation", {
        "kind": kind, "event": event, "namespace": NS, "name": name, "uid": "u1" if kind == "Run" else f"uid-{name}",
        "resource_version": str(lsn), "object": obj})


def _cycle(lsn: int, seconds: float, **fields: Any) -> records.JournalRecord:
    return records.JournalRecord(E, lsn, _at(seconds), "cycle", {
        "namespace": NS, "run": "r1", "run_uid": "u1", "candidates": [], "rejections": [], "pods_evaluated": 1,
        "pods_feasible": 0, **fields})


RECORDS = [
    records.JournalRecord(E, 1, _at(0), "incarnation", {"version": "1", "config_hash": "c",
                                                          "config": {"heartbeat_staleness_seconds": 30}}),
    records.JournalRecord(E, 2, _at(1), "leader", {"event": "acquired", "identity": E}),
    _mutation(3, 2, "Pod", "ADDED", "p1", _pod("p1")),
    _mutation(4, 3, "Run", "ADDED", "r1", {"phase": "Pending", "runtime": "rt"}),
    _cycle(5, 4, status="unschedulable", result="unschedulable", message="no pod fits",
           rejections=[["Fit", "too big", 1]], chosen=None),
    records.JournalRecord(E, 6, _at(5), "checkpoint", {"pods": [_pod("p1"), _pod("p0")], "runs": [], "assumed": []}),
    _mutation(7, 6, "Pod", "ADDED", "p2", _pod("p2")),
    records.JournalRecord(E, 8, _at(7), "reserve", {"assumption": {"namespace": NS, "run_uid": "u1",
                                                                   "requests": [["slots", 2]]}}),
    _cycle(9, 8, status="scheduled", result="scheduled", chosen="p1", chosen_uid="uid-p1", total=9, snapshot_lsn=7,
           pods_feasible=1, candidates=[{"pod": "p1", "total": 9, "scores": [["LeastLoaded", 3, 9]]}],
           devices=DEVICES),
    records.JournalRecord(E, 10, _at(9), "bind", {"namespace": NS, "run_uid": "u1", "result": "ok", "error": None}),
    _mutation(11, 20, "Run", "MODIFIED", "r1", {"phase": "Succeeded", "runtime": "rt", "pod_name": "p1"}),
    _mutation(12, 21, "Pod", "DELETED", "p2", _pod("p2")),
]


@pytest.fixture
def journal(journal: backends.Journal) -> backends.Journal:
    journal.append_batch(RECORDS)
    return journal


# -- the journal as a whole ---------------------------------------------------------------------


def test_the_journal_s_bounds_spans_and_counts(journal: backends.Journal) -> None:
    assert read.spans(journal) == [read.Span(E, 1, _at(0), 12, _at(21))]
    assert stored.bounds(journal) == stored.Bounds(1, 12, _at(0), _at(21), E, E)
    assert stored.recorded_at_back(journal, 0) == _at(21)
    assert stored.recorded_at_back(journal, 3) == _at(8)
    assert stored.recorded_at_back(journal, 12) is None
    assert stored.kind_counts(journal) == {"incarnation": 1, "leader": 1, "mutation": 5, "cycle": 2,
                                           "checkpoint": 1, "reserve": 1, "bind": 1}
    assert stored.cycles_between(journal, _at(0), _at(60)) == 2
    assert stored.cycles_between(journal, _at(4.5), _at(8)) == 0  # [since, until): the second one is at 8 s
    assert stored.journal_start(journal) == (_at(0), False)
    assert stored.prune_record(journal) is None
    (epoch,) = stored.epochs(journal)
    assert (epoch.epoch, epoch.first_lsn, epoch.head_lsn, epoch.end_lsn) == (E, 1, 12, None)


def test_records_by_key_incarnations_leaders_and_checkpoints(journal: backends.Journal) -> None:
    assert [r.kind for r in stored.incarnations(journal)] == ["incarnation"]
    assert stored.config_at(journal, 9, E) == {"heartbeat_staleness_seconds": 30}
    assert [(r.lsn, r.payload["event"]) for r in stored.leader_records(journal)] == [(2, "acquired")]
    assert stored.checkpoints(journal) == [(E, 6, _at(5))]
    assert stored.checkpoints(journal, at=_at(4)) == []
    found = stored.record(journal, 9, E)
    assert found is not None and (found.kind, found.at, found.payload["devices"]) == ("cycle", _at(8), DEVICES)
    assert [r.lsn for r in stored.records_at(journal, 9)] == [9]
    assert [r.lsn for r in stored.by_keys(journal, {(E, 9), (E, 3), ("other", 3)})] == [3, 9]


# -- a time window ----------------------------------------------------------------------------------


def test_a_window_starts_from_its_checkpoint_and_folds_in_the_pods_added_and_deleted_after_it(
        journal: backends.Journal) -> None:
    assert windows.newest_at(journal, _at(8.5)) == (E, 9)
    assert windows.newest_at(journal, _at(8), strictly=True) == (E, 8)
    assert windows.cut_at(journal, _at(6.5)) == {E: 7}
    assert windows.cut_at(journal, _at(-1)) == {}
    w = windows.window(journal, _at(6.5), _at(30), windows.StartStates())
    assert (w.after, w.upto, w.records_read) == ({E: 6}, {E: 12}, 2)
    assert {name: lane.deleted_at for (_, name), lane in w.lanes.items()} == {"p1": None, "p0": None, "p2": _at(21)}
    assert w.lanes[(NS, "p1")] == windows.Lane(NS, "p1", "rt", {"slots": 4}, True, False, "beat-p1")
    assert windows.bars(journal, w, [(NS, "p1"), (NS, "p2")]) == [
        windows.Bar(NS, "r1", "u1", "p1", {}, _at(8), _at(20), "succeeded", 9)]
    assert windows.bars(journal, windows.window(journal, _at(20.5), _at(30), windows.StartStates()),
                        [(NS, "p1")]) == []  # it ended before the window


def test_a_window_s_figures_per_bucket(journal: backends.Journal) -> None:
    b = buckets.Buckets.of(_at(0), _at(12))  # 120 buckets of 100 ms
    assert {result: sum(n) for result, n in buckets.binds(journal, b).items()} == {"ok": 1}
    assert buckets.binds(journal, b)["ok"][90] == 1
    pending = buckets.pending(journal, b)
    assert {reason: sum(n) for reason, n in pending.items()} == {"too big": 1} and pending["too big"][40] == 1
    w = windows.window(journal, _at(6.5), _at(30), windows.StartStates())
    b = buckets.Buckets.of(w.since, w.until)
    held = buckets.held(journal, b, [(NS, "p1")], w.after, w.upto, w.placed_before)
    start, end = 1_500_000, 13_500_000  # placed 1.5 s into the window, ended 13.5 s into it
    assert held.groups == [('[["slots",2]]', start // b.step_us, end // b.step_us, 1, start, end)]
    assert buckets.held(journal, b, [(NS, "p2")], w.after, w.upto, w.placed_before).groups == []


# -- one Run, one pod -------------------------------------------------------------------------------


def test_a_run_s_records_and_waits(journal: backends.Journal) -> None:
    assert [r.lsn for r in runs.run_records(journal, NS, "r1")] == [4, 5, 9, 10, 11]
    assert [r.lsn for r in runs.run_records(journal, NS, "r1", limit=2)] == [10, 11]
    assert waits.run_waits(journal, NS, ["u1"]) == {
        "first_seen_at": _at(3), "first_cycle_at": _at(4), "queued_us": 1_000_000, "unschedulable_us": 4_000_000,
        "still_unschedulable": False}
    (waited,) = waits.waits(journal)
    assert (waited["run"], waited["queued_us"], waited["unschedulable_us"], waited["waited_us"], waited["pod"],
            waited["state"], waited["first_reason"]) == ("r1", 1_000_000, 4_000_000, 5_000_000, "p1", "placed",
                                                          "no pod fits")


def test_what_a_pod_held_at_t_is_one_query_for_the_command_line_and_the_web_view(journal: backends.Journal) -> None:
    (held,) = pods.pod_held(journal, NS, "p1", _at(10))
    assert held == {"epoch": E, "lsn": 9, "placed_at": _at(8), "run": "r1", "run_uid": "u1", "runtime": "rt",
                    "total": 9, "ended_at": _at(20), "end_reason": "succeeded", "requests": '[["slots",2]]'}
    assert pods.pod_held(journal, NS, "p1", _at(7.5)) == [] and pods.pod_held(journal, NS, "p1", _at(20)) == []
    assert pods.pod_runs(journal, NS, "p1", _at(10)) == [
        windows.Bar(NS, "r1", "u1", "p1", {"slots": 2}, _at(8), _at(20), "succeeded", 9)]
    assert pods.held_devices(journal, NS, "p1", _at(10)) == {"u1": DEVICES["chosen"]}
    assert pods.held_devices(journal, NS, "p1", _at(25)) == {}


def test_a_pod_at_t_is_its_newest_observation_else_the_checkpoint_that_kept_it(journal: backends.Journal) -> None:
    seen = pods.pod_observation(journal, NS, "p2", _at(30))
    assert seen is not None and (seen.lsn, seen.kind, seen.payload["event"]) == (12, "mutation", "DELETED")
    assert [o["lsn"] for o in pods.pod_observations(journal, NS, "p2", at=_at(10), limit=1)] == [7]
    kept = pods.pod_observation(journal, NS, "p0", _at(30))  # never observed: only the checkpoint has it
    assert kept is not None and (kept.lsn, kept.kind, kept.payload) == (6, "checkpoint", {
        "event": "CHECKPOINT", "object": _pod("p0")})
    assert pods.pod_observation(journal, NS, "p1", _at(1)) is None
