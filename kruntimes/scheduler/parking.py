"""Parked Runs and the events that wake them (SPEC §3.1).

A Pending Run whose cycle found no feasible pod is *parked* (kube-scheduler's
unschedulable pods): instead of being retried in a loop it waits for an event that
can change its answer. Two indexes say whom an event wakes, so that no event
handler ever walks the Runs:

- the runtime index (`slots.Group.parked`, per namespace and runtime): a pod of
  the runtime that appears, is replaced, becomes ready or unavailable or changes
  capacity (`runtime_pod`), and capacity released on one (`capacity_released`),
  wake every parked Run of that runtime - but released capacity does not wake a Run
  whose request is above every pod's capacity (`Group.pods_only`, issue 27: such a
  Run was retried on every release, 46 times in 20 s, for nothing);
- the cohort index (per namespace, added with `affinity_target` on 2026-12-01):
  a parked Run that some pod rejected for unsatisfied required affinity also waits
  here with its required terms. A Run that becomes an active or assumed target on
  a pod (or moves, or changes labels) wakes the waiters it *satisfies* - matches
  all their required terms, as SPEC §3.3 counts a target - whose runtime that pod
  belongs to. No other new target can help them: a target only ever adds
  anti-affinity rejections and takes bootstrapping away.

A woken Run leaves both indexes. Each index counts its wake-ups, and a cycle reads
both counts before it plans (`Parking.seen`): a Run whose cycle overlapped a
wake-up it might have waited for is requeued instead of parked, because the event
has already passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from kruntimes.scheduler import interface
from kruntimes.scheduler.projection import RunInfo, Selector
from kruntimes.scheduler.slots import Group
from kruntimes.scheduler.targets import Target

RunKey = tuple[str, str]
#: A wake-up: the Pending Run key to enqueue and the metric source that emitted it
#: (None when a Run event enqueues that Run itself, which is not a counted wake-up).
Wakeup = tuple[RunKey, str | None]
SOURCE_RUNTIME_POD = interface.RUNTIME_POD
SOURCE_CAPACITY_RELEASED = interface.CAPACITY_RELEASED
SOURCE_AFFINITY_TARGET = interface.AFFINITY_TARGET
#: What a cycle saw of the wake-ups before it planned: opaque to the loop.
Seen = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class _Waiter:
    uid: str
    runtime: str
    selectors: tuple[Selector | None, ...]

    def satisfied_by(self, target: Target) -> bool:
        return target.uid != self.uid and bool(self.selectors) and all(
            s is not None and s.matches(target.labels) for s in self.selectors)  # type: ignore[arg-type]


class Parking:
    """Both indexes. Mutated only under the cluster cache lock; `groups` is the cache's own map."""

    def __init__(self, groups: Mapping[tuple[str, str], Group]) -> None:
        self._groups = groups
        self._cohorts: dict[str, dict[str, _Waiter]] = {}
        self._cohort_wakes: dict[str, int] = {}

    def seen(self, run: RunInfo) -> Seen:
        group = self._groups.get((run.namespace, run.runtime))
        if group is None:
            return (0, self._cohort_wakes.get(run.namespace, 0), 0)
        return (group.wakes, self._cohort_wakes.get(run.namespace, 0), group.pod_wakes)

    def move_pending(self, old: RunInfo | None, new: RunInfo | None, group_of: Callable[[str, str], Group]) -> bool:
        """Move a Run's runtime-index membership from `old` to `new`; True when it changed."""
        was = (old.namespace, old.runtime) if old is not None and old.eligible else None
        now = (new.namespace, new.runtime) if new is not None and new.eligible else None
        if was == now:
            return False
        left = self._groups.get(was) if was else None
        if left is not None and old is not None:
            left.pending.discard(old.name)
            left.parked.discard(old.name)
            left.pods_only.discard(old.name)
            self.leave_cohort(old.namespace, (old.name,))
        if now is not None and new is not None:
            group_of(*now).pending.add(new.name)
        return True

    def counts(self, assumed: Iterable[RunInfo | None]) -> dict[str, int]:
        """Pending Runs by state (SPEC §3.8's gauge): the parked ones are `unschedulable`;
        the rest are `queued` (waiting, in backoff or in a cycle), except those of `assumed`
        (the Runs of the assumptions): placed, their bind in flight, they wait for no cycle.
        `unfittable` counts the parked Runs no pod could ever fit, whom only a pod event wakes."""
        pending = sum(len(g.pending) for g in self._groups.values())
        parked = sum(len(g.parked) for g in self._groups.values())
        binding = 0
        for run in assumed:
            group = self._groups.get((run.namespace, run.runtime)) if run is not None else None
            if group is not None and run is not None and run.name in group.pending and run.name not in group.parked:
                binding += 1
        unfittable = sum(len(g.pods_only) for g in self._groups.values())
        return {"queued": pending - parked - binding, "unschedulable": parked, "unfittable": unfittable}

    def parked(self, run: RunInfo) -> bool:
        group = self._groups.get((run.namespace, run.runtime))
        return group is not None and run.name in group.parked

    def park(self, run: RunInfo, seen: Seen, waits_for_cohort: bool, waits_for_pods: bool = False) -> bool:
        """Park `run`; False when a wake-up happened since `seen` (the caller requeues it).

        With `waits_for_pods` (no pod could ever fit it) only pod events wake it, so only
        a pod event since `seen` sends it back: a release elsewhere cannot help it.
        """
        group = self._groups.get((run.namespace, run.runtime))
        if group is None or run.name not in group.pending:
            return True
        now = self.seen(run)
        if (now[2] != seen[2]) if waits_for_pods else (now != seen):
            return False
        group.parked.add(run.name)
        if waits_for_pods:
            group.pods_only.add(run.name)
        else:
            group.pods_only.discard(run.name)
        if waits_for_cohort:
            waiters = self._cohorts.setdefault(run.namespace, {})
            waiters[run.name] = _Waiter(run.uid, run.runtime, tuple(t.selector for t in run.affinity.required))
        else:
            self.leave_cohort(run.namespace, (run.name,))
        return True

    def unpark_all(self) -> None:
        """Every parked Run leaves both indexes: a new term gives each Pending Run a cycle."""
        for group in self._groups.values():
            group.parked.clear()
            group.pods_only.clear()
        self._cohorts.clear()

    def leave_cohort(self, ns: str, names: Iterable[str]) -> None:
        waiters = self._cohorts.get(ns)
        if waiters:
            for name in names:
                waiters.pop(name, None)
            if not waiters:
                del self._cohorts[ns]

    def wake_runtime(self, ns: str, runtime: str | None, source: str) -> list[Wakeup]:
        """Every parked Run of (ns, runtime), sorted; they leave both indexes."""
        group = self._groups.get((ns, runtime)) if runtime is not None else None
        if group is None:
            return []
        group.wakes += 1
        if source == SOURCE_RUNTIME_POD:
            group.pod_wakes += 1
            names = sorted(group.parked)
            group.parked.clear()
            group.pods_only.clear()
        else:  # released capacity: not for a Run above every pod's capacity
            names = sorted(group.parked - group.pods_only)
            group.parked.difference_update(names)
        self.leave_cohort(ns, names)
        return [((ns, name), source) for name in names]

    def wake_cohort(self, ns: str, target: Target, runtime: str) -> list[Wakeup]:
        """The waiters of `ns` that `target`, now on a pod of `runtime`, satisfies, sorted."""
        self._cohort_wakes[ns] = self._cohort_wakes.get(ns, 0) + 1
        waiters = self._cohorts.get(ns)
        if not waiters:
            return []
        names = sorted(name for name, w in waiters.items() if w.runtime == runtime and w.satisfied_by(target))
        self.leave_cohort(ns, names)
        group = self._groups.get((ns, runtime))
        if group is not None:
            group.parked.difference_update(names)
            group.pods_only.difference_update(names)
        return [((ns, name), SOURCE_AFFINITY_TARGET) for name in names]
