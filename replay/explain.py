"""Explain one cycle: every pod the planner saw, its verdict and scores, the winner, and the assumed cache.

`kruntimes replay cycle` prints this; `--json` prints `Explanation.as_json()`.
The pods come from the rebuilt snapshot itself (capacity, usage, assumed usage,
free), so the table shows what the scheduler saw, not what the cluster holds now.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from kruntimes.journal.store import backends
from kruntimes.scheduler import device_outcome
from kruntimes.scheduler.outcome import CycleOutcome
from kruntimes.scheduler.projection import Assumption, RunInfo
from kruntimes.scheduler.views import PodView
from replay import compare, coverage, engine, errors, reproduce, source


@dataclass(frozen=True)
class Seen:
    """What replay captures at the cycle's snapshot, besides the outcome."""

    outcome: CycleOutcome
    run: RunInfo
    pods: tuple[PodView, ...]
    assumed: tuple[Assumption, ...]  # the assumed cache, in the Run's namespace
    assumed_elsewhere: int  # assumptions in other namespaces (not visible to this cycle)
    warnings: tuple[str, ...]


def _see(ctx: engine.Context) -> Seen:
    snapshot = ctx.snapshot()
    planner = reproduce.planner_for(ctx.incarnation.config, ctx.incarnation)
    outcome = device_outcome.attach(planner, ctx.run, planner.plan(snapshot))
    everything = list(ctx.cache.assumed)
    mine = tuple(a for a in everything if a.namespace == ctx.run.namespace)
    return Seen(outcome=outcome, run=ctx.run, pods=snapshot.pods, assumed=mine,
                assumed_elsewhere=len(everything) - len(mine), warnings=ctx.warnings)


@dataclass
class Explanation:
    result: reproduce.CycleResult
    seen: Seen
    snapshot_lsn: int
    now: str
    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def pod_rows(self) -> list[dict[str, Any]]:
        """One row per pod: the replayed verdict and scores joined with what the pod's view held."""
        outcome = compare.per_pod_outcome(self.seen.outcome)
        views = {v.info.name: v for v in self.seen.pods}
        rows = []
        for row in outcome["pods"]:
            view = views.get(row["pod"])
            if view is not None:
                row.update(uid=view.info.uid, ready=view.info.ready, terminating=view.info.terminating,
                           heartbeat=None if view.info.heartbeat is None else view.info.heartbeat.isoformat(),
                           capacity=dict(view.capacity), used=dict(view.used), assumed=dict(view.assumed),
                           free=dict(view.free))
            rows.append(row)
        return rows

    def as_json(self) -> dict[str, Any]:
        r = self.result
        run = self.seen.run
        return {
            "lsn": r.lsn, "incarnation": r.incarnation, "snapshot_lsn": self.snapshot_lsn, "now": self.now,
            "run": {"namespace": run.namespace, "name": run.name, "uid": run.uid, "runtime": run.runtime,
                    "requests": dict(run.requests), "labels": dict(run.labels)},
            "identical": r.identical, "differences": [d.as_json() for d in r.differences],
            "recorded": {k: v for k, v in r.recorded.items() if k != "outcome"},
            "replayed": {k: v for k, v in compare.per_pod_outcome(self.seen.outcome).items() if k != "pods"},
            "pods": self.pod_rows(),
            "assumed": [{"run": a.run_name, "run_uid": a.run_uid, "pod": a.pod_name, "pod_uid": a.pod_uid,
                         "requests": dict(a.requests)} for a in self.seen.assumed],
            "assumed_in_other_namespaces": self.seen.assumed_elsewhere,
            "config": self.config, "warnings": self.warnings,
        }


def explain(journal: backends.Journal, selection: source.Selection) -> list[Explanation]:
    """Replay and explain the selected cycles (one LSN, or a Run's cycles), in LSN order."""
    pruned = coverage.check(journal)
    cycles, gone = coverage.replayable(pruned, engine.select(journal, selection))
    if not cycles and gone:
        assert pruned is not None
        raise errors.CycleNotFound(
            f"cycle LSN {gone[-1].lsn} read the state at LSN {gone[-1].snapshot_lsn}, before the checkpoint at LSN "
            f"{pruned.starts[gone[-1].incarnation].checkpoint_lsn} where a prune cut epoch {gone[-1].incarnation}: "
            "that state is gone, the cycle cannot be replayed")
    if not cycles:
        raise errors.CycleNotFound(_nothing(journal, selection))
    found = []
    walk = engine.replay(journal, cycles, _see)
    with contextlib.closing(walk):
        for replayed in walk:
            seen = replayed.value
            result = reproduce.judge(engine.Replayed(record=replayed.record, cycle=replayed.cycle,
                                                     incarnation=replayed.incarnation, value=seen.outcome))
            found.append(Explanation(result=result, seen=seen, snapshot_lsn=replayed.cycle.snapshot_lsn,
                                     now=replayed.cycle.now.isoformat(), config=replayed.incarnation.config.to_dict(),
                                     warnings=list(seen.warnings)))
    return found


def _nothing(journal: backends.Journal, selection: source.Selection) -> str:
    if selection.lsns:
        lsn = selection.lsns[0]
        record = source.record_at(journal, lsn, selection.incarnation)
        if record is None:
            return f"no record with LSN {lsn} in the journal"
        return f"LSN {lsn} is a {record.kind} record, not a cycle (`kruntimes history cycles` lists cycles)"
    if selection.run:
        return f"no cycle of Run {'/'.join(selection.run)} in the journal"
    return "no cycle in the journal matches"
