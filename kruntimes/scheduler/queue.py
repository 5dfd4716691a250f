"""The scheduler's work queue: one key per Run that needs a scheduling cycle (SPEC §3.1).

Event handlers only add keys; workers take a key, run one cycle, and mark it done.
The semantics are those of client-go's workqueue, with its plain, delaying and
rate-limiting queues folded into one class:

- A key waits at most once: adding a key that is already waiting is a no-op, and
  waiting keys are handed out in the order of their first add (FIFO).
- A key is never handed to two workers at once. Adding a key while a worker holds it
  marks it *dirty*; `done` puts it back in line, so the change is not lost.
- `add_after` parks a key in a heap until its ready time (the earlier of two times
  wins); `add_rate_limited` parks it for a per-key exponential backoff.

Deliberate differences from client-go:

- No timer thread. Delayed keys are promoted lazily, under the lock, by whichever call
  next looks at the queue; a blocked `get` sleeps on the condition variable only until
  the next ready time, so a due key is still handed out on time.
- Shutdown stops handing out work at once: every later `get` raises `QueueShutDown`,
  even if keys were waiting (client-go keeps returning waiting keys). Waiting, dirty
  and delayed keys are dropped; the scheduler re-lists Pending Runs when it starts.

Two clocks. Delays, backoff and the `on_dequeue` latency use the injected `clock`, so
tests can drive them with a fake clock (advance it, then call `poke`). The `timeout`
arguments of `get` and `shut_down` bound how long the calling thread blocks and are
always real seconds.
"""

from __future__ import annotations

import collections
import heapq
import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

logger = logging.getLogger(__name__)

DEFAULT_BASE_DELAY = 0.005
"""First backoff of `add_rate_limited`, in clock seconds (client-go: 5 ms)."""

DEFAULT_MAX_DELAY = 300.0
"""Cap of the backoff, in clock seconds (client-go caps at 1000 s; a Run waits less)."""

# Beyond this many failures the backoff is the cap anyway; bounding the exponent keeps
# `2 ** failures` from growing without limit for a key that keeps failing.
_MAX_BACKOFF_EXPONENT = 1000

# Lazily deleted heap entries are purged once they exceed both this and the number of
# live delayed keys, so a key rescheduled again and again cannot grow the heap unbounded.
_STALE_HEAP_ENTRIES_BEFORE_COMPACTION = 64


class QueueShutDown(Exception):
    """Raised by `WorkQueue.get` once the queue is shut down: the worker should exit."""


