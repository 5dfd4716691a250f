"""Exponential backoff with jitter, for reconnecting informers and a lease that cannot be read.

Full jitter keeps several replicas (or several informers of one process) from
hammering an API server that has just come back, all in the same instant.
"""

from __future__ import annotations

import random


class Backoff:
    """`next()` gives the delay before the next attempt; `reset()` after a success."""

    def __init__(self, initial: float, maximum: float, *, factor: float = 2.0,
                 rng: random.Random | None = None) -> None:
        if not 0 < initial <= maximum or factor < 1:
            raise ValueError("need 0 < initial <= maximum and factor >= 1")
        self.initial, self.maximum, self.factor = initial, maximum, factor
        self._rng = rng or random.Random()
        self._attempt = 0

    def next(self) -> float:
        """Between half and all of `initial * factor**attempts`, capped at `maximum`."""
        ceiling = min(self.maximum, self.initial * self.factor ** min(self._attempt, 64))
        self._attempt += 1
        return ceiling * (0.5 + 0.5 * self._rng.random())

    def reset(self) -> None:
        self._attempt = 0
