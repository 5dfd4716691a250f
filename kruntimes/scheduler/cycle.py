"""One key's scheduling cycle, from its dequeue to the answer of its status write.

Shared by the loop that plans it (`loop`) and the bind that ends it (`binding`):
the loop hands the cycle over after planning, the write's answer ends it, in
either order and from whichever thread the answer comes back on.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from kruntimes.scheduler import outcome as out
from kruntimes.scheduler.parking import RunKey
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.queue import WorkQueue

#: What `Scheduler.process` returns while the cycle's write is still out.
IN_FLIGHT = "in-flight"


@dataclass(frozen=True)
class Planned:
    """What a cycle planned on and decided: its result is accounted for against it."""

    run: RunInfo
    outcome: out.CycleOutcome
    wakes_seen: Any


class Cycle:
    """One key's cycle, from its dequeue to the answer of its write.

    The scheduling loop hands the cycle over after planning (`hand_over`); the
    answer ends it (`answered`), in whichever order the two happen. Whoever comes
    second lets the key go: the loop by returning the result, the answer by marking
    the key done on the queue it came from.
    """

    __slots__ = ("key", "queue", "term", "started", "planned", "duration", "_lock", "_result", "_handed_over")

    def __init__(self, key: RunKey, queue: WorkQueue, term: int, started: float) -> None:
        self.key = key
        self.queue = queue
        self.term = term
        self.started = started
        self.planned: Planned | None = None
        self.duration: float | None = None  # the scheduling part: dequeue to hand-over
        self._lock = threading.Lock()
        self._result: str | None = None
        self._handed_over = False

    def hand_over(self) -> str:
        """The loop is done with the cycle: its result, or IN_FLIGHT while the answer is out."""
        with self._lock:
            if self._result is not None:
                return self._result
            self.duration = time.perf_counter() - self.started
            self._handed_over = True
            return IN_FLIGHT

    def answered(self, result: str) -> bool:
        """The cycle's result is known; True when the loop has handed it over (the key is ours to let go)."""
        with self._lock:
            self._result = result
            return self._handed_over
