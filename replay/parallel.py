"""Verify in a process pool: a range of cycles split into walks that need nothing from each other.

Replaying a cycle needs the state at its snapshot, and a checkpoint holds the whole
state: so a walk that starts at a checkpoint needs no record before it, and the
cycles of a long range can be planned by several processes at once (issue 16).
Planning is what costs (hundreds of pods per cycle), applying records is cheap, so
`split` cuts the selected cycles of each epoch into pieces of about equal planning
work (pods evaluated plus a per-cycle cost); each piece walks from the newest
checkpoint at or before its earliest snapshot.

A walk trusts the checkpoint it starts from. So that every checkpoint is still
*proven* - compared with the state the records before it build, as one serial walk
proves every checkpoint it passes - each piece walks on at least to the checkpoint
the next piece of its epoch starts from (`Unit.through`). Together the pieces cover
the same records as the serial walk, from the same first checkpoint.

Each worker opens the journal by its URL; results come back as they finish and are
put in LSN order by the caller. Damage found by one piece stops that piece only
(`UnitResult.damage`, named with its epoch); the others still report what they judged.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kruntimes.journal.store import backends, engines
from replay import engine, errors, reproduce

#: The planning cost of one cycle beyond its pods, in pods: ~48 us per cycle against
#: ~0.35 us per pod (the planner's figures in issue 16).
CYCLE_COST_IN_PODS = 130
#: Below this much planning work (pods evaluated plus the per-cycle cost) a pool costs more than it saves:
#: starting a worker process imports the planner and opens the journal (~0.5 s); this is ~1 s of planning.
MIN_PARALLEL_WORK = 2_500_000
#: Pieces per worker: more than one, so that a piece with costlier cycles does not leave a worker idle.
PIECES_PER_WORKER = 3


@dataclass(frozen=True)
class Unit:
    """One walk: cycles of one epoch, in LSN order, and the LSN to walk on to at least."""

    incarnation: str
    refs: tuple[engine.CycleRef, ...]
    through: int = 0


@dataclass
class UnitResult:
    """What one walk judged; `damage` is where it had to stop, if it did."""

    unit: Unit
    identical: int = 0
    diverged: list[reproduce.CycleResult] = field(default_factory=list)
    stats: engine.Stats = field(default_factory=engine.Stats)
    damage: errors.JournalDamage | None = None
    cpu_seconds: float = 0.0  # what the walk cost the process that ran it
    process: int = 0  # its process ID: which walks shared a worker

    @property
    def replayed(self) -> int:
        return self.identical + len(self.diverged)


def default_workers() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def work(refs: Sequence[engine.CycleRef]) -> int:
    """What planning `refs` again costs, in pods."""
    return sum(ref.pods + CYCLE_COST_IN_PODS for ref in refs)


def split(journal: backends.Journal, cycles: Sequence[engine.CycleRef], pieces: int) -> list[Unit]:
    """`cycles` as walks: one per epoch, or about `pieces` in all of about equal work."""
    by_epoch: dict[str, list[engine.CycleRef]] = {}
    for ref in cycles:
        by_epoch.setdefault(ref.incarnation, []).append(ref)
    total = max(1, work(cycles))
    units: list[Unit] = []
    for epoch, refs in by_epoch.items():
        refs.sort(key=lambda r: r.lsn)
        share = max(1, round(pieces * work(refs) / total)) if pieces > 1 else 1
        units.extend(_split_epoch(journal, epoch, refs, share))
    return units


def _split_epoch(journal: backends.Journal, epoch: str, refs: list[engine.CycleRef], pieces: int) -> list[Unit]:
    chunks: list[list[engine.CycleRef]] = [[]]
    target = work(refs) / pieces
    done = 0
    for ref in refs:
        if chunks[-1] and done >= target * len(chunks) and len(chunks) < pieces:
            chunks.append([])
        chunks[-1].append(ref)
        done += ref.pods + CYCLE_COST_IN_PODS
    if len(chunks) == 1:
        return [Unit(epoch, tuple(refs))]
    starts = [engine.start_of(journal, epoch, min(r.snapshot_lsn for r in chunk)) for chunk in chunks]
    return [Unit(epoch, tuple(chunk), through=starts[i + 1] if i + 1 < len(chunks) else 0)
            for i, chunk in enumerate(chunks)]


def run_unit(journal: backends.Journal, unit: Unit, keep_outcomes: int) -> UnitResult:
    """Walk `unit` in this process; divergent cycles past `keep_outcomes` keep their differences only."""
    result = UnitResult(unit, process=os.getpid())
    cpu = time.process_time()
    walk = engine.walk(journal, unit.incarnation, list(unit.refs), reproduce.plan, result.stats,
                       through=unit.through)
    try:
        with contextlib.closing(walk):
            for replayed in walk:
                judged = reproduce.judge(replayed)
                if judged.identical:
                    result.identical += 1
                    continue
                if len(result.diverged) >= keep_outcomes:
                    judged.outcome = None  # the differences, not a thousand-pod outcome each
                result.diverged.append(judged)
    except errors.JournalDamage as damage:
        result.damage = damage.located(unit.incarnation)
    result.cpu_seconds = time.process_time() - cpu
    return result


_journal: backends.Journal | None = None


def _open_in_worker(url: str) -> None:
    global _journal
    _journal = backends.Journal(engines.create_engine(url))


def _run_in_worker(unit: Unit, keep_outcomes: int) -> UnitResult:
    assert _journal is not None, "the pool's initializer opens the journal"
    return run_unit(_journal, unit, keep_outcomes)


def url_of(journal: backends.Journal) -> str | None:
    """The URL another process opens the same journal with; None for an in-memory SQLite journal."""
    url = journal.engine.url
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        return None
    return url.render_as_string(hide_password=False)


def run(url: str, units: Sequence[Unit], workers: int, keep_outcomes: int) -> Iterator[UnitResult]:
    """Walk `units` in `workers` processes; results in the order they finish.

    Workers are forked where the platform can: a spawned worker imports the planner
    and SQLAlchemy again, ~0.7 s of CPU each (measured), which on two cores cost more
    than a fifth of the gain on a 4,000-cycle verify. A forked worker opens its own
    engine and never touches the parent's connections it inherited; it ends with
    `os._exit`, so nothing closes them from the child either.
    """
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                initializer=_open_in_worker, initargs=(url,)) as pool:
        pending = [pool.submit(_run_in_worker, unit, keep_outcomes) for unit in units]
        try:
            for done in concurrent.futures.as_completed(pending):
                yield done.result()
        finally:
            for future in pending:
                future.cancel()
