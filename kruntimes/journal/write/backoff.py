"""When the writer tries the database again: a retry interval that doubles after each failure.

One ``Backoff`` per writer, shared by the writer's batches and its spool drain, so a
failed drain and a failed batch push back the same next try.
"""

from __future__ import annotations

from collections.abc import Callable


class Backoff:
    """The next try's time on ``clock``; each failure doubles the wait, up to ``maximum``."""

    __slots__ = ("clock", "minimum", "maximum", "interval", "next_at")

    def __init__(self, clock: Callable[[], float], minimum: float, maximum: float) -> None:
        self.clock = clock
        self.minimum = minimum
        self.maximum = maximum
        self.interval = minimum
        self.next_at = 0.0

    def due(self) -> bool:
        return self.clock() >= self.next_at

    def fail(self) -> None:
        """A try failed: the next waits the current interval, and the one after twice as long."""
        self.next_at = self.clock() + self.interval
        self.interval = min(self.interval * 2, self.maximum)

    def reset(self) -> None:
        """The database took everything: the next failure waits the minimum again."""
        self.interval = self.minimum
