"""JournalRecorder: the cluster cache's Recorder that writes the journal.

The cache calls `record` under its lock at the moment a change happens; the
recorder assigns the next LSN and the timestamp there and pushes the record into
the writer's buffer, which never blocks on the database. It never reads anything
back: the journal is an audit log, not scheduler state.

Turning a change into its JSON payload (`payloads`) costs more than scheduling
the change did - a cycle's summary and digest walk every evaluated pod - so when
the sink takes deferred records (`accepts_deferred`) the recorder hands over the
immutable data as it is and the writer builds the payload off the scheduler's
path; any other sink gets the finished `JournalRecord`.

Every so often it also writes the full projected cache state and the assumed cache
(a checkpoint), so replay never has to start from the beginning: once at least
`checkpoint_every` records, and at least `checkpoint_size_ratio` times as many
records as the cache holds objects, have been written since the last one. A
checkpoint costs about a fifth of what recording as many changes as it holds objects
does, so the ratio bounds checkpoints to a fixed share of the journal's cost however
large the cluster; replaying any cycle applies at most that many records after
restoring its checkpoint.
"""

from __future__ import annotations

import socket
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

from kruntimes import __version__
from kruntimes.journal import payloads
from kruntimes.journal.payloads import DEFAULT_TOP_CANDIDATES, DETAILS, DeferredRecord
from kruntimes.journal.records import JournalRecord
from kruntimes.scheduler import device_outcome
from kruntimes.scheduler.config import PLANNER_VERSION, SchedulerConfig
#: Records between checkpoints. Replaying one cycle costs restoring its checkpoint
#: plus ~13 us per record after it; at 5,000 the worst case stays under 200 ms on a
#: 1M-record journal (bench/replay.py), at ~240 bytes of checkpoint per record.
DEFAULT_CHECKPOINT_EVERY = 5_000
_new_tuple = tuple.__new__
#: Records between checkpoints per object the cache holds. At 2, a cache
#: of 5,400 objects (the demo) is checkpointed every ~10,800 records instead of every
#: 5,000 (which cost the scheduler ~8% of its throughput, bench/journal_overhead.py),
#: and replaying the farthest cycle of bench/replay.py's 1,000-pod history stays near
#: 160 ms (6,800 records after its checkpoint); at 4 it took ~290 ms.
DEFAULT_CHECKPOINT_SIZE_RATIO = 2


class Sink(Protocol):
    def append(self, record: JournalRecord | DeferredRecord) -> Any: ...


class StateSource(Protocol):
    def checkpoint_state(self) -> dict[str, Any]: ...

    def state_size(self) -> int: ...


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class JournalRecorder:
    """Numbers every change and hands it to the writer. Called under the cache lock."""

    def __init__(self, sink: Sink, *, start_lsn: int, detail: str = "summary",
                 checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
                 checkpoint_size_ratio: int = DEFAULT_CHECKPOINT_SIZE_RATIO,
                 clock: Callable[[], datetime] = utc_now, incarnation: str | None = None) -> None:
        if detail not in DETAILS:
            raise ValueError(f"journal detail must be one of {', '.join(DETAILS)}, not {detail!r}")
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be >= 1")
        if checkpoint_size_ratio < 0:
            raise ValueError("checkpoint_size_ratio must be >= 0")
        self.sink = sink
        self.lsn = start_lsn or 0  # an empty journal has no last LSN
        self.detail = detail
        self.checkpoint_every = checkpoint_every
        self.checkpoint_size_ratio = checkpoint_size_ratio
        self.clock = clock
        self.incarnation = incarnation or uuid.uuid4().hex
        self.state_source: StateSource | None = None
        self.top_candidates = DEFAULT_TOP_CANDIDATES
        self._counted_from = self.lsn  # changes after this LSN count towards the next checkpoint
        #: The scheduler's numbered mark (``handover.Numbered.view``): each LSN is stored in it before
        #: its record is handed over, so a kill's loss of records not yet sent is named (SPEC §5).
        self.numbered: Any = None

    @property
    def sink(self) -> Sink:
        return self._sink

    @sink.setter
    def sink(self, sink: Sink) -> None:
        self._sink = sink
        self._defer = bool(getattr(sink, "accepts_deferred", False))

    def start(self, config: SchedulerConfig, *, top_candidates: int, instance: str | None = None) -> int:
        """The incarnation record: who is scheduling, with which code and configuration."""
        self.top_candidates = top_candidates
        lsn = self.record("incarnation", {
            "instance": instance or socket.gethostname(), "version": __version__,
            "planner_version": PLANNER_VERSION, "config": config.to_dict(), "config_hash": config.digest(),
            "top_candidates": top_candidates, "detail": self.detail, "checkpoint_every": self.checkpoint_every,
            "checkpoint_size_ratio": self.checkpoint_size_ratio,
            "devices": device_outcome.configuration(),  # CEL engine and step budgets (SPEC §7.8)
        })
        self._counted_from = lsn  # the incarnation record is no change
        return lsn

    def settled(self) -> int | None:
        """Called by the cache, under its lock, once a whole change is applied.

        Checkpoints are taken only here - never in the middle of a change that has
        been recorded but not yet applied - so a checkpoint is always exactly the
        state after the record before it. Returns the checkpoint's LSN, if one was taken.
        """
        since, source = self.lsn - self._counted_from, self.state_source
        if since < self.checkpoint_every or source is None:
            return None
        if since < self.checkpoint_size_ratio * source.state_size():
            return None
        return self.checkpoint()

    def checkpoint(self) -> int:
        """The full projected cache state and the assumed cache, as of this LSN."""
        assert self.state_source is not None, "attach the cluster cache first"
        lsn = self.record("checkpoint", self.state_source.checkpoint_state())
        self._counted_from = lsn
        return lsn

    def record(self, kind: str, data: Any) -> int:
        """Number the change and hand it to the sink; its LSN. Called under the cache lock."""
        self.lsn += 1
        if self.numbered is not None:
            self.numbered[0] = self.lsn
        if self._defer:
            # The default clock as integer microseconds: no datetime to build or pickle
            # here; payloads.realize turns it into the same UTC instant. The tuple is
            # made in C (a NamedTuple's own constructor is Python): this runs under the
            # cache lock for every change.
            at = time.time_ns() // 1000 if self.clock is utc_now else self.clock()
            self._sink.append(_new_tuple(DeferredRecord, (self.incarnation, self.lsn, at, kind, data,
                                                          self.detail, self.top_candidates)))
        else:
            payload = payloads.build(kind, data, detail=self.detail, top=self.top_candidates)
            self._sink.append(JournalRecord(incarnation=self.incarnation, lsn=self.lsn, recorded_at=self.clock(),
                                           kind=kind, payload=payload))
        return self.lsn
