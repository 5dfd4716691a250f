"""Heartbeat renewals applied (and so journaled) only when a cycle's verdict could depend on them.

Every runtimed renews its pod's heartbeat every 10 s; applied one by one, each is a
journal record (~530 bytes): at 1,000 pods, 100 records/s and 4.6 GB a day, most
of a quiet cluster's journal (bench/heartbeat_journal.py). Yet the planner reads a
heartbeat through one comparison only (`RuntimePodAvailability`, SPEC §2.3): fresh
iff `heartbeat >= now - staleness`, for the cycle's `now`.

So a renewal that changes nothing but the heartbeat (and the resourceVersion) of a
pod whose applied heartbeat is still fresh is held here instead of applied. Before
every snapshot, the cache applies the held renewal of each pod whose applied
heartbeat would be stale at that cycle's `now` (`due`). Heartbeats only grow, so:
- applied fresh at `now` ⇒ the held (newer) one is fresh too: same verdict;
- applied stale at `now` ⇒ the held one is applied, through the ordinary path
  (a journal record with an LSN before the snapshot's), before the cycle reads it.
Every cycle therefore sees exactly the verdict it would have seen with every
renewal applied, and replay, which applies the journal's records through this same
cache (never holding anything: it passes no `now`), rebuilds that same snapshot.
Checkpoints carry the applied heartbeats, consistent with the records before them.

What changes: the journal and `pod_observations` show a pod's heartbeat as of the
last renewal a cycle needed (at most one record per pod per staleness window while
it is fresh), and renewals cost no view rebuild. Anything else in a pod update
(Ready, capacity, deletion, a new UID) is applied at once, with the newest heartbeat.
"""

from __future__ import annotations

import dataclasses
import heapq
from datetime import datetime, timedelta

from kruntimes.scheduler.projection import PodInfo

PodKey = tuple[str, str]


def renewal_only(old: PodInfo, new: PodInfo) -> bool:
    """`new` differs from `old` only by a later heartbeat (and its resourceVersion)."""
    if old.heartbeat is None or new.heartbeat is None or new.heartbeat < old.heartbeat:
        return False
    return dataclasses.replace(new, heartbeat=old.heartbeat, resource_version=old.resource_version) == old


class Renewals:
    """The held renewals: the newest per pod, and a heap of the applied heartbeats they wait on."""

    def __init__(self) -> None:
        self._held: dict[PodKey, PodInfo] = {}
        self._heap: list[tuple[datetime, PodKey]] = []

    def hold(self, old: PodInfo, new: PodInfo, now: datetime | None, event: str, staleness_seconds: int) -> bool:
        """Hold `new` (an update of `old`) instead of applying it, when that cannot change a verdict.

        Only live updates are held (`now` given, event MODIFIED); replay passes no `now`."""
        if now is None or event != "MODIFIED" or not renewal_only(old, new):
            return False
        assert old.heartbeat is not None
        if old.heartbeat < now - timedelta(seconds=staleness_seconds):
            return False  # applied heartbeat already stale: this renewal changes availability now
        key = (new.namespace, new.name)
        if key not in self._held:
            heapq.heappush(self._heap, (old.heartbeat, key))
        self._held[key] = new
        return True

    def discard(self, namespace: str, name: str) -> None:
        """The pod was updated or deleted through the ordinary path: its held renewal is stale news."""
        self._held.pop((namespace, name), None)

    def due(self, now: datetime, staleness_seconds: int) -> list[PodInfo]:
        """The held renewals of pods whose applied heartbeat is stale at `now`; they are forgotten here."""
        since = now - timedelta(seconds=staleness_seconds)
        due: list[PodInfo] = []
        while self._heap and self._heap[0][0] < since:
            _, key = heapq.heappop(self._heap)
            held = self._held.pop(key, None)
            if held is not None:
                due.append(held)
        return due

    def __len__(self) -> int:
        return len(self._held)
