"""Walk the journal once and reach every selected cycle's snapshot on the way.

The cycles to replay are read first (small: their position, Run and `now`),
grouped by incarnation. Per incarnation ONE walk starts from the newest checkpoint
at or before the earliest snapshot LSN needed (or from the incarnation's first
record), keeps one cache, and runs `evaluate` on each cycle when the rebuilt
state reaches that cycle's snapshot LSN - the planner never sees a state that is
a record early or late. A cycle is recorded after it acts, so its result is
held until the walk reaches the cycle's own record, and handed over with it.

Every checkpoint passed on the way is compared with the rebuilt state, so a walk
over a range also proves the checkpoints a later single-cycle replay starts from.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from kruntimes.journal.store import backends
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.snapshot import Snapshot
from replay import errors, source
from replay.rebuild import Incarnation, Rebuilder
from replay.source import Record

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CycleRef:
    """What a cycle record says about the snapshot it planned on."""

    lsn: int
    incarnation: str
    snapshot_lsn: int
    namespace: str
    run: str
    run_uid: str
    now: datetime
    pods: int = 0  # pods the cycle evaluated: what planning it again costs, for splitting work

    @classmethod
    def of(cls, record: Record) -> CycleRef:
        try:
            return cls(lsn=record.lsn, incarnation=record.incarnation, snapshot_lsn=int(record.field("snapshot_lsn")),
                       namespace=str(record.field("namespace")), run=str(record.field("run")),
                       run_uid=str(record.field("run_uid")), now=datetime.fromisoformat(record.field("now")),
                       pods=int(record.payload.get("pods_evaluated") or 0))
        except (TypeError, ValueError) as exc:
            raise errors.CorruptRecord(record.lsn, f"the cycle record cannot be read: {exc!r}") from exc


@dataclass(frozen=True)
class Context:
    """A cycle at its snapshot: the rebuilt cache (lock held), the Run as it was, the recorded `now`."""

    cycle: CycleRef
    incarnation: Incarnation
    cache: ClusterCache
    run: RunInfo
    warnings: tuple[str, ...]

    def snapshot(self, config: SchedulerConfig | None = None) -> Snapshot:
        """The planner's snapshot, exactly as the live cycle took it (or with another configuration)."""
        return self.cache.snapshot(self.run, self.cycle.now, config or self.incarnation.config)


@dataclass
class Replayed(Generic[T]):
    """A cycle's record (reached by the walk) and what `evaluate` made of its snapshot."""

    record: Record
    cycle: CycleRef
    incarnation: Incarnation
    value: T


@dataclass
class Stats:
    """What the walks did, for summaries: incarnations, records applied, checkpoints proven."""

    incarnations: list[str] = field(default_factory=list)
    records: int = 0
    checkpoints_compared: int = 0
    started_from: list[int] = field(default_factory=list)  # the checkpoint or incarnation LSN of each walk
    warnings: list[str] = field(default_factory=list)


def select(journal: backends.Journal, selection: source.Selection) -> list[CycleRef]:
    """The cycles `selection` names, as compact references (payloads are not kept)."""
    with contextlib.closing(source.cycles(journal, selection)) as found:
        return [CycleRef.of(record) for record in found]


def replay(journal: backends.Journal, cycles: Iterable[CycleRef], evaluate: Callable[[Context], T],
           stats: Stats | None = None) -> Iterator[Replayed[T]]:
    """Evaluate every cycle of `cycles` at its snapshot; yield them in LSN order of their records."""
    by_incarnation: dict[str, list[CycleRef]] = {}
    for ref in cycles:
        by_incarnation.setdefault(ref.incarnation, []).append(ref)
    for incarnation_id, refs in by_incarnation.items():
        yield from walk(journal, incarnation_id, refs, evaluate, stats if stats is not None else Stats())


def walk(journal: backends.Journal, incarnation_id: str, refs: list[CycleRef], evaluate: Callable[[Context], T],
         stats: Stats, *, through: int = 0) -> Iterator[Replayed[T]]:
    """One walk over one incarnation's records for `refs` (in LSN order); on at least to LSN `through`.

    Walking on to `through` proves every checkpoint up to there: a caller that splits a
    range into walks passes the next walk's starting checkpoint, so that each
    checkpoint a walk restores (and trusts) is one another walk compared.
    """
    with _fewer_collections():
        yield from _walk(journal, incarnation_id, refs, evaluate, stats, through)


def start_of(journal: backends.Journal, incarnation_id: str, snapshot_lsn: int) -> int:
    """The checkpoint a walk to `snapshot_lsn` starts from; 0 for the incarnation's first record."""
    return source.latest_checkpoint(journal, incarnation_id, snapshot_lsn) or 0


