"""A cycle's bind: handed to the sender, and what its answer means (SPEC §3.2 step 6).

The loop (`loop.Scheduler`) plans and reserves, and hands the bind over to its
`BindSettlement`; this sends it and settles it, on whichever thread the answer comes
back (in the cluster, from the binder processes). It is built with what it needs:
the cluster cache (releases and journal records), the metrics, the sender and the
write deadline, and `CycleEnds`, the loop's side of ending a cycle (requeue, back
off, a landed write). It keeps the binds whose outcome is unknown. The loop's steps
5 and 6:

5. bind through the sender (SPEC §3.2 step 6, amended 2026-12-01): first check
   that the chosen pod is still that UID in the cache (deleted or replaced since the
   snapshot: a bind-stage conflict, release + requeue); conflict -> release +
   requeue; other error -> release + backoff; success -> KEEP the assumption until
   the informer shows the Run bound (the cache drops it then);
6. an ambiguous outcome (sent, no answer: it may have landed, or may still land)
   KEEPS the assumption, and the key comes back with backoff to settle it:
   - the informer showed the Run since: the hand-off rule already settled an active,
     terminal or vanished Run; a Run still Pending at a NEWER version can no longer
     take the write, which was guarded by the older one: release, plan again;
   - otherwise a read (a GET, through the sender too) settles it: landed on our pod -> as a
     success; moved on without it -> release; still at the version the write was
     guarded by -> the write has not landed but may yet, so releasing now could
     hand its capacity to another Run just before it lands. The same bind (same pod,
     same guarding version) is sent again instead: at most one of the two can apply,
     both name the pod the assumption holds. This is the only write ever sent twice,
     and only after a read showed the first had not landed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from kruntimes.scheduler import assumed as assumed_mod
from kruntimes.scheduler import status as st
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.cycle import Cycle
from kruntimes.scheduler.metrics import SchedulerMetrics
from kruntimes.scheduler.parking import RunKey, Wakeup
from kruntimes.scheduler.projection import RunInfo
from kruntimes.wire import ACTIVE_PHASES
from kruntimes.scheduler.writes import Sender

# The loop's logger: these lines were always the loop's, and are still read as such.
log = logging.getLogger("kruntimes.scheduler.loop")


@dataclass(frozen=True)
class Bind:
    """One bind: what is written, guarded by which version, naming which pod."""

    resource_version: str
    run_uid: str
    pod_name: str
    pod_uid: str
    body: dict[str, Any]


class CycleEnds(Protocol):
    """How a cycle whose write was answered ends: the loop's side (`loop.Scheduler`), which
    owns the work queue and what its own writes left unobserved."""

    def stale(self, cycle: Cycle) -> bool:
        """True (and the cycle ended as aborted) when the answer is for a term that is over."""

    def requeue(self, cycle: Cycle, result: str) -> None:
        """End with `result`; the key is planned again after its backoff."""

    def retry_later(self, cycle: Cycle, exc: BaseException) -> None:
        """End as an error; the key comes back after its backoff, or the server's Retry-After."""

    def wrote(self, cycle: Cycle, run: RunInfo, body: dict[str, Any], result: str) -> None:
        """End with `result`: `body` landed on `run`; the key waits for the informer to show it."""

    def superseded(self, cycle: Cycle, run: RunInfo) -> None:
        """End as a conflict: the Run moved on past `run`; its next version's event enqueues the key."""

    def wake(self, wakeups: Iterable[Wakeup]) -> None:
        """Enqueue the Pending Runs a release woke."""


