"""DeviceAllocation: the pod must be able to give the Run the devices it claims (SPEC §7.5, §7.6).

Third Filter, after RuntimePodAvailability and RunAffinity. A Run without
`spec.devices` passes untouched: no per-cycle state, every pod feasible, so it
decides exactly as before devices existed. For a Run with a claim, PreFilter parses
it, compiles its classes' and its own selectors once and gathers every pod's device
holders (active and assumed results); Filter then allocates on each pod it is handed,
in pod-name order, charging one step budget for the cycle (`allocation.CycleBudget`),
with a search memo kept across cycles (replay-identical, §7.5 step 4). The allocation
found on each feasible pod is kept for DevicePreference and for Reserve and Bind
(`Planner.device_results`).

Through a column a Run without a claim costs nothing; a Run with one is planned pod
by pod (`Planner.plan`), so that the budget is charged only for the pods earlier
Filters accepted, in name order, as the SPEC counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from kruntimes.devices import allocation, cel_engine, claims, inventory, usage
from kruntimes.scheduler import device_state
from kruntimes.scheduler.columns import PodTable
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.projection import Amounts, RunInfo
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.views import PodView

NAME = "DeviceAllocation"


@dataclass
class DeviceCycle:
    """One cycle's device work: the prepared claim (or the class reason every pod gets) and what was found."""

    run_uid: str
    prepared: allocation.Prepared | allocation.Rejection
    holders: dict[str, list[usage.Holder]]
    budget: allocation.CycleBudget = field(default_factory=allocation.CycleBudget)
    found: dict[str, tuple[str, allocation.Allocation]] = field(default_factory=dict)  # pod name → (digest, allocation)
    memo_hits: int = 0  # the memo's and the engine's counts when the cycle began: its own work is the difference
    evaluations: dict[str, int] = field(default_factory=dict)


class DeviceAllocation:
    name = NAME
    reasons = (allocation.NO_INVENTORY, allocation.INVALID_INVENTORY, allocation.CLASS_NOT_FOUND,
               allocation.CLASS_INVALID, allocation.NO_MATCHING_DEVICE, allocation.SELECTOR_ERROR,
               allocation.INSUFFICIENT, allocation.UNSATISFIABLE, allocation.SEARCH_LIMIT)

    def __init__(self) -> None:
        self.memo = allocation.SearchMemo()
        self.last: DeviceCycle | None = None  # the latest cycle's, read by the loop right after planning

    def pre_filter(self, snapshot: Snapshot, run: RunInfo) -> DeviceCycle | None:
        self.last = None
        if run.devices is None:
            return None
        claim: claims.DeviceClaim = device_state.claim_of(run.devices)
        classes = snapshot.device_classes if snapshot.device_classes is not None else device_state.NO_CLASSES
        prepared = allocation.prepare(claim, classes, cel_engine.shared())
        engine = cel_engine.shared()
        self.last = DeviceCycle(run.uid, prepared, device_state.holders_by_pod(snapshot.targets, run.uid),
                                memo_hits=self.memo.hits, evaluations=dict(engine.evaluations_by_result))
        return self.last

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        cycle: DeviceCycle | None = state.of(self.name)
        if cycle is None:
            return [None] * len(pods)
        return [self._on_pod(cycle, view) for view in pods]

    def _on_pod(self, cycle: DeviceCycle, view: PodView) -> str | None:
        text = view.info.devices
        if text is None:
            return allocation.NO_INVENTORY
        inv: inventory.Inventory | None = device_state.inventory_of(text)
        if inv is None:
            return allocation.INVALID_INVENTORY
        if isinstance(cycle.prepared, allocation.Rejection):
            return cycle.prepared.reason
        outcome = allocation.on_pod(cycle.prepared, inv, cycle.holders.get(view.info.uid, []), cel_engine.shared(),
                                    cycle.budget, self.memo)
        if isinstance(outcome, allocation.Rejection):
            return outcome.reason
        cycle.found[view.info.name] = (inv.digest, outcome)
        return None

    def column(self, requests: Amounts) -> _Column:
        return _Column(self)


class _Column:
    """Runs without a claim pass on every pod; the planner plans Runs with one pod by pod."""

    def __init__(self, plugin: DeviceAllocation) -> None:
        self.plugin = plugin

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        pass

    def signature(self, state: CycleState, table: PodTable) -> object:
        cycle = state.of(NAME)
        return None if cycle is None else object()  # a claim: never reuse a stored Filter result

    def verdicts(self, state: CycleState, table: PodTable, signature: object) -> list[str | None] | None:
        if state.of(NAME) is None:
            return None
        assert table.views is not None
        return self.plugin.filter(state, table.views)
