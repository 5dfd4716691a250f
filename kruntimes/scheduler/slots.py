"""Usage slots and runtime groups: the cluster cache's bookkeeping, one concept each.

A `Slot` holds what counts on one (namespace, pod name): the pod's projection,
the usage of Runs assigned by name only, assumed usage by pod UID, and its cached
view. Active usage of Runs whose assignment names a UID lives in `UidUsage`, filed
under that UID whatever pod name the assignment also carries, so a pod re-added
under the same name with a new UID (after a missed DELETE) is a new pod with none
of the earlier pod's usage, and an assignment whose name and UID disagree counts on
the pod of the UID (SPEC §2.2 "One pod identity everywhere"). A `Group`
holds the pods of one (namespace, runtime), their views patched in place between
snapshots, and the runtime index of Pending Runs. Both are mutated only under the
cluster cache lock.
"""

from __future__ import annotations

import bisect
from typing import Callable

from kruntimes.scheduler.projection import PodInfo
from kruntimes.scheduler.snapshot import ViewChanges
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
        self.actual: dict[str, int] = {}  # Runs assigned to this name without a UID
        self.assumed: dict[str, dict[str, int]] = {}  # by the assumption's pod UID
        self.view: PodView | None = None

    def actual_with(self, by_uid: dict[str, int] | None) -> dict[str, int]:
        """Usage that counts on this slot's pod: `by_uid` (Runs assigned to its UID) plus those by name only."""
        if not self.actual:
            return by_uid or {}
        merged = dict(by_uid or {})
        add(merged, tuple(self.actual.items()), 1)
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


class UidUsage:
    """Active usage by (namespace, pod UID), and the current pod name of every UID.

    Filed by UID rather than under a pod name, because the UID alone says which pod
    an assignment is on; a UID no current pod has counts nowhere until (if ever) that
    pod is observed.
    """

    __slots__ = ("usage", "names")

    def __init__(self) -> None:
        self.usage: dict[tuple[str, str], dict[str, int]] = {}
        self.names: dict[tuple[str, str], str] = {}

    def charge(self, ns: str, uid: str, amounts: tuple[tuple[str, int], ...], sign: int) -> str | None:
        """Add `sign` × `amounts` to the UID's usage; the name of the pod it counts on, if any."""
        usage = self.usage.setdefault((ns, uid), {})
        add(usage, amounts, sign)
        if not usage:
            del self.usage[(ns, uid)]
        return self.names.get((ns, uid))

    def of(self, ns: str, uid: str) -> dict[str, int] | None:
        return self.usage.get((ns, uid))

    def pod_seen(self, info: PodInfo, old: PodInfo | None) -> None:
        if old is not None and old.uid != info.uid:
            self.names.pop((old.namespace, old.uid), None)
        self.names[(info.namespace, info.uid)] = info.name

    def pod_gone(self, info: PodInfo) -> None:
        self.names.pop((info.namespace, info.uid), None)

    def name_of(self, ns: str, pod_name: str | None, pod_uid: str | None) -> str | None:
        """The current pod an assignment (name, UID) is on: the UID's pod, else (no UID) the name."""
        return pod_name if pod_uid is None else self.names.get((ns, pod_uid))


class Group:
    """The pods of one (namespace, runtime) and its Pending Runs (the runtime index).

    `parked` are the Pending Runs whose last cycle found no feasible pod: the ones a
    pod or capacity event wakes (kube-scheduler's unschedulable pods); those of them in
    `pods_only` asked more than any pod has, so released capacity cannot help them and
    only a pod event wakes them. Runs not
    parked are already queued, in backoff or in flight, so waking them would only
    churn the queue. `wakes` counts wake-ups, so that a cycle that started before a
    wake-up does not park its Run after missing it.

    `views` is kept as a list patched in place for the pods touched since the last
    snapshot, so a cycle after one assumption costs one view rebuild, not one per pod.
    `changes` logs the position of every view replaced in place, so the planner's pod
    tables (`columns`) learn what changed without comparing every view; a new `era`
    (a fresh token, the log emptied) starts whenever all views are rebuilt or the log
    grows long.
    """

    __slots__ = ("names", "pending", "parked", "pods_only", "wakes", "pod_wakes", "views", "dirty", "frozen",
                 "frozen_names", "era", "changes")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.pending: set[str] = set()
        self.parked: set[str] = set()
        self.pods_only: set[str] = set()  # parked Runs no pod could ever fit: only pod events wake them
        self.wakes = 0
        self.pod_wakes = 0  # the wake-ups of pod events (`runtime_pod`), which `pods_only` waits for
        self.views: list[PodView] | None = None  # None: membership changed, rebuild all
        self.dirty: set[str] = set()
        self.frozen: tuple[PodView, ...] | None = None
        self.frozen_names: tuple[str, ...] | None = None
        self.era = object()
        self.changes: list[int] = []

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
            self._new_era()
        elif self.dirty:
            index = {n: i for i, n in enumerate(self.names)} if len(self.dirty) > 8 else None
            for name in self.dirty:
                i = index[name] if index is not None else position(self.names, name)
                self.views[i] = view_of(name)
                self.changes.append(i)
            if len(self.changes) > 2 * len(self.names) + 256:
                self._new_era()
        self.dirty.clear()
        self.frozen = tuple(self.views)
        return self.frozen

    def _new_era(self) -> None:
        self.era, self.changes = object(), []

    def change_log(self) -> ViewChanges:
        """Where to read, in the next snapshot, which views were replaced since an earlier one."""
        return ViewChanges(self.era, self.changes, len(self.changes))

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
