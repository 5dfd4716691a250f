"""Reproduce one cycle: the same planner on the rebuilt snapshot, judged against the record.

`plan` is the `evaluate` step verify hands the engine; `judge` turns the held
outcome and the cycle's record into a `CycleResult` once the walk reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kruntimes.scheduler import device_outcome
from kruntimes.scheduler.config import ConfigError, SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.outcome import CycleOutcome
from replay import compare, errors
from replay.engine import Context, Replayed
from replay.rebuild import Incarnation

def planner_for(config: SchedulerConfig, incarnation: Incarnation) -> Planner:
    """The planner for `config`, built once per walk of `incarnation` (plugins are built from the registry
    as it is now: that is the code being checked)."""
    key = config.digest()
    found = incarnation.planners.get(key)
    if found is None:
        try:
            found = incarnation.planners[key] = Planner(config)
        except ConfigError as exc:
            raise errors.ReplayError(f"incarnation {incarnation.id} ran a configuration this planner cannot build: "
                                     f"{exc}") from exc
    return found


def plan(ctx: Context, config: SchedulerConfig | None = None) -> CycleOutcome:
    """The cycle again: the incarnation's configuration (or `config`), the rebuilt snapshot, the same planner
    code, with the device work the live loop attaches (SPEC §7.8)."""
    planner = planner_for(config or ctx.incarnation.config, ctx.incarnation)
    return device_outcome.attach(planner, ctx.run, planner.plan(ctx.snapshot(config)))


@dataclass
class CycleResult:
    """One replayed cycle: the record, the replayed outcome and every difference between them."""

    lsn: int
    incarnation: str
    namespace: str
    run: str
    recorded: dict[str, Any]
    outcome: CycleOutcome | None  # None when a long report dropped it to save memory
    differences: list[compare.Difference] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.run}"

    def as_json(self, *, with_outcome: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "lsn": self.lsn, "incarnation": self.incarnation, "namespace": self.namespace, "run": self.run,
            "identical": self.identical, "differences": [d.as_json() for d in self.differences],
            "recorded": {k: v for k, v in self.recorded.items() if k != "outcome"},
        }
        if with_outcome and self.outcome is not None:
            out["replayed_outcome"] = compare.per_pod_outcome(self.outcome)
        return out


def judge(replayed: Replayed[CycleOutcome]) -> CycleResult:
    recorded = replayed.record.payload
    mine = compare.replayed_payload(replayed.value, recorded, replayed.incarnation.top_candidates)
    found = compare.differences(recorded, mine)
    if "devices" in recorded or "devices" in mine:
        # Another CEL engine (or budget) may judge devices otherwise: said even when this cycle agrees (§7.8).
        found[:0] = [compare.Difference(f"devices.{name}", was, now) for name, was, now in
                     device_outcome.configuration_differences(replayed.incarnation.device_config)]
    return CycleResult(lsn=replayed.cycle.lsn, incarnation=replayed.cycle.incarnation,
                       namespace=replayed.cycle.namespace, run=replayed.cycle.run, recorded=recorded,
                       outcome=replayed.value, differences=found)
