"""DeviceAllocation: the pod must be able to give the Run the devices it claims (SPEC §7.5, §7.6).

Third Filter, after RuntimePodAvailability and RunAffinity. A Run without
`spec.devices` passes untouched: no per-cycle state, every pod feasible, so it
decides exactly as before devices existed. For a Run with a claim, PreFilter parses
it and compiles its classes' and its own selectors once; Filter then allocates on
each pod it is handed, in pod-name order, charging one step budget for the cycle
(`allocation.CycleBudget`), with a search memo kept across cycles (replay-identical,
§7.5 step 4). A pod's inventory, device holders and usage key come from
`device_state.pod_devices`, kept per pod across cycles; pods of one usage key get one
search per cycle, so after the first the Filter is a dictionary look-up per pod. The
allocation found on each feasible pod is kept for DevicePreference and for Reserve
and Bind (`Planner.device_results`).

Through a column (`device_column.DeviceColumn`) a Run without a claim costs nothing,
and a Run with one is judged on the pod table as a narrowing column: it is handed the
positions every earlier Filter accepted, so the budget is charged only for those pods,
in name order, as the SPEC counts it and as the pod-by-pod path does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from kruntimes.devices import allocation, cel_engine, claims
from kruntimes.scheduler import device_state
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.plugins import device_column
from kruntimes.scheduler.projection import Amounts, RunInfo
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.targets import NamespaceTargets
from kruntimes.scheduler.views import PodView

NAME = "DeviceAllocation"


@dataclass
class DeviceCycle:
    """One cycle's device work: the prepared claim (or the class reason every pod gets) and what was found."""

    run_uid: str
    prepared: allocation.Prepared | allocation.Rejection
    targets: NamespaceTargets  # the snapshot's: each pod's device holders
    budget: allocation.CycleBudget = field(default_factory=allocation.CycleBudget)
    found: dict[str, tuple[str, allocation.Allocation]] = field(default_factory=dict)  # pod name → (digest, allocation)
    memo_hits: int = 0  # the memo's and the engine's counts when the cycle began: its own work is the difference
    evaluations: dict[str, int] = field(default_factory=dict)
    engine: cel_engine.Engine | None = None
    kept: device_state.KeptPods = field(default_factory=device_state.KeptPods)  # kept_for(targets)
    use_kept: bool = True  # False when the Run holds devices itself (`device_state.careful`)
    prefers: bool = True  # whether a request has firstAvailable: else every DevicePreference raw is 0
    # This cycle's answer per usage id: the pod's verdict and, when allocated, its `found` entry.
    by_usage: dict[int, tuple[str | None, tuple[str, allocation.Allocation] | None]] = field(default_factory=dict)
    # Set when the column judged the pods: pod name → position, and each position's usage id (the
    # column's own lists, read right after planning like `last`); `found` then holds nothing.
    positions: dict[str, int] | None = None
    usage_ids: list[int] | None = None
    summary: tuple[int, int, int, int] | None = None  # `device_column.summarise(budget.seen)`, when the column kept it

    def begin(self, run_uid: str, targets: NamespaceTargets, memo_hits: int, evaluations: dict[str, int],
              kept: device_state.KeptPods, use_kept: bool) -> DeviceCycle:
        """Made ready for another cycle of its claim: kept per prepared claim rather than built per cycle."""
        self.run_uid, self.targets, self.memo_hits, self.evaluations = run_uid, targets, memo_hits, evaluations
        self.kept, self.use_kept = kept, use_kept
        self.budget = allocation.CycleBudget()
        self.found, self.by_usage = {}, {}
        self.positions = self.usage_ids = self.summary = None
        return self

    def searches(self) -> tuple[int, int, int, int]:
        """(steps charged, searches that allocated, that were exhausted, that hit the limit)."""
        return self.summary if self.summary is not None else device_column.summarise(self.budget.seen)

    def found_on(self, pod_name: str) -> tuple[str, allocation.Allocation] | None:
        """(inventory digest, allocation) this cycle found on a pod the Filter judged feasible."""
        entry = self.found.get(pod_name)
        if entry is None and self.positions is not None and (at := self.positions.get(pod_name)) is not None:
            known = self.by_usage.get(self.usage_ids[at])  # type: ignore[index]
            return None if known is None else known[1]
        return entry


