"""PodView: the immutable per-pod value plugins read during a cycle.

A view joins a pod's projection with its usage (active Runs plus unconfirmed
assumptions) and the effective capacity (the declared annotations plus the
default `runs` capacity from the configuration). Views are rebuilt only when
something about that pod changes, so a cycle hands plugins ready-made values
instead of walking Runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from kruntimes.scheduler.projection import PodInfo

_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False)
class PodView:
    """One Runtime Pod as a cycle sees it. Identity-hashed: views are replaced, never edited.

    `memo` is a framework-owned cache of pure functions of this view (for example
    LeastLoaded's utilisation key for one request shape). It is never observable:
    a fresh view recomputes the same values.
    """

    info: PodInfo
    capacity: Mapping[str, int]
    used: Mapping[str, int]
    assumed: Mapping[str, int]
    free: Mapping[str, int]
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.info.name


def effective_capacity(info: PodInfo, default_runs_capacity: int) -> dict[str, int]:
    """Declared capacity plus the default `runs` capacity when the pod declares none."""
    cap = dict(info.capacity)
    cap.setdefault("runs", default_runs_capacity)
    return cap


def make_view(info: PodInfo, actual: Mapping[str, int], assumed: Mapping[str, int],
              default_runs_capacity: int) -> PodView:
    cap = effective_capacity(info, default_runs_capacity)
    used = dict(actual)
    for r, q in assumed.items():
        used[r] = used.get(r, 0) + q
    free = {r: c - used.get(r, 0) for r, c in cap.items()}
    return PodView(
        info=info,
        capacity=MappingProxyType(cap),
        used=MappingProxyType(used) if used else _EMPTY,
        assumed=MappingProxyType(dict(assumed)) if assumed else _EMPTY,
        free=MappingProxyType(free),
    )