def _walk(journal: backends.Journal, incarnation_id: str, refs: list[CycleRef],
          evaluate: Callable[[Context], T], stats: Stats, through: int = 0) -> Iterator[Replayed[T]]:
    first = source.incarnation_record(journal, incarnation_id)
    if first is None:
        raise errors.RecordGap(refs[0].lsn, None, f"the incarnation record of {incarnation_id} is not in the journal: "
                                                  "the configuration its cycles ran with is unknown")
    incarnation = Incarnation(first)
    for ref in refs:
        if not incarnation.lsn <= ref.snapshot_lsn < ref.lsn:
            raise errors.InconsistentHistory(
                ref.lsn, f"the cycle's snapshot LSN {ref.snapshot_lsn} is not between its incarnation's first record "
                         f"({incarnation.lsn}) and the cycle itself")
    earliest = min(ref.snapshot_lsn for ref in refs)
    last = max([through, *(ref.lsn for ref in refs)])
    rebuilder = Rebuilder(incarnation)
    checkpoint_lsn = source.latest_checkpoint(journal, incarnation_id, earliest)
    start = incarnation.lsn
    if checkpoint_lsn is not None and checkpoint_lsn > incarnation.lsn:
        checkpoint = source.record_at(journal, checkpoint_lsn, incarnation_id)
        assert checkpoint is not None
        rebuilder.restore(checkpoint)
        start = checkpoint_lsn
    stats.incarnations.append(incarnation_id)
    stats.started_from.append(start)

    records = source.stream(journal, start, last, incarnation_id)
    with contextlib.closing(records), contextlib.closing(rebuilder.walk(records)) as walk:
        yield from _reach(walk, refs, evaluate, rebuilder, incarnation, start)
    stats.records += last - start
    stats.checkpoints_compared += rebuilder.checkpoints_compared
    stats.warnings.extend(rebuilder.warnings)


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Pause the cyclic garbage collector while a walk builds the rebuilt state.

    Restoring a checkpoint and applying thousands of records allocates many small,
    long-lived, acyclic objects (reference counting frees them); the collector only
    re-scans them, and even at a 50,000-allocation threshold it cost a quarter of a
    one-cycle replay and most of its tail (measured with `bench/replay.py`: median
    98 -> 76 ms, max 240 -> 127 ms). Process-wide while the walk runs; callers close
    the walk, which restores the collector.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _reach(walk: Iterator[tuple[int, Record | None]], refs: list[CycleRef], evaluate: Callable[[Context], T],
           rebuilder: Rebuilder, incarnation: Incarnation, start: int) -> Iterator[Replayed[T]]:
    """Evaluate each cycle when the walk reaches its snapshot; hand it over when it reaches its record."""
    snapshots = sorted({ref.snapshot_lsn for ref in refs})
    at_snapshot: dict[int, list[CycleRef]] = {}
    for ref in refs:
        at_snapshot.setdefault(ref.snapshot_lsn, []).append(ref)
    wanted = {ref.lsn: ref for ref in refs}
    held: dict[int, T] = {}
    next_index = bisect.bisect_left(snapshots, start)  # none is before `start`: checked by the caller
    cache = rebuilder.cache
    for lsn, passed in walk:
        while next_index < len(snapshots) and snapshots[next_index] < lsn:
            skipped = at_snapshot[snapshots[next_index]][0]
            raise errors.InconsistentHistory(
                skipped.lsn, f"the cycle's snapshot LSN {skipped.snapshot_lsn} falls inside one change of the cache "
                             f"(the records up to {lsn} are one step): no live cycle can have seen that state")
        if next_index < len(snapshots) and snapshots[next_index] == lsn:
            with cache.lock:
                for ref in at_snapshot[lsn]:
                    held[ref.lsn] = evaluate(Context(ref, incarnation, cache, _run_of(cache, ref),
                                                     tuple(rebuilder.warnings)))
            next_index += 1
        if passed is not None and passed.kind == "cycle" and passed.lsn in held:
            yield Replayed(record=passed, cycle=wanted[passed.lsn], incarnation=incarnation,
                           value=held.pop(passed.lsn))


def _run_of(cache: ClusterCache, ref: CycleRef) -> RunInfo:
    run = cache.run((ref.namespace, ref.run))
    if run is None or run.uid != ref.run_uid:
        raise errors.InconsistentHistory(
            ref.lsn, f"the cycle planned Run {ref.namespace}/{ref.run} (uid {ref.run_uid}), which is not in the state "
                     f"rebuilt up to its snapshot LSN {ref.snapshot_lsn}")
    if not run.eligible:
        raise errors.InconsistentHistory(
            ref.lsn, f"the cycle planned Run {ref.namespace}/{ref.run}, which is {run.phase} (not Pending) in the "
                     f"state rebuilt up to its snapshot LSN {ref.snapshot_lsn}")
    return run
