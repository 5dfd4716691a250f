"""JournalRecorder: when checkpoints are taken.

A checkpoint's cost grows with the objects it holds, so besides the fixed minimum
interval the recorder waits for a multiple of the cache's size: checkpoints stay a
bounded share of the journal however large the cache grows.
"""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.journal.write.recorder import JournalRecorder


class Sink:
    accepts_deferred = True  # payloads are not what these tests look at

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def append(self, record: Any) -> None:
        self.kinds.append(record.kind)


class State:
    """A cache stand-in whose size the test sets."""

    def __init__(self, objects: int) -> None:
        self.objects = objects

    def checkpoint_state(self) -> dict[str, Any]:
        return {"pods": [], "runs": [{"n": i} for i in range(self.objects)], "assumed": []}

    def state_size(self) -> int:
        return self.objects


def record(recorder: JournalRecorder, n: int) -> list[int]:
    """Record n changes, each settled; the LSNs of the checkpoints they led to."""
    taken = []
    for _ in range(n):
        recorder.record("bind", {"result": "ok"})
        lsn = recorder.settled()
        if lsn is not None:
            taken.append(lsn)
    return taken


def test_a_checkpoint_waits_for_ratio_times_the_objects_the_cache_holds() -> None:
    recorder = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=10, checkpoint_size_ratio=4)
    recorder.state_source = State(objects=25)
    assert record(recorder, 99) == []  # 4 x 25 = 100 records needed, not 10
    assert record(recorder, 1) == [101]
    assert record(recorder, 100) == [202]


def test_a_small_cache_is_checkpointed_every_checkpoint_every_records() -> None:
    recorder = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=10, checkpoint_size_ratio=4)
    recorder.state_source = State(objects=2)
    assert record(recorder, 30) == [11, 22, 33]


def test_the_wait_follows_the_cache_as_it_grows_and_shrinks() -> None:
    state = State(objects=5)
    recorder = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=5, checkpoint_size_ratio=2)
    recorder.state_source = state
    assert record(recorder, 10) == [11]
    state.objects = 50  # grown since: 100 records now
    assert record(recorder, 99) == []
    state.objects = 1  # shrunk again: the fixed minimum is what is left, long passed
    assert record(recorder, 1) == [112]


def test_ratio_zero_keeps_the_fixed_interval() -> None:
    fixed = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=5, checkpoint_size_ratio=0)
    fixed.state_source = State(objects=10_000)
    assert record(fixed, 15) == [6, 12, 18]


def test_a_negative_ratio_is_refused() -> None:
    with pytest.raises(ValueError, match="checkpoint_size_ratio"):
        JournalRecorder(Sink(), start_lsn=0, checkpoint_size_ratio=-1)
