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
        found = cycle.found_on
        return [0 if (entry := found(view.info.name)) is None else entry[1].preference for view in pods]

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
        cycle: DeviceCycle | None = state.of(ALLOCATION)
        if cycle is None or not cycle.prefers:  # every raw 0, as `score` gives
            m = len(table.views) if alive is None else len(alive)
            if len(self.zeros) != m:
                self.zeros = (0,) * m
            return self.zeros, self.zeros, {0}
        views = table.views if alive is None else [table.views[i] for i in alive]
        raw = self.plugin.score(state, views)
        norm = self.plugin.normalize(state, raw)
        return raw, norm, set(norm)
