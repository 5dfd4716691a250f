"""Verify a history: prove every epoch whole, replay every cycle in a range and require the same decisions.

This is how a new scheduler version is checked against production history before
it is rolled out, and how an auditor checks that the history is the one written:
`kruntimes replay verify` first checks every epoch's integrity (`integrity`: its
start, gaps, payload hashes, chain links, end and head, against published heads and
the key), then walks the journal (`engine`, in a process pool with `parallel`),
reproduces every selected cycle with the planner of THIS installation (`reproduce`)
and counts identical and divergent decisions. Every problem is reported by epoch
and LSN; damage never counts as divergence, and stops only the walk it is in.

A pruned journal verifies from what its prune record says (SPEC §5 Retention):
`coverage` proves the record, the cut epoch resumes at the checkpoint it names (its
link checked from the last removed record's), epochs it removed whole are named,
and cycles that read a state before the cut are skipped and counted, never replayed
from records that are gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kruntimes.journal import chain
from kruntimes.journal.store import backends
from replay import coverage, engine, errors, integrity, parallel, reproduce, schema_damage, source

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
    pruned: coverage.Pruned | None = None  # what a recorded prune removed
    skipped: int = 0  # cycles in range whose snapshot is before the checkpoint their epoch was cut at
    workers: int = 1  # processes that replayed
    walk_cpu: dict[int, float] = field(default_factory=dict)  # process ID -> CPU seconds its walks took
    epochs: dict[str, integrity.EpochReport] = field(default_factory=dict)  # oldest first
    unplaced: list[errors.JournalDamage] = field(default_factory=list)  # damage outside every epoch (the prune record)

    @property
    def problems(self) -> list[errors.JournalDamage]:
        """Every problem found, epoch by epoch (oldest first), in LSN order within each."""
        found = list(self.unplaced)
        for epoch in self.epochs.values():
            found.extend(sorted(epoch.problems, key=lambda p: p.lsn))
        return found

    @property
    def ok(self) -> bool:
        return (not self.diverged and self.replayed == self.selected and not self.unplaced
                and all(e.ok for e in self.epochs.values()))

    @property
    def rate(self) -> float:
        return self.replayed / self.seconds if self.seconds > 0 else 0.0

    def raise_for_problems(self) -> None:
        """Raise the first problem found, if any (for callers that stop at damage)."""
        problems = self.problems
        if problems:
            raise problems[0]

    def epoch(self, epoch: str) -> integrity.EpochReport:
        found = self.epochs.get(epoch)
        if found is None:
            found = self.epochs[epoch] = integrity.EpochReport(epoch=epoch, first_lsn=0, state="not checked")
        return found

    def add(self, result: parallel.UnitResult) -> None:
        """Count in what one walk judged."""
        self.walk_cpu[result.process] = self.walk_cpu.get(result.process, 0.0) + result.cpu_seconds
        self.replayed += result.replayed
        self.identical += result.identical
        self.diverged.extend(result.diverged)
        epoch = self.epoch(result.unit.incarnation)
        epoch.cycles += result.replayed
        epoch.identical += result.identical
        epoch.diverged += len(result.diverged)
        if result.damage is not None:
            epoch.add(result.damage)
        stats, theirs = self.stats, result.stats
        stats.incarnations.extend(i for i in theirs.incarnations if i not in stats.incarnations)
        stats.records += theirs.records
        stats.checkpoints_compared += theirs.checkpoints_compared
        stats.started_from.extend(theirs.started_from)
        stats.warnings.extend(w for w in theirs.warnings if w not in stats.warnings)


def verify(journal: backends.Journal, selection: source.Selection = source.Selection(),
           progress: Progress | None = None, *, workers: int = 1, key: chain.ChainKey | None = None,
           published: Iterable[integrity.PublishedHead] = (),
           min_parallel_work: int = parallel.MIN_PARALLEL_WORK) -> VerifyReport:
    """Check every epoch's integrity, then replay every cycle `selection` names; report both, by epoch.

    Cycles named by LSN skip the integrity check of the whole journal (their walks check
    every record they read). With `workers` > 1 and enough planning to pay for starting
    processes, the walks run in a process pool (`parallel`); the report is the same as a
    serial one's. Damage stops the walk it is in only: every problem is in the report.
    """
    started = time.perf_counter()
    report = VerifyReport(selected=0)
    report.unplaced.extend(schema_damage.check(journal))
    if report.unplaced:  # a dropped table or column: nothing else can be read, and that is damage
        report.seconds = time.perf_counter() - started
        return report
    try:
        report.pruned = coverage.check(journal, key, report.unplaced)
    except errors.JournalDamage as damage:
        report.unplaced.append(damage)
    if selection.lsns is None and selection.keys is None:  # chosen cycles: their walks check what they read
        only = None if selection.incarnation is None else [selection.incarnation]
        pruned = report.pruned
        for checked in integrity.check(journal, key, published=published, only=only,
                                       starts=pruned.starts if pruned else None,
                                       removed=pruned.removed_heads if pruned else ()):
            report.epochs[checked.epoch] = checked
    cycles, gone = coverage.replayable(report.pruned, engine.select(journal, selection))
    report.skipped = len(gone)
    report.selected = len(cycles)
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
    for result in results:
        report.add(result)
        if progress is not None:
            progress(report.replayed, report.selected, len(report.diverged))
    report.diverged.sort(key=lambda r: (list(report.epochs).index(r.incarnation), r.lsn))
    for kept, result in enumerate(report.diverged):
        if kept >= KEEP_OUTCOMES:
            result.outcome = None
    report.seconds = time.perf_counter() - started
    return report
