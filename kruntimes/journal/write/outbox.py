"""What the process writer keeps of the records it has sealed, until the child settles them.

Records leave the producer in chunks, in order. A chunk is pickled as it is sealed,
in the producer's thread under the cache lock, which is cheap for a few dozen
changes - except for a checkpoint: the whole projected cache, ~7 ms of pickling per
thousand objects here, ~0.7 s at 100,000, during which no worker could plan or bind.
So a checkpoint becomes a chunk of its own that is only pickled later, by the sender,
outside every lock, while the scheduler goes on (its data is immutable: the state
lists are the record's own and the projections are frozen).

The outbox is guarded by the intake's lock; pickling a pending chunk happens outside
it, under the writer's send lock, which is also what resending to a new child takes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

CHECKPOINT = "checkpoint"
_KIND = 3  # the kind's position in a deferred record's tuple


class Chunk:
    """Records ``first`` .. ``first + count - 1`` of the writer's sequence, pickled or still to be."""

    __slots__ = ("first", "count", "data", "records")

    def __init__(self, first: int, records: list[Any], data: bytes | None) -> None:
        self.first = first
        self.count = len(records)
        self.data = data
        self.records = None if data is not None else records  # kept only until pickled

    def pickle(self, dumps: Callable[[list[Any]], bytes]) -> bytes:
        """(Send lock held, no other.) The chunk's bytes, pickling it first if it is pending."""
        if self.data is None:
            assert self.records is not None
            self.data, self.records = dumps(self.records), None
        return self.data


class Outbox:
    """Chunks sealed and not yet settled, and those of them not yet sent to the current child."""

    def __init__(self) -> None:
        self.sealed = 0  # records sealed into chunks so far
        self._unacked: deque[Chunk] = deque()
        self._unsent: deque[Chunk] = deque()

    def __bool__(self) -> bool:
        """Whether anything waits to be sent."""
        return bool(self._unsent)

    def seal(self, encoded: list[Any], dumps: Callable[[list[Any]], bytes]) -> None:
        """Add ``encoded`` (the producer's records, in order) as chunks: pickled now, but each
        deferred checkpoint alone and pending."""
        kinds = [r[_KIND] for r in encoded if type(r) is tuple]  # deferred records travel as plain tuples
        if CHECKPOINT not in kinds:
            self._add(encoded, dumps(encoded))
            return
        start = 0
        for at, record in enumerate(encoded):
            if type(record) is tuple and record[_KIND] == CHECKPOINT:
                if at > start:
                    self._add(encoded[start:at], dumps(encoded[start:at]))
                self._add([record], None)
                start = at + 1
        if start < len(encoded):
            self._add(encoded[start:], dumps(encoded[start:]))

    def _add(self, records: list[Any], data: bytes | None) -> None:
        chunk = Chunk(self.sealed, records, data)
        self.sealed += chunk.count
        self._unacked.append(chunk)
        self._unsent.append(chunk)

    def trim(self, settled: int) -> None:
        """Forget the chunks whose every record the child has settled."""
        unacked = self._unacked
        while unacked and unacked[0].first + unacked[0].count <= settled:
            unacked.popleft()

    def take_unsent(self) -> list[Chunk]:
        chunks = list(self._unsent)
        self._unsent.clear()
        return chunks

    def resend(self, settled: int) -> tuple[int, list[Chunk]]:
        """For a new child: the index of its first record, and every chunk not yet settled.

        Whole chunks go again, those never written to the dead child too: the new child
        settles the records the dead one had stored once more (skipped, same LSN and
        content), so it counts from the first record of the first one.
        """
        self.trim(settled)
        self._unsent.clear()
        first = self._unacked[0].first if self._unacked else self.sealed
        return first, list(self._unacked)
