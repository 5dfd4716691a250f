"""The web view's time windows map to per-epoch LSN ranges, not a bare LSN range (issue 22 item 9).

LSNs overlap between epochs begun while the database was away. Here the older epoch
(T0) recorded LSNs 899-903 - its incarnation, pod-old, a checkpoint, pod-gone, a leader
record - and the newer one (an hour later), numbered from 898 again, recorded its incarnation, pod-new,
a checkpoint that no longer lists pod-gone, pod-late and pod-new's deletion at LSNs
898-902. The journal's bounds, its checkpoints, a window's starting state and the pods
added after it, and the configuration a pod at T is judged by each name a record by
(epoch, LSN) and go by time, then epoch order (``history.order``), then LSN. Both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from kruntimes.journal import records
from kruntimes.journal.history import buckets, derive, windows
from kruntimes.journal.store import backends
from kruntimes.ui import params, pod_page, queries, timeline
from tests.ui.test_epoch_order import journal_url  # noqa: F401  (the fixture: both backends)

T0 = datetime(2026, 11, 20, tzinfo=timezone.utc)
T1 = T0 + timedelta(hours=1)
NS = "rt"
OLDER, NEWER = "0" * 31 + "b", "0" * 31 + "a"  # the newer epoch's ID sorts first: neither order comes by accident


def _s(at: datetime, seconds: float) -> datetime:
    return at + timedelta(seconds=seconds)


def _incarnation(epoch: str, lsn: int, at: datetime, staleness: int) -> records.JournalRecord:
    return records.JournalRecord(epoch, lsn, at, "incarnation", {
        "version": "0", "config_hash": epoch, "config": {"heartbeat_staleness_seconds": staleness}})


def _pod(name: str) -> dict[str, Any]:
    return {"namespace": NS, "name": name, "runtime": "gpu", "capacity": [["slots", 4]], "ready": True,
            "terminating": False, "heartbeat": T0.isoformat()}


def _mutation(epoch: str, lsn: int, at: datetime, event: str, name: str) -> records.JournalRecord:
    return records.JournalRecord(epoch, lsn, at, "mutation", {
        "kind": "Pod", "event": event, "namespace": NS, "name": name, "uid": f"uid-{name}", "object": _pod(name)})


def _checkpoint(epoch: str, lsn: int, at: datetime, pods: list[str]) -> records.JournalRecord:
    return records.JournalRecord(epoch, lsn, at, "checkpoint", {"pods": [_pod(p) for p in pods], "runs": [],
                                                               "assumed": []})


@pytest.fixture
def reader(journal_url: str) -> Iterator[queries.Reader]:  # noqa: F811
    journal = backends.Journal.open(journal_url)
    journal.append_batch([_incarnation(OLDER, 899, T0, 30), _mutation(OLDER, 900, _s(T0, 1), "ADDED", "pod-old"),
                          _checkpoint(OLDER, 901, _s(T0, 2), ["pod-old"]),
                          _mutation(OLDER, 902, _s(T0, 3), "ADDED", "pod-gone"),
                          records.JournalRecord(OLDER, 903, _s(T0, 5), "leader", {"event": "lost", "identity": OLDER})])
    journal.append_batch([_incarnation(NEWER, 898, T1, 60), _mutation(NEWER, 899, _s(T1, 1), "ADDED", "pod-new"),
                          _checkpoint(NEWER, 900, _s(T1, 2), ["pod-old", "pod-new"]),
                          _mutation(NEWER, 901, _s(T1, 3), "ADDED", "pod-late"),
                          _mutation(NEWER, 902, _s(T1, 4), "DELETED", "pod-new")])
    r = queries.Reader(journal)
    yield r
    r.close()


def test_the_journal_ends_with_the_newest_epoch_s_last_record_not_the_highest_lsn(reader: queries.Reader) -> None:
    bounds = reader.bounds()
    assert bounds is not None
    assert bounds.last_at == _s(T1, 4)  # the newest record's instant, where the default window ends
    assert (bounds.first_epoch, bounds.first_lsn, bounds.first_at) == (OLDER, 899, T0)
    assert (bounds.last_epoch, bounds.last_lsn, bounds.last_at) == (NEWER, 902, _s(T1, 4))
    assert reader.recorded_at_back(3) == _s(T1, 1)  # counted back epoch by epoch from the newest record
    assert reader.recorded_at_back(6) == _s(T0, 3)
    assert reader.recorded_at_back(10) is None


def test_checkpoints_are_named_by_epoch_and_lsn_newest_by_time(reader: queries.Reader) -> None:
    assert [c[-1] for c in reader.checkpoints()] == [_s(T1, 2), _s(T0, 2)]  # newest first, though its LSN is lower
    assert reader.checkpoints() == [(NEWER, 900, _s(T1, 2)), (OLDER, 901, _s(T0, 2))]
    assert reader.checkpoints(1, at=_s(T1, 1)) == [(OLDER, 901, _s(T0, 2))]


def _lanes(w: windows.Window) -> dict[str, bool]:
    """Pod name -> deleted."""
    return {name: lane.deleted_at is not None for (_, name), lane in w.lanes.items()}


def test_a_window_in_the_newer_epoch_starts_from_its_checkpoint_and_reads_only_its_records(
        reader: queries.Reader) -> None:
    w = reader.window(_s(T1, 2.5), _s(T1, 10))
    # Not the older epoch's pod-gone, whose LSN 902 lies in the newer epoch's range.
    assert _lanes(w) == {"pod-old": False, "pod-new": True, "pod-late": False}
    assert (w.after, w.upto) == ({OLDER: 903, NEWER: 900}, {OLDER: 903, NEWER: 902})
    assert w.records_read == 2


def test_a_window_across_both_epochs_reads_every_epoch_s_records_after_the_checkpoint(
        reader: queries.Reader) -> None:
    w = reader.window(_s(T0, 2.5), _s(T1, 10))
    assert _lanes(w) == {"pod-old": False, "pod-gone": False, "pod-new": True, "pod-late": False}
    assert (w.after, w.upto) == ({OLDER: 901}, {OLDER: 903, NEWER: 902})
    assert w.records_read == 4


def test_a_pod_at_t_is_judged_by_the_configuration_of_the_epoch_recording_then(reader: queries.Reader) -> None:
    assert reader.newest_at(_s(T0, 10)) == (OLDER, 903)
    assert reader.newest_at(_s(T1, 10)) == (NEWER, 902)  # not the older epoch's 903, recorded earlier
    epoch, lsn = reader.newest_at(_s(T0, 10)) or ("", 0)
    assert reader.config_at(lsn, epoch)["heartbeat_staleness_seconds"] == 30


def test_the_pod_at_t_page_judges_heartbeats_by_the_epoch_recording_then(reader: queries.Reader) -> None:
    page = pod_page.render_picker(reader, params.Query({"at": [_s(T0, 10).isoformat()]})).decode()
    assert "stale after 30 s" in page and "stale after 60 s" not in page


def test_what_a_window_s_pods_held_is_read_per_epoch(journal_url: str) -> None:  # noqa: F811
    """The older epoch checkpointed at LSN 11; the newer one, numbered from 5, placed a Run at its LSN 6.
    A window over both reads the newer epoch's placements from its own start, not from LSN 11."""
    journal = backends.Journal.open(journal_url)
    journal.append_batch([_incarnation(OLDER, 10, T0, 30), _checkpoint(OLDER, 11, _s(T0, 1), ["p"])])
    journal.append_batch([_incarnation(NEWER, 5, T1, 60),
                          records.JournalRecord(NEWER, 6, _s(T1, 1), "leader", {"event": "acquired"})])
    with journal.engine.begin() as conn:
        conn.execute(sa.insert(derive.placements).values(
            epoch=NEWER, lsn=6, decided_at=_s(T1, 1), namespace=NS, run="r", run_uid="u", pod="p",
            outcome="scheduled", requests='[["slots",2]]'))
    reader = queries.Reader(journal)
    try:
        since, until = _s(T0, 2), _s(T1, 10)
        w = reader.window(since, until)
        b = buckets.Buckets.of(since, until)
        held = timeline.utilisation(reader.held(w, [(NS, "p")], b), b, {"slots": 4})
        # The newer epoch's Run holds 2 of the pod's 4 slots for the last bucket's final 9 s.
        assert held["slots"][-1] == pytest.approx(50.0 * 9e6 / b.step_us, abs=0.01)
    finally:
        reader.close()