class WorkQueue(Generic[K]):
    """A thread-safe work queue with coalescing, delayed adds and per-key backoff.

    Keys are hashable values; the scheduler uses `(namespace, name)` of a Run.
    All state is guarded by one `threading.Condition`; add, get and done are O(1),
    delayed adds O(log n).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        base_delay: float = DEFAULT_BASE_DELAY,
        max_delay: float = DEFAULT_MAX_DELAY,
        on_dequeue: Callable[[K, float], None] | None = None,
    ) -> None:
        """Create an empty queue.

        `on_dequeue(key, waited_seconds)` is called by `get`, outside the lock, with the
        clock time between the moment the key was requested (the add that made it
        waiting or dirty, or the expiry of its delay) and the moment it was handed out.
        An exception from it is logged and otherwise ignored.
        """
        if base_delay <= 0:
            raise ValueError(f"base_delay must be positive, got {base_delay}")
        if max_delay < base_delay:
            raise ValueError(f"max_delay ({max_delay}) must be >= base_delay ({base_delay})")
        self._clock = clock
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._on_dequeue = on_dequeue
        self._cond = threading.Condition()

        # Plain queue. Invariant: key in _waiting <=> key in _dirty and not in _processing.
        self._waiting: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        # When each dirty key was requested, for the on_dequeue latency.
        self._requested_at: dict[K, float] = {}

        # Delaying queue: heap of (ready_at, seq, key); _delayed holds the live entry's
        # (ready_at, seq) per key, other heap entries for that key are stale.
        self._heap: list[tuple[float, int, K]] = []
        self._delayed: dict[K, tuple[float, int]] = {}
        self._seq = 0

        # Rate limiter: failures per key since the last forget.
        self._failures: dict[K, int] = {}

        self._shutting_down = False

    # -- adding ---------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Request a cycle for `key`; coalesced if it is already waiting or dirty.

        Ignored after shutdown.
        """
        with self._cond:
            if self._shutting_down:
                return
            self._add_locked(key, self._clock())

    def add_after(self, key: K, delay_seconds: float) -> None:
        """Add `key` once `delay_seconds` of clock time have passed (<= 0: now).

        If `key` is already scheduled, the earlier ready time wins. A pending delay is
        independent of the key's waiting state, as in client-go: when it expires the
        key is added (and coalesced) like any other add. Ignored after shutdown.
        """
        with self._cond:
            if self._shutting_down:
                return
            now = self._clock()
            if delay_seconds <= 0:
                self._add_locked(key, now)
                return
            ready_at = now + delay_seconds
            current = self._delayed.get(key)
            if current is not None and current[0] <= ready_at:
                return
            self._seq += 1
            self._delayed[key] = (ready_at, self._seq)
            heapq.heappush(self._heap, (ready_at, self._seq, key))
            self._compact_heap_if_needed()
            if self._heap[0][1] == self._seq:
                # New earliest deadline: blocked getters must shorten their sleep.
                self._cond.notify_all()

    def add_rate_limited(self, key: K) -> None:
        """Add `key` after its backoff: `base_delay * 2**failures`, capped at `max_delay`.

        Each call counts one more failure for `key` until `forget(key)`.
        """
        with self._cond:
            if self._shutting_down:
                return
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        self.add_after(key, self._backoff(failures))

    def forget(self, key: K) -> None:
        """Reset the failure count of `key` (call after a successful cycle).

        A delay already scheduled for `key` stays scheduled.
        """
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        """How many times `key` went through `add_rate_limited` since its last forget."""
        with self._cond:
            return self._failures.get(key, 0)

    # -- processing -----------------------------------------------------------------

    def get(self, timeout: float | None = None) -> K | None:
        """Take the next waiting key and mark it processing; the caller must `done` it.

        Blocks until a key is ready, or returns None after `timeout` real seconds
        (`timeout=0` polls). Raises `QueueShutDown` once the queue is shut down.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._shutting_down:
                    raise QueueShutDown("the work queue is shut down")
                now = self._clock()
                self._promote_due(now)
                if self._waiting:
                    key = self._waiting.popleft()
                    self._dirty.remove(key)
                    self._processing.add(key)
                    waited = max(0.0, now - self._requested_at.pop(key))
                    break
                sleep: float | None = None
                if deadline is not None:
                    sleep = deadline - time.monotonic()
                    if sleep <= 0:
                        return None
                if self._heap:
                    until_ready = max(0.0, self._heap[0][0] - now)
                    sleep = until_ready if sleep is None else min(sleep, until_ready)
                self._cond.wait(sleep)
        self._report_dequeue(key, waited)
        return key

    def done(self, key: K) -> None:
        """End processing of `key`; if it was added meanwhile, it waits again.

        Raises ValueError if `key` is not being processed (a worker bug: done twice,
        or done without get).
        """
        with self._cond:
            if key not in self._processing:
                raise ValueError(f"done({key!r}) called for a key that is not being processed")
            self._processing.remove(key)
            if key in self._dirty:
                self._waiting.append(key)
                self._cond.notify()
            if not self._processing and self._shutting_down:
                self._cond.notify_all()  # wake shut_down(drain=True)

    # -- shutdown -------------------------------------------------------------------

    def shut_down(self, drain: bool = False, timeout: float | None = None) -> bool:
        """Stop the queue: wake every blocked `get`, which then raises `QueueShutDown`.

        Later adds are ignored; waiting, dirty and delayed keys are dropped. With
        `drain`, also block until every key handed out is `done`, for at most
        `timeout` real seconds; returns False if that timed out, else True. Calling it
        from a worker that still holds a key would wait for itself: don't.
        """
        with self._cond:
            self._shutting_down = True
            self._waiting.clear()
            self._dirty.clear()
            self._requested_at.clear()
            self._heap.clear()
            self._delayed.clear()
            self._cond.notify_all()
            if not drain:
                return True
            return self._cond.wait_for(lambda: not self._processing, timeout)

    @property
    def shutting_down(self) -> bool:
        """True once `shut_down` has been called."""
        with self._cond:
            return self._shutting_down

    # -- observing ------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys waiting for a worker (not delayed, not processing)."""
        with self._cond:
            self._promote_due(self._clock())
            return len(self._waiting)

    def delayed_count(self) -> int:
        """Keys parked by `add_after` / `add_rate_limited` whose time has not come."""
        with self._cond:
            self._promote_due(self._clock())
            return len(self._delayed)

    def processing_count(self) -> int:
        """Keys handed to a worker and not yet `done`."""
        with self._cond:
            return len(self._processing)

    def idle(self) -> bool:
        """Nothing waiting, parked or in flight, read in one go under the lock."""
        with self._cond:
            self._promote_due(self._clock())
            return not (self._waiting or self._delayed or self._processing)

    def poke(self) -> None:
        """Wake blocked getters so they re-read the clock (after advancing a fake clock)."""
        with self._cond:
            self._cond.notify_all()

    # -- internals (call with the lock held) ----------------------------------------

    def _add_locked(self, key: K, requested_at: float) -> None:
        if key in self._dirty:
            return  # already waiting, or already due for another pass after done
        self._dirty.add(key)
        self._requested_at[key] = requested_at
        if key in self._processing:
            return  # done() will put it back in line
        self._waiting.append(key)
        self._cond.notify()

    def _promote_due(self, now: float) -> None:
        """Move every delayed key whose ready time has come into the plain queue."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            ready_at, seq, key = heapq.heappop(heap)
            if self._delayed.get(key) != (ready_at, seq):
                continue  # stale: the key was rescheduled earlier
            del self._delayed[key]
            self._add_locked(key, ready_at)

    def _compact_heap_if_needed(self) -> None:
        stale = len(self._heap) - len(self._delayed)
        if stale > _STALE_HEAP_ENTRIES_BEFORE_COMPACTION and stale > len(self._delayed):
            self._heap = [(at, seq, key) for key, (at, seq) in self._delayed.items()]
            heapq.heapify(self._heap)

    def _backoff(self, failures: int) -> float:
        exponent = min(failures, _MAX_BACKOFF_EXPONENT)
        return min(self._base_delay * 2**exponent, self._max_delay)

    def _report_dequeue(self, key: K, waited: float) -> None:
        if self._on_dequeue is None:
            return
        try:
            self._on_dequeue(key, waited)
        except Exception:  # a metrics hook must never break scheduling
            logger.exception("on_dequeue callback failed for key %r", key)
