"""The assumed cache: placements reserved in memory, not yet observed on the Run.

Like kube-scheduler's assumed pods, an assumption makes a chosen placement count
(capacity and affinity target) for every later cycle between Reserve and the
moment the informer shows the bound Run. It is deliberately kept in memory only:
never in annotations, counters, status, or read back from the journal. After a
restart or a leader failover the cache starts empty and capacity is rebuilt from
persisted active assignments alone; an unbound assumption simply disappears.

This module holds the entries and the hand-off rule. The cluster cache owns the
lock that guards them together with the usage they add to pods, so reserve,
release and snapshot accounting are one atomic step (SPEC §3.5).
"""

from __future__ import annotations

from typing import Iterator

from kruntimes.scheduler.projection import Assumption, RunInfo

#: Why an assumption left the cache; bounded, recorded in the journal.
DROP_OBSERVED = "observed"        # the Run is seen active on the same pod: actual usage takes over
DROP_ELSEWHERE = "elsewhere"      # the Run is seen active on another pod
DROP_TERMINAL = "terminal"        # the Run finished or was released
DROP_GONE = "gone"                # the Run was deleted (or recreated under a new UID)
RELEASE_BIND_CONFLICT = "bind_conflict"
RELEASE_BIND_ERROR = "bind_error"
RELEASE_STALE_POD = "stale_pod"            # the chosen pod was deleted or replaced before the bind
RELEASE_BIND_UNSETTLED = "bind_not_landed"  # an ambiguous bind was settled: it did not land, and cannot
RELEASE_ABORTED = "aborted"


def handoff(assumption: Assumption, observed: RunInfo | None) -> str | None:
    """Whether to drop `assumption` given the Run as now observed; None keeps it.

    Keeping it while the Run is observed Pending is the point: the informer may not
    have delivered the successful bind yet, and dropping then would let the next
    cycle overcommit the pod.
    """
    if observed is None or observed.uid != assumption.run_uid:
        return DROP_GONE
    if observed.terminal:
        return DROP_TERMINAL
    if observed.active:
        same_pod = observed.pod_name == assumption.pod_name and (
            observed.pod_uid is None or observed.pod_uid == assumption.pod_uid)
        return DROP_OBSERVED if same_pod else DROP_ELSEWHERE
    return None


class AssumedCache:
    """Assumptions keyed by immutable (namespace, run UID). Guarded by the cluster cache lock."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Assumption] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._entries

    def get(self, key: tuple[str, str]) -> Assumption | None:
        return self._entries.get(key)

    def add(self, assumption: Assumption) -> None:
        if assumption.key in self._entries:
            raise ValueError(f"run {assumption.namespace}/{assumption.run_name} is already assumed")
        self._entries[assumption.key] = assumption

    def pop(self, key: tuple[str, str]) -> Assumption | None:
        """Idempotent: popping an absent key returns None."""
        return self._entries.pop(key, None)

    def entries(self) -> list[Assumption]:
        """Every entry, in no particular order."""
        return list(self._entries.values())

    def __iter__(self) -> Iterator[Assumption]:
        """Entries in key order, so anything derived from them is deterministic."""
        return iter([self._entries[k] for k in sorted(self._entries)])