class BindSettlement:
    """Sends binds and gives each answer its meaning; keeps the binds whose outcome is unknown."""

    def __init__(self, cache: ClusterCache, metrics: SchedulerMetrics, sender: Callable[[], Sender],
                 deadline: Callable[[], float], ends: CycleEnds) -> None:
        """`sender` is looked up on every send, so that replacing the loop's sender takes effect."""
        self._cache = cache
        self._metrics = metrics
        self._sender = sender
        self._deadline = deadline
        self._ends = ends
        # Binds whose outcome is unknown (their assumption is kept), until settled.
        self._unsettled: dict[RunKey, Bind] = {}

    def unsettled(self, key: RunKey) -> bool:
        """Whether `key`'s last bind is still unsettled: its next cycle settles it first (`settle`)."""
        return key in self._unsettled

    def forget_all(self) -> None:
        """A term ended: it dropped every assumption, so no bind of it is left to settle."""
        self._unsettled.clear()

    def send(self, cycle: Cycle, run: RunInfo, bind: Bind) -> None:
        """Hand `bind` to the sender if its pod is still the one planned on; `_bound` settles the answer."""
        key = cycle.key
        confirming = key in self._unsettled  # an earlier send of this very bind may still land
        pod = self._cache.pod((run.namespace, bind.pod_name))
        if pod is None or pod.uid != bind.pod_uid:
            # Deleted or replaced since the snapshot. Releasing is safe even while an
            # earlier send may land: it would name a pod UID that no longer counts.
            self._unsettled.pop(key, None)
            self._failed(run, "conflict", assumed_mod.RELEASE_STALE_POD)
            self._metrics.conflict("bind")
            self._ends.requeue(cycle, "conflict")
            return
        self._sender().write(run, bind.body, self._deadline(),
                             lambda exc: self._bound(cycle, run, bind, confirming, exc))

    def _bound(self, cycle: Cycle, run: RunInfo, bind: Bind, confirming: bool, exc: BaseException | None) -> None:
        """What a bind's answer means; called once per send, from whatever thread answered."""
        if self._ends.stale(cycle):
            return
        key = cycle.key
        if exc is None:
            self._unsettled.pop(key, None)
            self._succeeded(cycle, run, bind)
            return
        if confirming or isinstance(exc, st.Ambiguous):
            # This send, or the earlier one, may have landed (a 409 now may be our own
            # earlier send): keep the assumption until the Run is observed.
            self._unsettled[key] = bind
            self._record(run, "unknown", type(exc).__name__)
            log.warning("the outcome of a bind is unknown; its assumption is kept until the Run is "
                        "observed again: %s", exc)
            self._ends.retry_later(cycle, exc)
            return
        if isinstance(exc, st.Conflict):
            self._failed(run, "conflict", assumed_mod.RELEASE_BIND_CONFLICT)
            self._metrics.conflict("bind")
            self._ends.requeue(cycle, "conflict")
            return
        # Refused, late (never sent) or failed: the write did not land.
        self._failed(run, "error", assumed_mod.RELEASE_BIND_ERROR, type(exc).__name__)
        self._ends.retry_later(cycle, exc)

    def settle(self, cycle: Cycle) -> bool:
        """Settle the cycle's key's unsettled bind; False when the cache settled it and the cycle may plan.

        True when a read went out to settle it: its answer ends the cycle.
        """
        key = cycle.key
        bind = self._unsettled[key]
        cache = self._cache
        with cache.lock:
            run = cache.run(key)
            if run is None or run.uid != bind.run_uid or (run.namespace, run.uid) not in cache.assumed:
                # The informer settled it: the hand-off rule dropped the assumption of a
                # Run seen active (on our pod or another), terminal or gone.
                del self._unsettled[key]
                return False
            if run.resource_version != bind.resource_version:
                # Seen Pending at a newer version: the write, guarded by the older one,
                # can never land now.
                del self._unsettled[key]
                self._failed(run, "conflict", assumed_mod.RELEASE_BIND_UNSETTLED)
                self._metrics.conflict("bind")
                return False
        self._sender().read(run, lambda seen, exc: self._settled(cycle, run, bind, seen, exc))
        return True

    def _succeeded(self, cycle: Cycle, run: RunInfo, bind: Bind) -> None:
        """A bind that landed (answered, or found by the read that settles it): journal, hand over."""
        self._record(run, "ok")
        self._ends.wrote(cycle, run, bind.body, "scheduled")

    def _settled(self, cycle: Cycle, run: RunInfo, bind: Bind, seen: st.Observed | None,
                 exc: BaseException | None) -> None:
        """What the read that settles an unanswered bind shows."""
        if self._ends.stale(cycle):
            return
        key = cycle.key
        if exc is not None:  # still unknown: keep the assumption, try again later
            log.warning("could not read a Run to settle its bind; retrying with backoff: %s", exc)
            self._ends.retry_later(cycle, exc)
            return
        if seen is not None and seen.uid == run.uid and seen.resource_version == bind.resource_version:
            self.send(cycle, run, bind)  # not landed yet: send the same guarded bind (see module doc)
            return
        del self._unsettled[key]
        if seen is not None and seen.uid == run.uid and seen.pod_uid == bind.pod_uid \
                and seen.phase in ACTIVE_PHASES:
            # It landed: from here on as after a success; the informer hands the assumption over.
            self._succeeded(cycle, run, bind)
            return
        # The Run moved on without this bind (or is gone): it can never land. Plan again
        # once the informer shows the newer version (its event enqueues the key).
        self._failed(run, "conflict", assumed_mod.RELEASE_BIND_UNSETTLED)
        self._metrics.conflict("bind")
        self._ends.superseded(cycle, run)

    def _failed(self, run: RunInfo, result: str, why: str, error: str | None = None) -> None:
        """Release the assumption (waking the Runs it kept out) and record the bind result."""
        self._ends.wake(self._cache.release(run.namespace, run.uid, why))
        self._record(run, result, error)

    def _record(self, run: RunInfo, result: str, error: str | None = None) -> None:
        data: dict[str, Any] = {"namespace": run.namespace, "run_uid": run.uid, "result": result}
        if error is not None:
            data["error"] = error
        self._cache.record("bind", data)