def test_runs_placed_on_a_pod_at_one_instant_by_two_epochs_go_by_epoch_order(reader: queries.Reader) -> None:
    with reader.journal.engine.begin() as conn:
        for epoch, lsn, run in ((OLDER, 950, "r-old"), (NEWER, 950 - 100, "r-new")):
            conn.execute(sa.insert(derive.placements).values(
                epoch=epoch, lsn=lsn, decided_at=_s(T1, 5), namespace=NS, run=run, run_uid=run, pod="pod-old",
                outcome="scheduled", requests='[["slots",1]]'))
    assert [bar.run for bar in reader.pod_runs(NS, "pod-old", _s(T1, 6))] == ["r-old", "r-new"]
    w = reader.window(_s(T1, 4), _s(T1, 10))
    assert [bar.run for bar in reader.bars(w, [(NS, "pod-old")])] == ["r-old", "r-new"]


@pytest.fixture
def interleaved(journal_url: str) -> Iterator[queries.Reader]:  # noqa: F811
    """The older leader went on recording after the newer one began (LSNs 10-11 and 5-6, interleaved in time),
    and both recorded a leader record at T0 + 10 s."""
    journal = backends.Journal.open(journal_url)
    journal.append_batch([_incarnation(OLDER, 10, T0, 30), _incarnation(NEWER, 5, _s(T0, 5), 60),
                          records.JournalRecord(OLDER, 11, _s(T0, 10), "leader", {"event": "lost"}),
                          records.JournalRecord(NEWER, 6, _s(T0, 10), "leader", {"event": "acquired"})])
    r = queries.Reader(journal)
    yield r
    r.close()


def test_an_instant_inside_two_epochs_that_overlap_in_time_cuts_each_one(interleaved: queries.Reader) -> None:
    assert interleaved.cut_at(_s(T0, 7)) == {OLDER: 10, NEWER: 5}
    assert interleaved.cut_at(_s(T0, 10)) == {OLDER: 11, NEWER: 6}
    assert interleaved.cut_at(_s(T0, 5), strictly_before=[NEWER]) == {OLDER: 10}


def test_leader_records_at_one_instant_go_by_epoch_order_not_epoch_id(interleaved: queries.Reader) -> None:
    assert [(r.incarnation, r.lsn) for r in interleaved.leader_records()] == [(OLDER, 11), (NEWER, 6)]
    assert [r.incarnation for r in interleaved.leader_records(limit=1)] == [NEWER]
