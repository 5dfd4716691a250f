"""PreferredRunAffinity: favour pods that hold preferred targets (SPEC §3.4.1).

raw = sum of the weights of preferred affinity terms with at least one matching
target on the pod, minus those of preferred anti-affinity terms; each term counts
once per pod however many targets match, and only the Run's own preferences
count. Normalised with integers: (raw - min) * 100 // (max - min), all 0 when
every pod scores the same. Preferences never make a pod infeasible.

Through a column (`columns`) the raws are written from the cycle's map by position:
nothing per pod is kept, and a Run without preferred terms costs two lists of zeros.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from kruntimes.scheduler.columns import PodTable
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.projection import Amounts, RunInfo
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.views import PodView


class PreferredRunAffinity:
    name = "PreferredRunAffinity"

    def pre_filter(self, snapshot: Snapshot, run: RunInfo) -> Mapping[str, int]:
        raw: dict[str, int] = {}  # by pod UID
        aff = run.affinity
        for sign, weighted in ((1, aff.preferred), (-1, aff.preferred_anti)):
            for wt in weighted:
                for pod in snapshot.targets.pods_matching(wt.term.selector, run.uid):
                    raw[pod] = raw.get(pod, 0) + sign * wt.weight
        return raw

    def score(self, state: CycleState, pods: Sequence[PodView]) -> list[int]:
        raw: Mapping[str, int] = state.of(self.name)
        if not raw:
            return [0] * len(pods)
        return [raw.get(view.info.uid, 0) for view in pods]

    def normalize(self, state: CycleState, raws: Sequence[int]) -> list[int]:  # type: ignore[override]
        if not state.of(self.name):
            return [0] * len(raws)  # no preferred terms matched anywhere: every raw is 0
        low, high = min(raws), max(raws)
        if low == high:
            return [0] * len(raws)
        span = high - low
        return [(r - low) * 100 // span for r in raws]

    def column(self, requests: Amounts) -> _Column:
        return _Column(self)


class _Column:
    __slots__ = ("plugin", "zeros")

    def __init__(self, plugin: PreferredRunAffinity) -> None:
        self.plugin = plugin
        self.zeros: tuple[int, ...] = ()  # kept: most Runs have no preferences, and it is the same every cycle

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        pass

    def scores(self, state: CycleState, table: PodTable,
               alive: Sequence[int] | None) -> tuple[Sequence[int], Sequence[int], set[int]]:
        assert table.views is not None
        raw: Mapping[str, int] = state.of(PreferredRunAffinity.name)
        if not raw:
            m = len(table.views) if alive is None else len(alive)
            if len(self.zeros) != m:
                self.zeros = (0,) * m
            return self.zeros, self.zeros, {0}
        every = [0] * len(table.views)
        get = table.position.get
        for uid, value in raw.items():
            if (i := get(uid)) is not None:
                every[i] = value
        raws = every if alive is None else list(map(every.__getitem__, alive))
        norm = self.plugin.normalize(state, raws)
        return raws, norm, set(norm)
