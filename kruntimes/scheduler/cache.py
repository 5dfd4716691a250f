"""The cluster cache: pods, Runs and assumptions, with usage maintained incrementally.

Everything a cycle reads lives here, guarded by one lock: the projections the informers deliver,
the assumed cache, per-pod usage (active Runs plus assumptions, both by pod UID: `pod_usage`), the
affinity target index and the indexes that say which parked Pending Runs an event wakes
(`parking`). Usage is kept up to date on every mutation, so a cycle never walks the Run list:
per-cycle cost stays flat in the number of active Runs.

Every mutation is handed to the recorder (`recording`) under the lock, which numbers it as the
change happens: "the state a cycle saw" is "every record up to the snapshot's LSN", and replay
rebuilds it by feeding the same records through this same class.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any, Collection, Iterator

from kruntimes.scheduler import assumed as assumed_mod, device_journal, device_state, parking, renewals, wake_rules
from kruntimes.scheduler.pod_usage import PodUsage
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.interface import AFFINITY_TARGET
from kruntimes.scheduler.parking import SOURCE_CAPACITY_RELEASED, SOURCE_RUNTIME_POD, RunKey, Wakeup  # noqa: F401
from kruntimes.scheduler.projection import Assumption, PodInfo, RunInfo
from kruntimes.scheduler.recording import CountingRecorder, Recorder, settles
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.targets import NamespaceTargets, target_of
from kruntimes.scheduler.views import PodView


class ClusterCache:
    def __init__(self, config: SchedulerConfig | None = None, recorder: Recorder | None = None) -> None:
        self.config = config or SchedulerConfig()
        self.recorder: Recorder = recorder or CountingRecorder()
        self.lock = threading.RLock()
        self.lsn: int = getattr(self.recorder, "lsn", 0)  # continue a journal's numbering
        self.assumed = assumed_mod.AssumedCache()
        self._runs: dict[RunKey, RunInfo] = {}
        self._run_by_uid: dict[tuple[str, str], RunKey] = {}
        self._pods = PodUsage(self.config)
        self._targets: dict[str, NamespaceTargets] = {}
        self._parking = parking.Parking(self._pods.groups)
        self.renewals = renewals.Renewals()  # heartbeat renewals no cycle has needed yet
        self.device_classes = device_state.DeviceClasses()  # from the RuntimeDeviceClass informer (SPEC §7.2)
        self.device_journal = device_journal.DeviceJournal()  # inventory texts and classes, as recorded (§7.8)

    # -- recording ---------------------------------------------------------------
    def _record(self, kind: str, data: dict[str, Any]) -> int:
        self.lsn = self.recorder.record(kind, data)
        return self.lsn

    @settles
    def record(self, kind: str, data: dict[str, Any]) -> int:
        """Record a non-mutating event (cycle, bind result, leader change) in log order."""
        with self.lock:
            return self._record(kind, data)

    # -- reads ---------------------------------------------------------------------
    def run(self, key: RunKey) -> RunInfo | None:
        return self._runs.get(key)

    def pod(self, key: tuple[str, str]) -> PodInfo | None:
        return self._pods.pod(key)

    def runs(self) -> Iterator[RunInfo]:
        return iter([self._runs[k] for k in sorted(self._runs)])

    def pods(self) -> Iterator[PodInfo]:
        return self._pods.pods()

    def pending_counts(self) -> dict[str, int]:
        """Pending Runs by state, for the gauge (SPEC §3.8; `Parking.counts` says which)."""
        with self.lock:
            return self._parking.counts(self._runs.get((a.namespace, a.run_name)) for a in self.assumed.entries())

    def unpark_all(self) -> None:
        """A new term enqueues every Pending Run (`Scheduler.enqueue_pending`): none stays parked."""
        with self.lock:
            self._parking.unpark_all()

    def pending_keys(self) -> list[RunKey]:
        """Every eligible Pending Run, sorted: what a new leader enqueues."""
        with self.lock:
            return sorted(k for k, r in self._runs.items() if r.eligible)

    def pod_view(self, namespace: str, name: str, config: SchedulerConfig | None = None) -> PodView | None:
        return self._pods.pod_view(namespace, name, config or self.config)

    def snapshot(self, run: RunInfo, now: datetime, config: SchedulerConfig | None = None) -> Snapshot:
        """The consistent view one cycle plans on. Call and plan while holding `lock`."""
        config = config or self.config
        for held in self.renewals.due(now, config.heartbeat_staleness_seconds):
            self.upsert_pod(held)  # journaled before this snapshot's LSN, so replay sees it too
        pods, names, changes = self._pods.runtime_views(run.namespace, run.runtime, config)
        targets = self._targets.get(run.namespace) or NamespaceTargets()
        return Snapshot(run=run, pods=pods, targets=targets, now=now, lsn=self.lsn, config=config, names=names,
                        changes=changes, device_classes=self.device_classes.view())

    # -- pods ---------------------------------------------------------------------------
    @settles
    def upsert_pod(self, info: PodInfo, now: datetime | None = None, event: str = "MODIFIED") -> list[Wakeup]:
        """Apply a pod add/update; returns the Pending Runs to wake (SPEC §3.1)."""
        with self.lock:
            ns = info.namespace
            old = self._pods.pod((ns, info.name))
            if old is not None and self.renewals.hold(old, info, now, event, self.config.heartbeat_staleness_seconds):
                return []  # a renewal no cycle can tell from the applied heartbeat yet (`renewals`)
            self.renewals.discard(ns, info.name)
            old = self._pods.put(info)  # None also when the pod moved to another runtime
            self._ns_targets(ns).pod_seen(info.name, info.uid)
            if info.devices is not None and (text := self.device_journal.inventory(info.devices)) is not None:
                self._record("mutation", text)  # the text once per digest per epoch; the pod names its digest
            self._record("mutation", {"kind": "Pod", "event": event, "object": info})
            # A new UID under a known name (a DELETE was missed) is a new pod: nothing that
            # counted on the earlier one counts here, so what fits may have changed.
            if old is None or old.uid != info.uid or wake_rules.availability_changed(old, info, now, self.config):
                return self._parking.wake_runtime(ns, info.runtime, SOURCE_RUNTIME_POD)
            return []

    @settles
    def delete_pod(self, namespace: str, name: str) -> list[Wakeup]:
        with self.lock:
            info = self._pods.remove(namespace, name)
            if info is None:
                return []
            self.renewals.discard(namespace, name)
            self._ns_targets(namespace).pod_gone(name)
            self._record("mutation", {"kind": "Pod", "event": "DELETED", "object": info})
            return self._parking.wake_runtime(namespace, info.runtime, SOURCE_RUNTIME_POD)

    @settles
    def note_inventory(self, text: str) -> bool:
        """Record a `DeviceInventory` text ahead of the pod that names it: replay's way through such a record."""
        with self.lock:
            data = self.device_journal.inventory(text)
            if data is not None:
                self._record("mutation", data)
            return data is not None

    # -- device classes (SPEC §7.2, §7.8) ---------------------------------------------------
    @settles
    def upsert_device_class(self, name: str, generation: Any, spec: Any) -> bool:
        """Apply a RuntimeDeviceClass add/update; True (and journaled) when what a cycle sees changed."""
        with self.lock:
            if not self.device_classes.upsert(name, generation, spec):
                return False
            self._record("mutation", self.device_journal.class_changed(name, generation, spec))
            return True

    @settles
    def delete_device_class(self, name: str) -> bool:
        with self.lock:
            if not self.device_classes.delete(name):
                return False
            self._record("mutation", self.device_journal.class_deleted(name))
            return True

    # -- runs ---------------------------------------------------------------------------
    @settles
    def upsert_run(self, info: RunInfo, event: str = "MODIFIED") -> list[Wakeup]:
        """Apply a Run add/update: usage, targets, runtime index, assumption hand-off."""
        with self.lock:
            key = info.key
            old = self._runs.get(key)
            wakeups: list[Wakeup] = []
            if old is not None and old.uid != info.uid:
                wakeups, old = self._remove_run(old), None
            self._runs[key] = info
            self._run_by_uid[(info.namespace, info.uid)] = key
            self._record("mutation", {"kind": "Run", "event": event, "object": info})
            wakeups += self._account(old, info)
            return wakeups

    @settles
    def delete_run(self, namespace: str, name: str) -> list[Wakeup]:
        with self.lock:
            old = self._runs.get((namespace, name))
            if old is None:
                return []
            self._record("mutation", {"kind": "Run", "event": "DELETED", "object": old})
            return self._remove_run(old)

    def _remove_run(self, old: RunInfo) -> list[Wakeup]:
        del self._runs[old.key]
        self._run_by_uid.pop((old.namespace, old.uid), None)
        return self._account(old, None)

    def _account(self, old: RunInfo | None, new: RunInfo | None) -> list[Wakeup]:
        """Move usage, runtime-index membership and targets from `old` to `new`."""
        run = new or old
        assert run is not None
        ns = run.namespace
        moved = self._parking.move_pending(old, new, self._pods.group)
        wakeups: list[Wakeup] = []
        if old is not None and old.active:
            self._pods.charge(old, -1)
        if new is not None and new.active:
            self._pods.charge(new, 1)
        if old is not None and old.active and not (new is not None and new.active):
            runtime = self._pods.runtime_of(ns, self._pods.name_of(ns, old.pod_name, old.pod_uid)) or old.runtime
            wakeups = self._parking.wake_runtime(ns, runtime, SOURCE_CAPACITY_RELEASED)
        assumption = self.assumed.get((ns, run.uid))
        if assumption is not None:
            why = assumed_mod.handoff(assumption, new)
            if why is not None:
                wakeups += self._drop(assumption, why)
                if why != assumed_mod.DROP_OBSERVED:
                    # The Run ended, vanished or moved before its bind was seen: the
                    # capacity it held on the assumed pod is free now.
                    runtime = self._pods.runtime_of(ns, assumption.pod_name)
                    wakeups += [w for w in self._parking.wake_runtime(ns, runtime, SOURCE_CAPACITY_RELEASED)
                                if w[0][1] != run.name and w not in wakeups]
        wakeups += self._refresh_target(ns, run.uid)
        if new is not None and new.eligible and (moved or not wake_rules.status_only(old, new)
                                                 or not self._parking.parked(new)):
            # The Run itself: enqueued, not a counted wake-up. A parked Run whose update is only the
            # scheduler's own status write stays parked: nothing it is planned on changed. An unparked
            # one may have been skipped waiting for exactly this event (the queue coalesces duplicates).
            wakeups.append(((ns, new.name), None))
        return wakeups

    # -- parking (SPEC §3.1; the indexes live in `parking`) ----------------------------------
    def wakes(self, run: RunInfo) -> parking.Seen:
        """What the Run's runtime and namespace have seen of wake-ups; read at the start of a cycle."""
        return self._parking.seen(run)

    def park(self, run: RunInfo, wakes_seen: parking.Seen, wakes_on: Collection[str] = frozenset(),
             waits_for_pods: bool = False) -> bool:
        """Park an unschedulable Run until an event that can change its answer wakes it.

        `wakes_on` are the events beyond its Runtime's pods and released capacity that its rejecting
        plugins named (`Planner.wake_events`): with `AFFINITY_TARGET` it also waits for a target that
        satisfies its required affinity; with `waits_for_pods` (no pod could ever fit it) only pod
        events wake it. False when a wake-up happened since the cycle started: the caller requeues."""
        with self.lock:
            return self._parking.park(run, wakes_seen, AFFINITY_TARGET in wakes_on, waits_for_pods)

    def _ns_targets(self, ns: str) -> NamespaceTargets:
        targets = self._targets.get(ns)
        return targets if targets is not None else self._targets.setdefault(ns, NamespaceTargets())

    def _refresh_target(self, ns: str, uid: str) -> list[Wakeup]:
        """Re-index the Run as a target; one that lands on a pod wakes the waiters it satisfies."""
        targets = self._ns_targets(ns)
        key = self._run_by_uid.get((ns, uid))
        target = target_of(self._runs.get(key) if key else None, self.assumed.get((ns, uid)))
        if target is None:
            targets.remove(uid)
            return []
        if not targets.put(target):
            return []
        pod = self._pods.pod((ns, self._pods.name_of(ns, target.pod_name, target.pod_uid) or ""))
        assert pod is not None
        return self._parking.wake_cohort(ns, target, pod.runtime)

    # -- assumptions ----------------------------------------------------------------------
    def reserve(self, run: RunInfo, pod_name: str, pod_uid: str | None = None) -> bool:
        """Atomically re-check that `run` fits `pod_name` (still `pod_uid`, if given: SPEC §2.2), then assume it."""
        return self.reserve_waking(run, pod_name, pod_uid) is not None

    @settles
    def reserve_waking(self, run: RunInfo, pod_name: str, pod_uid: str | None = None,
                       device_results: str | None = None) -> list[Wakeup] | None:
        """`reserve`, returning None when it fails, else the Pending Runs the new target wakes (§3.1)."""
        with self.lock:
            slot = self._pods.slots.get((run.namespace, pod_name))
            current = self._runs.get(run.key)
            if (slot is None or slot.info is None or current is None or current.uid != run.uid
                    or (pod_uid is not None and slot.info.uid != pod_uid)
                    or not current.eligible or (run.namespace, run.uid) in self.assumed):
                return None
            targets = self._ns_targets(run.namespace)
            if not self._pods.fits(slot, run.requests) or not \
                    device_state.reserve_fits(slot.info, targets, run, device_results):
                return None
            a = Assumption(namespace=run.namespace, run_uid=run.uid, run_name=run.name, pod_name=pod_name,
                           pod_uid=slot.info.uid, requests=run.requests, labels=run.labels, affinity=run.affinity,
                           workspace=run.workspace, device_results=device_results)
            log_end = device_state.log_end(targets)
            wakeups = self._assume(a)
            if device_results is not None:  # the pod's kept devices follow at once (not read back next cycle)
                device_state.reserved(targets, slot.info, run.uid, log_end)
            self._record("reserve", {"assumption": a})
            return wakeups

    def _assume(self, a: Assumption) -> list[Wakeup]:
        self.assumed.add(a)
        self._pods.charge_assumed(a, 1)
        return self._refresh_target(a.namespace, a.run_uid)

    @settles
    def release(self, namespace: str, run_uid: str, why: str) -> list[Wakeup]:
        """Undo an assumption (bind failed, cycle aborted). Idempotent."""
        with self.lock:
            a = self.assumed.get((namespace, run_uid))
            if a is None:
                return []
            wakeups = self._unassume(a)
            self._record("release", {"namespace": namespace, "run_uid": run_uid, "why": why})
            return wakeups + [w for w in self._parking.wake_runtime(namespace, self._pods.runtime_of(namespace, a.pod_name),
                                          SOURCE_CAPACITY_RELEASED) if w[0][1] != a.run_name]

    def _drop(self, a: Assumption, why: str) -> list[Wakeup]:
        wakeups = self._unassume(a)
        self._record("drop", {"namespace": a.namespace, "run_uid": a.run_uid, "why": why})
        return wakeups

    def _unassume(self, a: Assumption) -> list[Wakeup]:
        self.assumed.pop(a.key)
        self._pods.charge_assumed(a, -1)
        return self._refresh_target(a.namespace, a.run_uid)

    # -- whole-state views -------------------------------------------------------------------
    def restore(self, state: dict[str, Any], lsn: int) -> None:
        """Load a checkpoint's pods, Runs and assumptions into this empty cache, recording nothing.

        Replay's starting point: the bookkeeping a live cache derived (usage, targets, runtime
        index) rebuilt from `state()`'s lists, at `lsn`. Assumptions go in as they were, without
        the hand-off rule: it ran (or will, in a later record) where the live cache applied it."""
        with self.lock:
            if self.state_size():
                raise ValueError("restore needs an empty cache")
            recorder, self.recorder = self.recorder, CountingRecorder()
            try:
                for c in state.get("classes", ()):
                    self.upsert_device_class(c["name"], c["generation"], c["spec"])
                self.device_journal.restore(state.get("inventories") or {})
                for pod in state["pods"]:
                    self.upsert_pod(pod, event="ADDED")
                for run in state["runs"]:
                    self.upsert_run(run, event="ADDED")
                for a in state["assumed"]:
                    self._assume(a)
            finally:
                self.recorder = recorder
            self.lsn = lsn

    def state_size(self) -> int:
        """About how many objects a checkpoint would hold (pod slots, Runs, assumptions), in O(1)."""
        return self._pods.size() + len(self._runs) + len(self.assumed)

    def state(self) -> dict[str, Any]:
        """Every projection and assumption, sorted: what a checkpoint records and tests compare."""
        with self.lock:
            pods = list(self.pods())
            return {"pods": pods, "runs": list(self.runs()), "assumed": list(self.assumed),
                    "inventories": self.device_journal.held(p.devices for p in pods),
                    "classes": self.device_journal.classes()}

    def checkpoint_state(self) -> dict[str, Any]:
        """`state()` unsorted, copied under the lock: its payload sorts it (~40 ms at 100,000 objects)."""
        with self.lock:
            pods = self._pods.unsorted_pods()
            return {"pods": pods, "runs": list(self._runs.values()), "assumed": self.assumed.entries(),
                    # From here on an inventory is recorded again the first time a pod names it (§7.8).
                    "inventories": self.device_journal.checkpointed(p.devices for p in pods),
                    "classes": self.device_journal.classes()}

    def usage(self, namespace: str, pod_name: str) -> dict[str, int]:
        """Effective usage of a pod (active + assumed), for tests and summaries."""
        with self.lock:
            return self._pods.usage(namespace, pod_name)