class DeviceAllocation:
    name = NAME
    reasons = (allocation.NO_INVENTORY, allocation.INVALID_INVENTORY, allocation.CLASS_NOT_FOUND,
               allocation.CLASS_INVALID, allocation.NO_MATCHING_DEVICE, allocation.SELECTOR_ERROR,
               allocation.INSUFFICIENT, allocation.UNSATISFIABLE, allocation.SEARCH_LIMIT)

    def __init__(self) -> None:
        self.memo = allocation.SearchMemo()
        self.last: DeviceCycle | None = None  # the latest cycle's, read by the loop right after planning
        self._prepared: tuple[object, object, object, DeviceCycle] | None = None
        # Full-limit outcomes per usage id, for one (prepared claim, engine, memo, memo generation).
        self.answers: dict[int, tuple[tuple, Any, Any]] = {}  # type: ignore[type-arg]  # id → (key, outcome, said)
        self.answers_for: tuple[object, ...] = ()

    def pre_filter(self, snapshot: Snapshot, run: RunInfo) -> DeviceCycle | None:
        self.last = None
        if run.devices is None:
            return None
        claim: claims.DeviceClaim = device_state.claim_of(run.devices)
        classes = snapshot.device_classes if snapshot.device_classes is not None else device_state.NO_CLASSES
        engine = cel_engine.shared()
        # The same claim object under the same classes view (replaced on every class change) and
        # engine is prepared the same: keep the latest, as a Run retried or its twins come again.
        # Its `DeviceCycle` is kept with it and begun afresh each cycle.
        last = self._prepared
        if last is not None and last[0] is claim and last[1] is classes and last[2] is engine:
            cycle = last[3]
        else:
            prepared = allocation.prepare(claim, classes, engine)
            cycle = DeviceCycle(run.uid, prepared, snapshot.targets, engine=engine,
                                prefers=any(r.first_available for r in claim.requests))
            self._prepared = (claim, classes, engine, cycle)
        targets = snapshot.targets
        self.last = cycle.begin(run.uid, targets, self.memo.hits, dict(engine.evaluations_by_result),
                                device_state.kept_for(targets), not device_state.careful(targets, run.uid))
        return cycle

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        cycle: DeviceCycle | None = state.of(self.name)
        if cycle is None:
            return [None] * len(pods)
        if not cycle.use_kept or isinstance(cycle.prepared, allocation.Rejection):
            return [self._on_pod(cycle, view) for view in pods]
        # `_on_pod` inlined for the common pod: kept devices whose usage this cycle has already
        # answered. Two dictionary look-ups; anything else takes `_on_pod`, which fills both.
        kept, by_usage, found, on_pod = cycle.kept.by_uid.get, cycle.by_usage.get, cycle.found, self._on_pod
        verdicts: list[str | None] = []
        for view in pods:
            info = view.info
            entry = kept(info.uid)
            if entry is None or entry[2] is None or entry[1] != info.devices or entry[0] != info.name or \
                    (known := by_usage(entry[2].usage_id)) is None:
                verdicts.append(on_pod(cycle, view))
                continue
            if known[1] is not None:
                found[info.name] = known[1]
            verdicts.append(known[0])
        return verdicts

    def _on_pod(self, cycle: DeviceCycle, view: PodView) -> str | None:
        info = view.info
        if info.devices is None:
            return allocation.NO_INVENTORY
        pod = device_state.pod_devices(cycle.targets, cycle.kept, info, cycle.run_uid, cycle.use_kept)
        if pod is None:
            return allocation.INVALID_INVENTORY
        if isinstance(cycle.prepared, allocation.Rejection):
            return cycle.prepared.reason
        known = cycle.by_usage.get(pod.usage_id)
        if known is None:  # the first pod of its usage key this cycle: the search (or its memo)
            outcome = allocation.on_pod(cycle.prepared, pod.inventory, pod.holders, cycle.engine,  # type: ignore[arg-type]
                                        cycle.budget, self.memo, pod.fingerprint)
            known = cycle.by_usage[pod.usage_id] = (outcome.reason, None) if isinstance(outcome, allocation.Rejection) \
                else (None, (pod.inventory.digest, outcome))
        if known[1] is not None:
            cycle.found[info.name] = known[1]
        return known[0]

    def column(self, requests: Amounts) -> device_column.DeviceColumn:
        return device_column.DeviceColumn(self)
