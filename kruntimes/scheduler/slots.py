"""Usage slots and runtime groups: the cluster cache's bookkeeping, one concept each.

A `Slot` holds what counts on one (namespace, pod name): the pod's projection,
active and assumed usage, both by pod UID, and its cached view. Usage is filed
under the UID it names, so a pod re-added under the same name with a new UID
(after a missed DELETE) is a new pod with none of the earlier pod's usage
(SPEC §2.2 "One pod identity everywhere"). A `Group`
holds the pods of one (namespace, runtime), their views patched in place between
snapshots, and the runtime index of Pending Runs. Both are mutated only under the
cluster cache lock.
"""

from __future__ import annotations

import bisect
from typing import Callable

from kruntimes.scheduler.projection import PodInfo
from kruntimes.scheduler.views import PodView


def add(into: dict[str, int], amounts: tuple[tuple[str, int], ...], sign: int) -> None:
    for r, q in amounts:
        v = into.get(r, 0) + sign * q
        if v:
            into[r] = v
        else:
            into.pop(r, None)


class Slot:
    """Usage on one (namespace, pod name); exists while a pod or usage refers to it."""

    __slots__ = ("info", "actual", "assumed", "view")

    def __init__(self) -> None:
        self.info: PodInfo | None = None
        self.actual: dict[str | None, dict[str, int]] = {}  # by assignment.podUID (None: name only)
        self.assumed: dict[str, dict[str, int]] = {}  # by the assumption's pod UID
        self.view: PodView | None = None

    def actual_for(self, uid: str) -> dict[str, int]:
        """Usage that counts on the pod with `uid`: runs assigned to that UID or by name only."""
        by_uid, by_name = self.actual.get(uid), self.actual.get(None)
        if by_name is None:
            return by_uid or {}
        merged = dict(by_uid or {})
        add(merged, tuple(by_name.items()), 1)
        return merged

    def assumed_for(self, uid: str) -> dict[str, int]:
        """Assumed usage on the pod with `uid`: assumptions made onto another UID never count."""
        return self.assumed.get(uid) or {}

    def charge_assumed(self, uid: str, amounts: tuple[tuple[str, int], ...], sign: int) -> None:
        usage = self.assumed.setdefault(uid, {})
        add(usage, amounts, sign)
        if not usage:
            del self.assumed[uid]

    def empty(self) -> bool:
        return self.info is None and not self.actual and not self.assumed


class Group:
    """The pods of one (namespace, runtime) and its Pending Runs (the runtime index).

    `parked` are the Pending Runs whose last cycle found no feasible pod: the ones a
    pod or capacity event wakes (kube-scheduler's unschedulable pods). Runs not
    parked are already queued, in backoff or in flight, so waking them would only
    churn the queue. `wakes` counts wake-ups, so that a cycle that started before a
    wake-up does not park its Run after missing it.

    `views` is kept as a list patched in place for the pods touched since the last
    snapshot, so a cycle after one assumption costs one view rebuild, not one per pod.
    """

    __slots__ = ("names", "pending", "parked", "wakes", "views", "dirty", "frozen", "frozen_names")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.pending: set[str] = set()
        self.parked: set[str] = set()
        self.wakes = 0
        self.views: list[PodView] | None = None  # None: membership changed, rebuild all
        self.dirty: set[str] = set()
        self.frozen: tuple[PodView, ...] | None = None
        self.frozen_names: tuple[str, ...] | None = None

    def invalidate(self) -> None:
        self.views, self.frozen, self.frozen_names = None, None, None

    def leave(self, name: str) -> None:
        """A pod left the runtime (deleted, or relabelled to another)."""
        if name in self.names:
            self.names.remove(name)
            self.invalidate()
        self.dirty.clear()

    def snapshot_views(self, view_of: Callable[[str], PodView]) -> tuple[PodView, ...]:
        """The pods' views in name order, rebuilding only those touched since the last call."""
        if self.frozen is not None:
            return self.frozen
        if self.views is None:
            self.views = [view_of(n) for n in self.names]
        elif self.dirty:
            index = {n: i for i, n in enumerate(self.names)} if len(self.dirty) > 8 else None
            for name in self.dirty:
                i = index[name] if index is not None else position(self.names, name)
                self.views[i] = view_of(name)
        self.dirty.clear()
        self.frozen = tuple(self.views)
        return self.frozen

    def name_tuple(self) -> tuple[str, ...]:
        if self.frozen_names is None:
            self.frozen_names = tuple(self.names)
        return self.frozen_names

    def touch(self, name: str) -> None:
        if self.views is not None:
            self.dirty.add(name)
        self.frozen = None


def position(names: list[str], name: str) -> int:
    i = bisect.bisect_left(names, name)
    assert names[i] == name
    return i
