"""The process writer's outbox: chunks in order, a checkpoint alone and pickled only when sent."""

from __future__ import annotations

import pickle
from typing import Any

from kruntimes.journal.write.outbox import Outbox


def deferred(lsn: int, kind: str = "bind") -> tuple[Any, ...]:
    return ("inc", lsn, 0, kind, {"lsn": lsn}, "summary", 5)


class Dumps:
    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, records: list[Any]) -> bytes:
        self.calls.append([r[1] for r in records])
        return pickle.dumps(records)


def test_a_checkpoint_is_a_chunk_of_its_own_pickled_when_it_is_sent_and_the_order_is_kept() -> None:
    box, dumps = Outbox(), Dumps()
    box.seal([deferred(1), deferred(2), deferred(3, "checkpoint"), deferred(4)], dumps)
    assert dumps.calls == [[1, 2], [4]]  # sealed now: all but the checkpoint
    chunks = box.take_unsent()
    assert [(c.first, c.count, c.data is None) for c in chunks] == [(0, 2, False), (2, 1, True), (3, 1, False)]
    sent = [pickle.loads(c.pickle(dumps)) for c in chunks]
    assert [[r[1] for r in chunk] for chunk in sent] == [[1, 2], [3], [4]]
    assert dumps.calls[-1] == [3] and chunks[1].records is None  # pickled once, the records let go
    assert not box and box.sealed == 4


def test_a_batch_without_a_checkpoint_is_one_chunk_and_finished_records_pass_as_they_are() -> None:
    box = Outbox()
    finished = object()  # an encoded record or None: only deferred tuples are looked into
    box.seal([deferred(1), finished, None, deferred(2)], lambda records: b"x" * len(records))
    (chunk,) = box.take_unsent()
    assert (chunk.first, chunk.count, chunk.data) == (0, 4, b"xxxx")


def test_resend_starts_at_the_first_unsettled_chunk_and_pickles_a_checkpoint_never_sent() -> None:
    box, dumps = Outbox(), Dumps()
    box.seal([deferred(1), deferred(2)], dumps)
    box.take_unsent()  # sent to the child that then died
    box.seal([deferred(3, "checkpoint"), deferred(4)], dumps)
    first, chunks = box.resend(settled=2)  # the dead child had settled the first chunk
    assert first == 2 and [(c.first, c.count) for c in chunks] == [(2, 1), (3, 1)]
    assert not box  # nothing left to send besides the resend itself
    assert [[r[1] for r in pickle.loads(c.pickle(dumps))] for c in chunks] == [[3], [4]]
    box.trim(4)
    assert box.resend(settled=4) == (4, [])
