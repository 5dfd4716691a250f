"""``kruntimes history`` orders by time, then epoch order, then LSN - never by bare LSN or epoch ID (issue 22 item 9).

(epoch, LSN) is a record's identity and LSNs overlap between epochs begun while the
database was away. Here the older epoch numbered from 900 and the newer one, begun an
hour later, from 100; both recorded a cycle of the same Run, and an observation of the
same pod, at one instant (the older leader had not yet stopped). Newest is the newer
epoch's, which ``history.order`` decides by each epoch's first record: not its lower
LSN, not its ID (which sorts first here, so neither order comes by accident). The
Run's end is the newest by time, though the older epoch's LSN is higher. Both backends.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from kruntimes.journal import records
from kruntimes.journal.history import cycles as history_cycles
from kruntimes.journal.history import pods as history_pods
from kruntimes.journal.history import runs as history_runs
from kruntimes.journal.store import backends
from tests.journal.test_history_queries import QUERIES

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
TIE = T0 + timedelta(hours=2)
NS = "team-a"
OLDER, NEWER = "0" * 31 + "b", "0" * 31 + "a"  # the newer epoch's ID sorts first


def _cycle(epoch: str, lsn: int, at: datetime, pod: str) -> records.JournalRecord:
    return records.JournalRecord(epoch, lsn, at, "cycle", {
        "namespace": NS, "run": "r", "run_uid": "u", "status": "scheduled", "result": "scheduled", "chosen": pod,
        "total": 7, "candidates": [{"pod": pod, "total": 7, "scores": [["LeastLoaded", 1, 7]]}], "rejections": []})


def _mutation(epoch: str, lsn: int, at: datetime, kind: str, name: str, obj: dict[str, Any]) -> records.JournalRecord:
    return records.JournalRecord(epoch, lsn, at, "mutation", {
        "kind": kind, "event": "MODIFIED", "namespace": NS, "name": name, "uid": "u" if kind == "Run" else name,
        "object": obj})


@pytest.fixture
def tied(journal: backends.Journal) -> backends.Journal:
    journal.append_batch([
        records.JournalRecord(OLDER, 900, T0, "leader", {"event": "acquired", "identity": OLDER}),
        _mutation(OLDER, 901, T0 + timedelta(seconds=1), "Run", "r", {"phase": "Failed"}),
        _cycle(OLDER, 902, TIE, "pod-old"),
        _mutation(OLDER, 903, TIE, "Pod", "p", {"runtime": "old", "ready": True})])
    later = T0 + timedelta(hours=1)
    journal.append_batch([
        records.JournalRecord(NEWER, 100, later, "leader", {"event": "acquired", "identity": NEWER}),
        _mutation(NEWER, 101, later + timedelta(seconds=1), "Run", "r", {"phase": "Succeeded"}),
        _cycle(NEWER, 102, TIE, "pod-new"),
        _mutation(NEWER, 103, TIE, "Pod", "p", {"runtime": "new", "ready": True})])
    return journal


def test_the_newest_of_a_run_s_cycles_at_one_instant_is_the_newer_epoch_s(tied: backends.Journal) -> None:
    assert [c["chosen"] for c in history_runs.run_cycles(tied, NS, "r", limit=1)] == ["pod-new"]
    assert [c["chosen"] for c in history_runs.run_cycles(tied, NS, "r")] == ["pod-old", "pod-new"]
    placed = history_runs.run_placement(tied, NS, "r")
    assert placed is not None and placed["pod"] == "pod-new"


def test_the_journal_s_latest_placement_and_its_cycles_go_by_epoch_order_at_one_instant(
        tied: backends.Journal) -> None:
    latest = history_runs.latest_placement(tied)
    assert latest is not None and (latest["epoch"], latest["lsn"]) == (NEWER, 102)
    assert [c["chosen"] for c in history_cycles.cycles(tied)] == ["pod-old", "pod-new"]
    decided = history_cycles.decisions(tied, since=T0, until=TIE + timedelta(seconds=1))
    assert [(c["epoch"], c["lsn"]) for c in decided] == [(OLDER, 902), (NEWER, 102)]
    assert [p["runtime"] for p in history_pods.pod_held(tied, NS, "pod-new", TIE)] == [None]


def test_a_pod_at_t_is_the_newer_epoch_s_observation_at_one_instant(tied: backends.Journal) -> None:
    seen = history_pods.pod_observations(tied, NS, "p", at=TIE, limit=1)
    assert [o["runtime"] for o in seen] == ["new"]


def test_a_run_s_end_is_its_newest_by_time_not_its_highest_lsn(tied: backends.Journal) -> None:
    ended = history_runs.run_ended(tied, NS, ["u"])
    assert ended is not None and ended["phase"] == "Succeeded"


def _documented(journal: backends.Journal, name: str, **bound: Any) -> list[Any]:
    variants = QUERIES[name]
    sql = variants.get(journal.engine.dialect.name) or variants["any"]
    with journal.engine.connect() as conn:
        return list(conn.execute(sa.text(sql), bound).mappings().all())


def test_the_documented_queries_break_a_tie_by_epoch_order(tied: backends.Journal) -> None:
    assert [(r["pod"], r["chosen"]) for r in _documented(tied, "why-placed", namespace=NS, run="r")] \
        == [("pod-new", 1)]
    seen = _documented(tied, "pod-at-time", namespace=NS, pod="p", at=TIE + timedelta(seconds=1))
    assert [r["runtime"] for r in seen] == ["new"]
    assert [r["lsn"] for r in _documented(tied, "decisions-in-window", since=T0, until=TIE + timedelta(seconds=1))] \
        == [902, 102]
