"""The pods the cluster cache knows, grouped by runtime, and what counts on each.

One concept apart from the rest of the cache: per-pod usage (Runs assigned by name, by pod
UID, and assumptions), the runtime groups a snapshot reads its pods from, and the views
built from both, rebuilt only for the pods touched since they were last read. The cache
(`cache.ClusterCache`) decides when usage moves and what it wakes; this says where it
lands. Mutated only under the cache's lock; the building blocks are in `slots`.
"""

from __future__ import annotations

import bisect
from typing import Iterator

from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.projection import Assumption, PodInfo, RunInfo
from kruntimes.scheduler.slots import Group, Slot, UidUsage, add
from kruntimes.scheduler.snapshot import ViewChanges
from kruntimes.scheduler.views import PodView, make_view


class PodUsage:
    """Pod slots by (namespace, name), usage by pod UID, and the runtime groups."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config  # views for its default capacity are cached; a what-if's are built, never cached
        self.slots: dict[tuple[str, str], Slot] = {}
        self.by_uid = UidUsage()
        self.groups: dict[tuple[str, str], Group] = {}

    # -- reads ---------------------------------------------------------------------------
    def pod(self, key: tuple[str, str]) -> PodInfo | None:
        return slot.info if (slot := self.slots.get(key)) else None

    def pods(self) -> Iterator[PodInfo]:
        return iter([s.info for k, s in sorted(self.slots.items()) if s.info is not None])

    def unsorted_pods(self) -> list[PodInfo]:
        return [s.info for s in self.slots.values() if s.info is not None]

    def size(self) -> int:
        return len(self.slots)

    def name_of(self, ns: str, pod_name: str | None, pod_uid: str | None) -> str | None:
        """The current pod an assignment (name, UID) is on (`UidUsage.name_of`)."""
        return self.by_uid.name_of(ns, pod_name, pod_uid)

    def runtime_of(self, ns: str, pod_name: str | None) -> str | None:
        slot = self.slots.get((ns, pod_name)) if pod_name else None
        return slot.info.runtime if slot and slot.info else None

    def pod_view(self, namespace: str, name: str, config: SchedulerConfig) -> PodView | None:
        slot = self.slots.get((namespace, name))
        return None if slot is None or slot.info is None else self.view(slot, config)

    def view(self, slot: Slot, config: SchedulerConfig) -> PodView:
        assert slot.info is not None
        cached = config.default_runs_capacity == self.config.default_runs_capacity  # a what-if's: built, never cached
        if cached and slot.view is not None:
            return slot.view
        uid = slot.info.uid
        actual = slot.actual_with(self.by_uid.of(slot.info.namespace, uid))
        view = make_view(slot.info, actual, slot.assumed_for(uid), config.default_runs_capacity)
        if cached:
            slot.view = view
        return view

    def runtime_views(self, ns: str, runtime: str, config: SchedulerConfig
                      ) -> tuple[tuple[PodView, ...], tuple[str, ...] | None, ViewChanges | None]:
        """The views of a runtime's pods for a snapshot, with their names and change log when cached."""
        group = self.groups.get((ns, runtime))
        if group is None:
            return (), None, None
        if config.default_runs_capacity != self.config.default_runs_capacity:
            return tuple(self.view(self.slots[(ns, n)], config) for n in group.names), None, None
        slots = self.slots
        pods = group.snapshot_views(lambda name: self.view(slots[(ns, name)], config))
        return pods, group.name_tuple(), group.change_log()

    def fits(self, slot: Slot, requests: tuple[tuple[str, int], ...]) -> bool:
        """Whether `requests` fit what is free on the slot's pod now."""
        free = self.view(slot, self.config).free
        return not any(free.get(r, -1) < q for r, q in requests)

    def usage(self, namespace: str, pod_name: str) -> dict[str, int]:
        slot = self.slots.get((namespace, pod_name))
        return {} if slot is None or slot.info is None else dict(self.view(slot, self.config).used)

    # -- pods ----------------------------------------------------------------------------
    def group(self, ns: str, runtime: str) -> Group:
        return self.groups.get((ns, runtime)) or self.groups.setdefault((ns, runtime), Group())

    def put(self, info: PodInfo) -> PodInfo | None:
        """File a pod add/update; the projection it replaces in its runtime group (None: it joined the group)."""
        ns = info.namespace
        slot = self._slot(ns, info.name)
        old = slot.info
        if old is not None and old.runtime != info.runtime:
            self._leave_group(ns, old)
            old = None
        if old is None:
            group = self.group(ns, info.runtime)
            bisect.insort(group.names, info.name)
            group.invalidate()
        self.by_uid.pod_seen(info, slot.info)
        slot.info = info
        self._touch(ns, slot)
        return old

    def remove(self, namespace: str, name: str) -> PodInfo | None:
        """Take a deleted pod out; the projection it had, None when none was known."""
        slot = self.slots.get((namespace, name))
        if slot is None or slot.info is None:
            return None
        info = slot.info
        self._leave_group(namespace, info)
        self.by_uid.pod_gone(info)
        slot.info = slot.view = None
        if slot.empty():
            del self.slots[(namespace, name)]
        return info

    # -- usage ---------------------------------------------------------------------------
    def charge(self, run: RunInfo, sign: int) -> None:
        """Add (`sign` 1) or take away (-1) an active Run's requests where its assignment counts."""
        assert run.pod_name is not None
        ns = run.namespace
        if run.pod_uid is not None:  # on the pod of that UID, if one is current (SPEC §2.2)
            name = self.by_uid.charge(ns, run.pod_uid, run.requests, sign)
            return self._touch(ns, self.slots[(ns, name)]) if name is not None else None
        slot = self._slot(ns, run.pod_name)
        add(slot.actual, run.requests, sign)
        self._touch(ns, slot)
        if slot.empty():
            del self.slots[(ns, run.pod_name)]

    def charge_assumed(self, a: Assumption, sign: int) -> None:
        """Add (`sign` 1) or take away (-1) an assumption's requests on the pod it assumed."""
        slot = self._slot(a.namespace, a.pod_name)
        slot.charge_assumed(a.pod_uid, a.requests, sign)
        self._touch(a.namespace, slot)
        if sign < 0 and slot.empty():
            del self.slots[(a.namespace, a.pod_name)]

    # -- slot bookkeeping ------------------------------------------------------------------
    def _slot(self, ns: str, pod_name: str) -> Slot:
        return self.slots.get((ns, pod_name)) or self.slots.setdefault((ns, pod_name), Slot())

    def _touch(self, ns: str, slot: Slot) -> None:
        slot.view = None
        if slot.info is not None and (group := self.groups.get((ns, slot.info.runtime))) is not None:
            group.touch(slot.info.name)

    def _leave_group(self, ns: str, info: PodInfo) -> None:
        if (group := self.groups.get((ns, info.runtime))) is not None:
            group.leave(info.name)
