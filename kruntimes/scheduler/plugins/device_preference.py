"""DevicePreference: favour pods where the Run gets its earlier `firstAvailable` alternatives (SPEC §7.6).

raw = −Σ of the chosen alternatives' indexes in the allocation DeviceAllocation found
on the pod; normalised `(raw−min)*100 // (max−min)`, all 0 when equal (upstream
has no such score, so a less loaded pod would win with a worse alternative). Weight 2
by default. A Run without a claim scores 0 everywhere: the totals, and so the
decision, are those of the other plugins alone.
"""

from __future__ import annotations

from typing import Sequence

from kruntimes.devices import allocation
from kruntimes.scheduler.columns import PodTable
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.plugins.device_allocation import NAME as ALLOCATION
from kruntimes.scheduler.plugins.device_allocation import DeviceCycle
from kruntimes.scheduler.projection import Amounts
from kruntimes.scheduler.views import PodView


class DevicePreference:
    name = "DevicePreference"

    def score(self, state: CycleState, pods: Sequence[PodView]) -> list[int]:
        cycle: DeviceCycle | None = state.of(ALLOCATION)
        if cycle is None or not cycle.prefers:  # without firstAvailable every raw is −0
            return [0] * len(pods)
        return [cycle.found[view.info.name][1].preference if view.info.name in cycle.found else 0 for view in pods]

    def normalize(self, state: CycleState, raws: Sequence[int]) -> list[int]:
        return allocation.preference_scores(list(raws))

    def column(self, requests: Amounts) -> _Column:
        return _Column(self)


class _Column:
    __slots__ = ("plugin", "zeros")

    def __init__(self, plugin: DevicePreference) -> None:
        self.plugin = plugin
        self.zeros: tuple[int, ...] = ()

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        pass

    def scores(self, state: CycleState, table: PodTable,
               alive: Sequence[int] | None) -> tuple[Sequence[int], Sequence[int], set[int]]:
        assert table.views is not None
        views = table.views if alive is None else [table.views[i] for i in alive]
        if state.of(ALLOCATION) is None:
            if len(self.zeros) != len(views):
                self.zeros = (0,) * len(views)
            return self.zeros, self.zeros, {0}
        raw = self.plugin.score(state, views)
        norm = self.plugin.normalize(state, raw)
        return raw, norm, set(norm)
