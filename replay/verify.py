"""Verify a history: replay every cycle in a range and require the same decisions.

This is how a new scheduler version is checked against production history before
it is rolled out: `kruntimes replay verify` walks the journal once per
incarnation (`engine`), reproduces every selected cycle with the planner of THIS
installation (`reproduce`) and counts identical and divergent decisions. A
damaged journal raises (`errors.JournalDamage`), it never counts as divergent.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kruntimes.journal import backends
from replay import engine, reproduce, source

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
    cycles = engine.select(journal, selection)
    report = VerifyReport(selected=len(cycles))
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
