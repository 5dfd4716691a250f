"""JournalRecorder: when checkpoints are taken.

A checkpoint costs about what recording each of its objects once does, so besides
the fixed minimum interval the recorder waits for a multiple of the previous
checkpoint's size: checkpoints stay a bounded share of the journal however large
the cache grows.
"""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.journal.recorder import JournalRecorder


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

    def state(self) -> dict[str, Any]:
        return {"pods": [], "runs": [{"n": i} for i in range(self.objects)], "assumed": []}


def record(recorder: JournalRecorder, n: int) -> list[int]:
    """Record n changes, each settled; the LSNs of the checkpoints they led to."""
    taken = []
    for _ in range(n):
        recorder.record("bind", {"result": "ok"})
        lsn = recorder.settled()
        if lsn is not None:
            taken.append(lsn)
    return taken


def test_the_first_checkpoint_comes_after_checkpoint_every_records_whatever_the_size() -> None:
    recorder = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=10, checkpoint_size_ratio=4)
    recorder.state_source = State(objects=1_000)
    assert record(recorder, 10) == [11]  # the 10th change's record is LSN 10; the checkpoint 11


def test_the_next_waits_for_ratio_times_the_objects_the_last_one_held() -> None:
    recorder = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=10, checkpoint_size_ratio=4)
    recorder.state_source = State(objects=25)
    first = record(recorder, 10)
    assert first == [11]
    assert record(recorder, 99) == []  # 4 x 25 = 100 records needed
    assert record(recorder, 1) == [112]


def test_a_small_cache_is_checkpointed_every_checkpoint_every_records() -> None:
    recorder = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=10, checkpoint_size_ratio=4)
    recorder.state_source = State(objects=2)
    assert record(recorder, 30) == [11, 22, 33]


def test_ratio_zero_keeps_the_fixed_interval_and_a_shrunk_cache_shortens_the_wait() -> None:
    fixed = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=5, checkpoint_size_ratio=0)
    fixed.state_source = State(objects=10_000)
    assert record(fixed, 15) == [6, 12, 18]

    state = State(objects=50)
    shrinking = JournalRecorder(Sink(), start_lsn=0, checkpoint_every=5, checkpoint_size_ratio=2)
    shrinking.state_source = state
    assert record(shrinking, 5) == [6]
    state.objects = 1  # the next wait follows the checkpoint just taken, not the largest one
    assert record(shrinking, 105) == [107, 113]


def test_a_negative_ratio_is_refused() -> None:
    with pytest.raises(ValueError, match="checkpoint_size_ratio"):
        JournalRecorder(Sink(), start_lsn=0, checkpoint_size_ratio=-1)
