"""runtimed's admission guard: the execution-time check against over-commit (SPEC §4.1, seed 000).

Scheduler accounting is not execution authorisation. The scheduler's assumed cache
is the first guard against over-commit, but it can be wrong in ways runtimed cannot
see: a stale informer cache, two schedulers (or an old and a new one) writing at
once, a bind the API server applied late, an assignment written by a scheduler
version that ignored some resources. This guard is the second, and the only one at
execution time: before a Scheduled Run assigned to this pod may be claimed
(`status.phase: Running`), its full request must fit the pod's capacity given the
Runs this runtimed has already admitted, and it is reserved in the same step.

Rules, in the words of SPEC §4.1:
- Check and reserve are one atomic step under a lock, so threads handling watch
  events concurrently never reserve the same capacity twice.
- The claim itself is written by the adapter, guarded by the observed
  resourceVersion. It reports back: `claimed` on success, `release` on a 409 (then
  re-reads and offers the Run again) or when an admitted Run ends.
- A Run that does not fit waits: it stays Scheduled, not Failed, assignment kept.
  Nothing here ever writes a Run, so "stays Scheduled" is simply "no claim".
- Waiting Runs are re-checked, oldest assignment first, whenever capacity is freed
  or changes. A waiting Run does not block a smaller one behind it (no head-of-line
  blocking): the scheduler normally assigns nothing that does not fit, so waiting is
  the exception and utilisation matters more than strict order.
- Capacity lowered under admitted Runs evicts nothing; usage above the new capacity
  only means nothing new that requests that resource is admitted until it fits.
- A malformed capacity (unknown capacity) admits nothing new.
- Devices (SPEC §7.7), for a Run with a device claim only, in the same locked step:
  its `status.devices` must name devices of the pod's current inventory that the
  admitted Runs leave free (`runtimed.devices`). Busy or a malformed inventory: it
  waits like a Run that does not fit; results missing or naming a device the pod
  lacks: `Refused`, and the Run ends Failed with that reason.

Pure: no Kubernetes, no I/O, no clock. Inputs are the small values below, built by
`kruntimes.runtimed.reading` from API objects with the project's own readers.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Mapping

from kruntimes.devices import admission as device_admission
from kruntimes.runtimed import devices
from kruntimes.scheduler.projection import Amounts

#: Decision outcomes. Each says what the adapter does next.
RESERVED = "Reserved"            # reserved here; write the claim now (guarded by resourceVersion)
WAITING = "Waiting"              # does not fit now; leave the Run Scheduled; re-checked on release/capacity change
ALREADY_ADMITTED = "AlreadyAdmitted"  # reserved or running here already (a late or repeated event): do nothing
NOT_THIS_POD = "NotThisPod"      # assigned to another pod (or to none): never touch it
REFUSED = "Refused"              # its devices can never be admitted here: end it Failed with `reason` (SPEC §7.7)

MALFORMED_CAPACITY = "the pod's capacity annotation is malformed; nothing new is admitted until it is fixed"


@dataclass(frozen=True, slots=True)
class AssignedRun:
    """A Run with an assignment, as runtimed observed it.

    `assigned_at` (when the scheduler assigned it; the Scheduled condition's time)
    orders waiting Runs, oldest first; Runs without one come after those with one,
    in the order they were first offered.
    """

    namespace: str
    name: str
    uid: str
    requests: Amounts
    pod_name: str | None
    pod_uid: str | None
    assigned_at: datetime | None = None
    resource_version: str = ""
    devices: devices.RunDevices | None = None  # its claim and results; None: asks for no device

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The pod's effective capacity (declared plus the default `runs`), or why it is unknown, and its devices."""

    amounts: Amounts = ()
    problem: str | None = None
    devices: devices.PodDevices = devices.PodDevices()


@dataclass(frozen=True, slots=True)
class Decision:
    """What the guard decided for one Run; `reason` says why a Run waits."""

    outcome: str
    run: AssignedRun
    reason: str = ""  # why it waits; for Refused, the Failed reason (DeviceAllocationMissing, ...)


def shortfall(requests: Amounts, capacity: Mapping[str, int], used: Mapping[str, int]) -> str | None:
    """Why `requests` does not fit `capacity` given `used`; None when it fits (SPEC §2.3).

    Every resource requested with a positive amount must be declared by the pod and
    fit: `used + request <= capacity`. Zero requests constrain nothing.
    """
    for resource, amount in sorted(requests):
        if amount <= 0:
            continue
        if resource not in capacity:
            return f"the pod does not declare {resource}"
        cap = capacity[resource]
        if amount > cap:
            return f"{resource} request {amount} exceeds the pod's capacity {cap}"
        in_use = used.get(resource, 0)
        if in_use + amount > cap:
            return f"insufficient {resource}: {max(cap - in_use, 0)} of {cap} free, {amount} requested"
    return None


@dataclass(slots=True)
class _Admitted:
    run: AssignedRun
    claimed: bool


class AdmissionGuard:
    """The Runs admitted on one Runtime Pod and those waiting for room, behind one lock."""

    def __init__(self, pod_name: str, pod_uid: str, capacity: Capacity) -> None:
        self.pod_name = pod_name
        self.pod_uid = pod_uid
        self._lock = threading.Lock()
        self._capacity = capacity
        self._admitted: dict[str, _Admitted] = {}
        self._waiting: dict[str, tuple[AssignedRun, int]] = {}  # uid -> (run, first-offered sequence)
        self._used: dict[str, int] = {}
        self._sequence = itertools.count()
        # Told the guard's reason each time a Run starts waiting, or is refused, for its devices
        # (SPEC §7.8: runtimed's device_waits_total); called under the lock, so it must only count.
        self.on_device_wait: Callable[[str], None] = _ignore

    # -- questions -------------------------------------------------------------------

    def is_mine(self, run: AssignedRun) -> bool:
        """Assigned to this pod: same podUID; an assignment without a UID names the pod (SPEC §2.2)."""
        if run.pod_uid:
            return run.pod_uid == self.pod_uid
        return run.pod_name == self.pod_name

    def holds(self, uid: str) -> bool:
        """Whether the Run is admitted here (reserved or claimed)."""
        with self._lock:
            return uid in self._admitted

    def usage(self) -> dict[str, int]:
        """What the admitted Runs (reserved or claimed) hold, per resource."""
        with self._lock:
            return {r: q for r, q in sorted(self._used.items()) if q}

    def capacity(self) -> Capacity:
        with self._lock:
            return self._capacity

    def admitted(self) -> list[AssignedRun]:
        with self._lock:
            return [a.run for _, a in sorted(self._admitted.items())]

    def uid_of(self, namespace: str, name: str) -> str | None:
        """The UID of the Run of that name admitted or waiting here, if any."""
        with self._lock:
            runs = [a.run for a in self._admitted.values()] + [run for run, _ in self._waiting.values()]
        return next((r.uid for r in runs if r.key == (namespace, name)), None)

    def waiting(self) -> list[AssignedRun]:
        """Waiting Runs in the order they are re-checked: oldest assignment first."""
        with self._lock:
            return [run for run, _ in self._waiting_in_order()]

    # -- transitions -----------------------------------------------------------------

    def offer(self, run: AssignedRun) -> Decision:
        """A Scheduled Run was observed: reserve it if it is ours and fits, else say why not."""
        with self._lock:
            if not self.is_mine(run):
                # Forget a waiting Run that moved away; an admitted one keeps counting
                # while its execution here has not ended (it is physically here).
                self._waiting.pop(run.uid, None)
                return Decision(NOT_THIS_POD, run, "assigned to another pod")
            if run.uid in self._admitted:
                return Decision(ALREADY_ADMITTED, run)
            previous = self._waiting.get(run.uid)
            sequence = previous[1] if previous else next(self._sequence)
            reason = self._why_not(run)
            if reason in devices.REFUSED_MESSAGES:
                self._waiting.pop(run.uid, None)
                self.on_device_wait(reason)
                return Decision(REFUSED, run, reason)
            if reason is not None:
                if previous is None and reason in (devices.WAIT_BUSY, devices.WAIT_MALFORMED):
                    self.on_device_wait(reason)  # once when it starts waiting, not on every event seen since
                self._waiting[run.uid] = (run, sequence)
                return Decision(WAITING, run, reason)
            self._waiting.pop(run.uid, None)
            self._reserve(run, claimed=False)
            return Decision(RESERVED, run)

    def claimed(self, uid: str) -> bool:
        """The claim (Running) was written: the reservation is now an executing Run.

        False when the reservation is gone meanwhile (the Run ended or vanished while
        its claim was in flight): then nothing may execute for it.
        """
        with self._lock:
            entry = self._admitted.get(uid)
            if entry is not None:
                entry.claimed = True
            return entry is not None

    def adopt(self, run: AssignedRun) -> None:
        """A Run already Running on this pod (found after a restart): it counts, whether or not it fits.

        It is running (or its end is about to be written); refusing to count it
        would let new Runs in on top of it.
        """
        with self._lock:
            self._waiting.pop(run.uid, None)
            if run.uid not in self._admitted:
                self._reserve(run, claimed=True)

    def release(self, uid: str) -> list[Decision]:
        """A Run leaves: it ended, its claim conflicted (409), or it is gone or no longer ours.

        Frees what it held, then re-checks the waiting Runs oldest first; returns
        those now reserved, which the adapter claims in that order. Idempotent.
        """
        with self._lock:
            self._waiting.pop(uid, None)
            entry = self._admitted.pop(uid, None)
            if entry is None:
                return []
            for resource, amount in entry.run.requests:
                self._used[resource] = self._used.get(resource, 0) - amount
            return self._recheck()

    def set_capacity(self, capacity: Capacity) -> list[Decision]:
        """The pod's capacity annotations changed: admitted Runs stay, waiting Runs are re-checked."""
        with self._lock:
            self._capacity = capacity
            return self._recheck()

    # -- under the lock --------------------------------------------------------------

    def _why_not(self, run: AssignedRun) -> str | None:
        if self._capacity.problem is not None:
            return MALFORMED_CAPACITY
        short = shortfall(run.requests, dict(self._capacity.amounts), self._used)
        if run.devices is None:
            return short
        verdict = devices.verdict(self._capacity.devices, [a.run.devices for a in self._admitted.values()
                                                            if a.run.devices is not None], run.devices)
        if verdict in devices.REFUSED_MESSAGES:
            return verdict  # refused whatever the capacity: waiting would never help
        if short is not None or verdict == device_admission.ADMIT:
            return short
        return devices.WAIT_MALFORMED if self._capacity.devices.malformed else devices.WAIT_BUSY

    def _reserve(self, run: AssignedRun, *, claimed: bool) -> None:
        self._admitted[run.uid] = _Admitted(run, claimed)
        for resource, amount in run.requests:
            self._used[resource] = self._used.get(resource, 0) + amount

    def _waiting_in_order(self) -> list[tuple[AssignedRun, int]]:
        # Timed and untimed apart, so that a None time is never compared with a datetime.
        items = self._waiting.values()
        timed = sorted((i for i in items if i[0].assigned_at is not None), key=lambda i: (i[0].assigned_at, i[1]))
        untimed = sorted((i for i in items if i[0].assigned_at is None), key=lambda i: i[1])
        return timed + untimed

    def _recheck(self) -> list[Decision]:
        reserved: list[Decision] = []
        for run, _ in self._waiting_in_order():
            reason = self._why_not(run)
            if reason is None:
                del self._waiting[run.uid]
                self._reserve(run, claimed=False)
                reserved.append(Decision(RESERVED, run))
            elif reason in devices.REFUSED_MESSAGES:  # e.g. its device left the inventory while it waited
                del self._waiting[run.uid]
                self.on_device_wait(reason)
                reserved.append(Decision(REFUSED, run, reason))
        return reserved


def _ignore(reason: str) -> None:
    pass
