"""Run ends kept on the pod's disk until written (SPEC §4.1, amended 2026-12-04)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

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
