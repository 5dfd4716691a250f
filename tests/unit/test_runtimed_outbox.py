"""Run ends kept on the pod's disk until written (SPEC §4.1, amended 2026-12-04)."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kruntimes.runtimed import outcomes
from kruntimes.runtimed.outbox import Outbox, PendingEnd
from kruntimes.runtimed.outcomes import Ended, RunRef

AT = datetime(2026, 12, 4, 12, 0, 0, 250000, tzinfo=timezone.utc)
EXITED = PendingEnd(outcomes.exited(RunRef("ns", "a", "uid-a"), 3, ["last line"]), AT)
RELEASED = PendingEnd(Ended(RunRef("ns", "fn", "../../etc/passwd"), "Succeeded", outcomes.REASON_RELEASED,
                            "the function Run was released", released=True), AT)


def test_an_end_kept_is_read_back_by_the_next_runtimed_exactly_until_it_is_removed(tmp_path: Path) -> None:
    Outbox(tmp_path / "ends").put(EXITED)
    Outbox(tmp_path / "ends").put(RELEASED)
    successor = Outbox(tmp_path / "ends")
    assert successor.pending() == {"uid-a": EXITED, "../../etc/passwd": RELEASED}
    successor.remove("uid-a")
    successor.remove("uid-a")  # idempotent
    assert successor.pending() == {"../../etc/passwd": RELEASED}
    assert {p.parent for p in (tmp_path / "ends").iterdir()} == {tmp_path / "ends"}  # a UID is never a path


def test_an_unreadable_kept_end_is_set_aside_and_the_rest_still_read(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.put(EXITED)
    (tmp_path / "torn.end.json").write_text('{"namespace": "ns", "na')
    assert box.pending() == {"uid-a": EXITED}
    assert (tmp_path / "torn.end.unreadable").exists()


def test_without_a_directory_nothing_is_kept(tmp_path: Path) -> None:
    box = Outbox(None)
    box.put(EXITED)
    assert box.pending() == {}


def test_two_threads_keeping_an_end_of_the_same_run_at_once_leave_one_whole_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Restart recovery and the Runtime Server's hand-over can both keep an end of one Run: with one
    # temporary name for both, one thread's rename found the file gone and its end was not kept.
    box = Outbox(tmp_path)
    lost = PendingEnd(Ended(RunRef("ns", "a", "uid-a"), "Failed", outcomes.REASON_EXECUTION_LOST, "lost"), AT)
    start = threading.Barrier(8)

    def keep(pending: PendingEnd) -> None:
        start.wait()
        for _ in range(50):
            box.put(pending)

    threads = [threading.Thread(target=keep, args=(EXITED if i % 2 else lost,)) for i in range(8)]
    with caplog.at_level(logging.WARNING, logger="kruntimes.runtimed.outbox"):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not caplog.records
    assert Outbox(tmp_path).pending()["uid-a"] in (EXITED, lost)
    assert sorted(p.name for p in tmp_path.iterdir()) == [next(tmp_path.glob("*.end.json")).name]


def test_a_temporary_file_a_killed_runtimed_left_is_cleared_by_the_next(tmp_path: Path) -> None:
    Outbox(tmp_path).put(EXITED)
    (tmp_path / "0123.end.json.x1y2.tmp").write_text('{"namespace": "ns", "na')
    assert Outbox(tmp_path).pending() == {"uid-a": EXITED}
    assert not list(tmp_path.glob("*.tmp"))
