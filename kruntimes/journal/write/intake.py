"""The producer side of a journal writer: a bounded buffer and the count of settled records.

Both writers take records the same way. ``append`` is a lock-protected deque push,
called under the lock that assigned the record's LSN, so the buffer is in LSN order.
When the buffer is full the producer waits (policy ``block``) or the record is
dropped and counted (``drop``). ``flush`` waits until every record appended so far
has *settled* -- is durable in the database or the spool, was rejected, or was
dropped -- which the consumer reports with ``settle``.

What "full" counts differs: ``JournalWriter`` bounds the records still buffered
(its thread holds at most one batch besides), ``ProcessJournalWriter`` bounds every
record not yet settled, since those sent to the child are kept until it confirms them.

A consumer may also have the producer *seal* the buffer: every ``seal_at`` records
``append`` calls ``seal`` (lock held), which takes the buffer as it is.
``ProcessJournalWriter`` pickles its records there, in the thread that made them,
so they never outlive a few cycles and no other thread needs the interpreter to
serialise them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

from kruntimes.journal import errors

Policy = Literal["block", "drop"]


class Intake:
    """Buffer, back pressure and settlement shared by a producer and one consumer thread.

    The consumer uses ``lock`` and the conditions directly (it waits on ``has_work``
    with its own conditions), so the fields are public; producers use the methods.
    """

    def __init__(self, capacity: int, policy: Policy, *, bound_unsettled: bool,
                 seal: Callable[[], None] | None = None, seal_at: int = 0) -> None:
        if capacity < 1:
            raise ValueError("buffer_size must be positive")
        if policy not in ("block", "drop"):
            raise ValueError(f"policy must be 'block' or 'drop', not {policy!r}")
        self.capacity = capacity
        self.policy = policy
        self._bound_unsettled = bound_unsettled
        self._seal = seal
        self._seal_at = seal_at if seal is not None else 0
        self.lock = threading.Lock()
        self.has_work = threading.Condition(self.lock)
        self.has_room = threading.Condition(self.lock)
        self.progress = threading.Condition(self.lock)
        self.buffer: deque[Any] = deque()
        self.appended = 0  # records accepted so far: the sequence flush() waits for
        self.settled = 0  # of those, how many are durable, rejected or dropped
        self.dropped = 0  # records the drop policy refused on append
        self.consumer_waiting = False
        self.producers_waiting = 0
        self.stopping = False
        self.abandon = False  # the consumer gave up: stop waiting for settlement

    # -- producers -------------------------------------------------------------------

    def append(self, record: Any) -> bool:
        """Queue ``record``; False if the drop policy dropped it."""
        # Called for every change the scheduler makes, under its cache lock: the
        # common case (open, room, consumer busy) makes no further Python call.
        with self.lock:
            used = self.appended - self.settled if self._bound_unsettled else len(self.buffer)
            if (self.stopping or used >= self.capacity) and not self._wait_for_room():
                return False
            buffer = self.buffer
            buffer.append(record)
            self.appended += 1
            if len(buffer) == self._seal_at:
                self._seal()  # type: ignore[misc]
            if self.consumer_waiting:
                self.consumer_waiting = False
                self.has_work.notify()
        return True

    def extend(self, batch: list[Any]) -> int:
        """Queue ``batch`` in order; return how many the drop policy dropped.

        Takes the lock once per run of records that fit, so the consumer sees them together.
        """
        dropped = 0
        start = 0
        with self.lock:
            while start < len(batch):
                if not self._wait_for_room():
                    dropped += 1
                    start += 1
                    continue
                end = min(len(batch), start + self.capacity - self._used())
                self.buffer.extend(batch[start:end])
                self.appended += end - start
                start = end
                if self._seal_at and len(self.buffer) >= self._seal_at:
                    self._seal()  # type: ignore[misc]
                self._wake_consumer()
        return dropped

    def flush(self, timeout: float | None) -> bool:
        """Wait until every record appended so far has settled (False on timeout)."""
        with self.lock:
            target = self.appended
            return self.progress.wait_for(lambda: self.settled >= target or self.abandon, timeout)

    def wait_progress(self, after: int, timeout: float | None) -> int:
        """The settled count, once it exceeds ``after`` (or on timeout, or when stopping)."""
        with self.lock:
            self.progress.wait_for(lambda: self.settled > after or self.abandon or self.stopping, timeout)
            return self.settled

    # -- the consumer ----------------------------------------------------------------

    def take(self, limit: int) -> list[Any]:
        """(Lock held.) Up to ``limit`` buffered records, oldest first."""
        if limit >= len(self.buffer):
            batch = list(self.buffer)
            self.buffer.clear()
        else:
            popleft = self.buffer.popleft
            batch = [popleft() for _ in range(limit)]
        if self.producers_waiting and not self._bound_unsettled:
            self.has_room.notify_all()
        return batch

    def settle(self, settled: int) -> None:
        """(Lock held.) ``settled`` records in total have settled (never goes down)."""
        self.settled = max(self.settled, settled)
        self.progress.notify_all()
        if self.producers_waiting and self._bound_unsettled:
            self.has_room.notify_all()

    def stop(self, *, abandon: bool = False) -> None:
        """Refuse new records and wake everyone; ``abandon`` also ends every wait for settlement."""
        with self.lock:
            self.stopping = True
            self.abandon = self.abandon or abandon
            self.has_work.notify_all()
            self.has_room.notify_all()
            self.progress.notify_all()

    # -- internals ---------------------------------------------------------------------

    def _used(self) -> int:
        return self.appended - self.settled if self._bound_unsettled else len(self.buffer)

    def _wake_consumer(self) -> None:
        if self.consumer_waiting:
            self.consumer_waiting = False
            self.has_work.notify()

    def _wait_for_room(self) -> bool:
        """(Lock held.) Wait for room; False if the drop policy drops instead."""
        if self.stopping:
            raise errors.JournalError("journal writer is closed")
        if self._used() >= self.capacity:
            if self.policy == "drop":
                self.dropped += 1
                return False
            self.producers_waiting += 1
            try:
                while self._used() >= self.capacity and not self.stopping:
                    self.has_room.wait()
            finally:
                self.producers_waiting -= 1
            if self.stopping:
                raise errors.JournalError("journal writer closed while append was blocked")
        return True
