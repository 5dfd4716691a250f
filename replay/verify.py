"""Verify a history: replay every cycle in a range and require the same decisions.

This is how a new scheduler version is checked against production history before
it is rolled out: `kruntimes replay verify` walks the journal once per
incarnation (`engine`), reproduces every selected cycle with the planner of THIS
installation (`reproduce`) and counts identical and divergent decisions. A
damaged journal raises (`errors.JournalDamage`), it never counts as divergent.

A pruned journal verifies from the checkpoint its prune record names (SPEC §5
Retention): `coverage` first proves the journal complete from there (or from LSN 1
if it was never pruned), and cycles that read a state before that checkpoint are
skipped and counted, never replayed from records that are gone. Cycles named by
LSN skip the count of the whole journal (their walks check what they read).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kruntimes.journal import backends
from replay import coverage, engine, errors, parallel, reproduce, source

#: Divergent cycles kept with their full replayed outcome; the rest keep their differences only.
KEEP_OUTCOMES = 50

Progress = Callable[[int, int, int], None]  # (cycles done, cycles in range, diverged so far)


@dataclass
class VerifyReport:
    selected: int
    replayed: int = 0
    identical: int = 0
    diverged: list[reproduce.CycleResult] = field(default_factory=list)
    stats: engine.Stats = field(default_factory=engine.Stats)
    seconds: float = 0.0
    pruned: coverage.Pruned | None = None  # where a recorded prune says the journal starts
    skipped: int = 0  # cycles in range whose snapshot is before that checkpoint
    workers: int = 1  # processes that replayed
    walk_cpu: dict[int, float] = field(default_factory=dict)  # process ID -> CPU seconds its walks took

    def add(self, result: parallel.UnitResult) -> None:
        """Count in what one walk judged."""
        self.walk_cpu[result.process] = self.walk_cpu.get(result.process, 0.0) + result.cpu_seconds
        self.replayed += result.replayed
        self.identical += result.identical
        self.diverged.extend(result.diverged)
        stats, theirs = self.stats, result.stats
        stats.incarnations.extend(i for i in theirs.incarnations if i not in stats.incarnations)
        stats.records += theirs.records
        stats.checkpoints_compared += theirs.checkpoints_compared
        stats.started_from.extend(theirs.started_from)
        stats.warnings.extend(w for w in theirs.warnings if w not in stats.warnings)

    @property
    def ok(self) -> bool:
        return not self.diverged and self.replayed == self.selected

    @property
    def rate(self) -> float:
        return self.replayed / self.seconds if self.seconds > 0 else 0.0


def verify(journal: backends.Journal, selection: source.Selection = source.Selection(),
           progress: Progress | None = None, *, workers: int = 1,
           min_parallel_work: int = parallel.MIN_PARALLEL_WORK) -> VerifyReport:
    """Replay every cycle `selection` names; report identical and divergent decisions.

    With `workers` > 1 and enough planning to pay for starting processes, the walks
    run in a process pool (`parallel`); the report is the same as a serial one's.
    Damage stops the walk it is in and is raised once every walk has reported.
    """
    started = time.perf_counter()
    pruned = coverage.check(journal, whole=selection.lsns is None)
    cycles = engine.select(journal, selection)
    skipped = 0
    if pruned is not None:
        replayable = [ref for ref in cycles if ref.snapshot_lsn >= pruned.checkpoint_lsn]
        skipped, cycles = len(cycles) - len(replayable), replayable
    report = VerifyReport(selected=len(cycles), pruned=pruned, skipped=skipped)
    if progress is not None:
        progress(0, len(cycles), 0)
    url = parallel.url_of(journal)
    pool = workers > 1 and url is not None and parallel.work(cycles) >= min_parallel_work
    units = parallel.split(journal, cycles, workers * parallel.PIECES_PER_WORKER if pool else 1)
    report.workers = workers if pool and len(units) > 1 else 1
    if report.workers > 1:
        assert url is not None
        results = parallel.run(url, units, report.workers, KEEP_OUTCOMES)
    else:
        results = (parallel.run_unit(journal, unit, KEEP_OUTCOMES) for unit in units)
    damage: list[errors.JournalDamage] = []
    for result in results:
        report.add(result)
        if result.damage is not None:
            damage.append(result.damage)
        if progress is not None:
            progress(report.replayed, report.selected, len(report.diverged))
    report.diverged.sort(key=lambda r: (r.incarnation, r.lsn))
    for kept, result in enumerate(report.diverged):
        if kept >= KEEP_OUTCOMES:
            result.outcome = None
    report.seconds = time.perf_counter() - started
    if damage:
        first = {u.incarnation: i for i, u in reversed(list(enumerate(units)))}  # epochs in journal order
        raise min(damage, key=lambda d: (first.get(d.epoch or "", 0), d.lsn))
    return report
