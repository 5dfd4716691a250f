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

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kruntimes.journal import backends
from replay import coverage, engine, reproduce, source

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

    @property
    def ok(self) -> bool:
        return not self.diverged and self.replayed == self.selected

    @property
    def rate(self) -> float:
        return self.replayed / self.seconds if self.seconds > 0 else 0.0


def verify(journal: backends.Journal, selection: source.Selection = source.Selection(),
           progress: Progress | None = None) -> VerifyReport:
    """Replay every cycle `selection` names; report identical and divergent decisions."""
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
    walk = engine.replay(journal, cycles, reproduce.plan, report.stats)
    with contextlib.closing(walk):
        for replayed in walk:
            result = reproduce.judge(replayed)
            report.replayed += 1
            if result.identical:
                report.identical += 1
            else:
                if len(report.diverged) >= KEEP_OUTCOMES:
                    result.outcome = None  # keep the differences, not a thousand-pod outcome each
                report.diverged.append(result)
            if progress is not None:
                progress(report.replayed, report.selected, len(report.diverged))
    report.seconds = time.perf_counter() - started
    return report
