"""What if: replay recorded cycles with other weights, plugins or default capacity.

Each selected cycle is planned twice on its rebuilt snapshot: with the recorded
configuration (which must reproduce the recorded decision, else the comparison
would blame the alternative for a divergence it did not cause) and with the
alternative. The report lists the decisions that change and how placement would
shift, as counts per pod before and after.

Read a range's answer for what it is: every cycle is replayed against the
RECORDED history - the capacity, assumptions and affinity targets that the
recorded decisions produced - not against the state the alternative's own
earlier decisions would have produced. A changed decision early in a range does
not move the Runs it would have displaced later. It answers "would each decision
have differed", not "where would everything be now".
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kruntimes.journal.store import backends
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.outcome import SCHEDULED, CycleOutcome
from replay import compare, coverage, engine, reproduce, source

PENDING = "(no pod)"


@dataclass(frozen=True)
class Alternative:
    """The change to try, applied to each incarnation's recorded configuration."""

    weights: tuple[tuple[str, int], ...] = ()
    disabled: frozenset[str] = frozenset()
    default_runs_capacity: int | None = None

    def apply(self, config: SchedulerConfig) -> SchedulerConfig:
        """Raises `ConfigError` naming an unknown plugin or a bad weight."""
        changed = config.with_weights(dict(self.weights)) if self.weights else config
        if self.disabled:
            changed = changed.without_plugins(set(self.disabled))
        if self.default_runs_capacity is not None:
            changed = SchedulerConfig.from_dict({**changed.to_dict(),
                                                 "default_runs_capacity": self.default_runs_capacity})
        return changed

    def describe(self) -> str:
        parts = [f"{n}={w}" for n, w in self.weights]
        parts += [f"without {n}" for n in sorted(self.disabled)]
        if self.default_runs_capacity is not None:
            parts.append(f"default runs capacity {self.default_runs_capacity}")
        return ", ".join(parts) or "no change"


@dataclass(frozen=True)
class Decision:
    status: str
    pod: str | None
    message: str | None

    @classmethod
    def of(cls, outcome: CycleOutcome) -> Decision:
        return cls(outcome.status, outcome.chosen, outcome.message)

    @classmethod
    def recorded(cls, payload: dict[str, Any]) -> Decision:
        return cls(payload["status"], payload.get("chosen"), payload.get("message"))

    def __str__(self) -> str:
        return self.pod if self.status == SCHEDULED and self.pod else f"{self.status}: {self.message or '-'}"


@dataclass(frozen=True)
class Change:
    lsn: int
    namespace: str
    run: str
    before: Decision
    after: Decision

    def as_json(self) -> dict[str, Any]:
        return {"lsn": self.lsn, "namespace": self.namespace, "run": self.run,
                "before": self.before.__dict__, "after": self.after.__dict__}


@dataclass
class WhatIfReport:
    alternative: Alternative
    cycles: int = 0
    changed: list[Change] = field(default_factory=list)
    before: Counter[str] = field(default_factory=Counter)  # "ns/pod" (or PENDING) -> decisions
    after: Counter[str] = field(default_factory=Counter)
    not_reproduced: list[int] = field(default_factory=list)  # cycles the recorded configuration does not reproduce
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # incarnation -> the alternative configuration
    skipped: int = 0  # cycles in range whose snapshot a prune removed
    stats: engine.Stats = field(default_factory=engine.Stats)

    def shift(self) -> list[tuple[str, int, int]]:
        """(pod, decisions before, decisions after) for every pod whose count changes."""
        pods = sorted(set(self.before) | set(self.after))
        return [(p, self.before[p], self.after[p]) for p in pods if self.before[p] != self.after[p]]

    def as_json(self) -> dict[str, Any]:
        return {"alternative": self.alternative.describe(), "cycles": self.cycles,
                "changed": [c.as_json() for c in self.changed],
                "shift": [{"pod": p, "before": b, "after": a} for p, b, a in self.shift()],
                "not_reproduced": self.not_reproduced, "configs": self.configs, "skipped_pruned": self.skipped,
                "note": "each cycle is replayed against the recorded history, not the consequences of earlier "
                        "changed decisions"}


def what_if(journal: backends.Journal, selection: source.Selection, alternative: Alternative) -> WhatIfReport:
    report = WhatIfReport(alternative=alternative)
    alternatives: dict[str, SchedulerConfig] = {}

    def both(ctx: engine.Context) -> tuple[CycleOutcome, CycleOutcome]:
        recorded_config = ctx.incarnation.config
        config = alternatives.get(ctx.incarnation.id)
        if config is None:
            config = alternatives[ctx.incarnation.id] = alternative.apply(recorded_config)
            report.configs[ctx.incarnation.id] = config.to_dict()
        baseline = reproduce.plan(ctx)
        changed = reproduce.plan(ctx, config)
        return baseline, changed

    cycles, gone = coverage.replayable(coverage.check(journal), engine.select(journal, selection))
    report.skipped = len(gone)
    walk = engine.replay(journal, cycles, both, report.stats)
    with contextlib.closing(walk):
        for replayed in walk:
            baseline, changed = replayed.value
            recorded = replayed.record.payload
            report.cycles += 1
            mine = compare.replayed_payload(baseline, recorded, replayed.incarnation.top_candidates)
            if compare.differences(recorded, mine):
                report.not_reproduced.append(replayed.cycle.lsn)
                continue
            before, after = Decision.recorded(recorded), Decision.of(changed)
            ns = replayed.cycle.namespace
            report.before[f"{ns}/{before.pod}" if before.status == SCHEDULED else PENDING] += 1
            report.after[f"{ns}/{after.pod}" if after.status == SCHEDULED else PENDING] += 1
            if before != after:
                report.changed.append(Change(replayed.cycle.lsn, ns, replayed.cycle.run, before, after))
    return report
