"""The scheduler loop: event intake, the work queue, the scheduling loop, and one cycle per key.

Event handlers only apply projections to the cluster cache and enqueue the keys
it returns; only the loop, having dequeued a key, plans, reserves or writes. As in
kube-scheduler, scheduling is serial and binding is not: the cycle's status write
is handed to a `writes.Sender` (in the cluster, binder processes) and the loop
plans the next key while it is out. The write's answer ends the cycle, from
whichever thread it arrives on; until then the key stays "processing" in the queue
(an event for that Run waits for the answer, as it waited for a cycle in progress)
and the assumption stands. Each write carries the deadline after which it must not
be sent (`deadline`: the leader fence). The cycle, step by step (SPEC §3.2):

1. snapshot, plan and reserve in ONE hold of the cache lock, so the view is exactly
   "everything up to the snapshot LSN" and nothing else can assume onto the chosen
   pod in between. With affinity in play a capacity-only re-check at reserve would
   not be enough - two cycles could each place an anti-affine Run on the same pod;
2. an invalid Run becomes terminal Failed; a plugin error aborts the cycle (no
   assumption, no status write) and the key is retried with backoff;
3. no feasible pod: write the bounded Pending message, only when it changed;
4. reserve: re-check the chosen pod against every assumption and assume (a
   defensive invariant check; a failure is counted as a reserve conflict);
5. bind through the sender, and
6. settle a bind whose outcome is unknown: the scheduler's `binding.BindSettlement`
   tells what each answer means (SPEC §3.2 step 6) and ends the cycle through the
   scheduler's side of `binding.CycleEnds`, the same steps its other writes end by.

Nothing here reads the journal; the recorder only ever receives.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from kruntimes.scheduler import device_cycle, device_outcome
from kruntimes.scheduler import outcome as out
from kruntimes.scheduler import status as st
from kruntimes.scheduler.binding import Bind, BindSettlement
from kruntimes.scheduler.cache import ClusterCache, RunKey, Wakeup
from kruntimes.scheduler.cycle import IN_FLIGHT, Cycle, Planned
from kruntimes.scheduler.metrics import SchedulerMetrics
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.projection import PodInfo, RunInfo
from kruntimes.scheduler.queue import QueueShutDown, WorkQueue
from kruntimes.scheduler.writes import NO_DEADLINE, Binder, Inline, Sender

ROOM_POLL = 0.2  # seconds between looks at shutting down while the sender has no room

log = logging.getLogger(__name__)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Scheduler:
    def __init__(self, cache: ClusterCache, binder: Binder, *, clock: Callable[[], datetime] = utc_now,
                 metrics: SchedulerMetrics | None = None, queue: WorkQueue | None = None,
                 planner: Planner | None = None, sender: Sender | None = None,
                 deadline: Callable[[], float] = lambda: NO_DEADLINE) -> None:
        """`sender` carries the cycles' writes (default: `binder`, called inline); `deadline`
        is the monotonic time after which a write handed over now must not be sent."""
        self.cache = cache
        self.binder = binder
        self.sender: Sender = sender if sender is not None else Inline(lambda: self.binder)
        self.deadline = deadline
        self._term = 0  # bumped by `pause`: answers for an earlier term change nothing
        # The leadership term this scheduler's assignments carry (the Lease's
        # leaseTransitions when it took the lease; SPEC §3.6), None without leader election.
        self.lease_term: int | None = None
        self.clock = clock
        self.metrics = metrics if metrics is not None else SchedulerMetrics()
        self.metrics.count_pending(cache.pending_counts)
        # `is not None`, not `or`: an empty WorkQueue is falsy (it has __len__).
        self.queue: WorkQueue = queue if queue is not None else WorkQueue(on_dequeue=self._dequeued)
        self.planner = planner if planner is not None else Planner(cache.config)
        self._threads: list[threading.Thread] = []
        # The resourceVersion each key's last successful status write was based on: until
        # the informer shows a newer version, planning that Run again would only earn a
        # 409 (and, woken by each other's releases, two such Runs would ping-pong).
        self._written: dict[RunKey, str] = {}
        # Sends binds and settles their answers, ending their cycles through this scheduler's
        # `binding.CycleEnds` side; the sender and deadline are looked up per send (tests swap them).
        self.binds = BindSettlement(cache, self.metrics, lambda: self.sender, lambda: self.deadline(), self)
        self.results: Counter[str] = Counter()
        # Told of an attempt that left a Run Pending for the reason it already shows (no
        # status write): the cluster layer counts it into the Run's FailedScheduling Event.
        # It must return at once (it only enqueues).
        self.on_pending_again: Callable[[RunInfo, str], None] | None = None
        #: Told of every status write that landed (the Run, the status written), e.g. to
        #: emit an Event; called on the thread that settled the answer, so it must not block.
        self.on_written: Callable[[RunInfo, dict[str, Any]], None] | None = None

    # -- event intake (informer threads): apply, then only enqueue ----------------------
    def on_pod(self, info: PodInfo, event: str = "MODIFIED") -> None:
        self.wake(self.cache.upsert_pod(info, now=self.clock(), event=event))

    def on_pod_deleted(self, namespace: str, name: str) -> None:
        self.wake(self.cache.delete_pod(namespace, name))

    def on_run(self, info: RunInfo, event: str = "MODIFIED") -> None:
        self.wake(self.cache.upsert_run(info, event=event))

    def on_run_deleted(self, namespace: str, name: str) -> None:
        self.wake(self.cache.delete_run(namespace, name))

    def on_device_class(self, name: str, generation: Any, spec: Any) -> None:
        """A RuntimeDeviceClass was added or changed (SPEC §7.2): Pending Runs with devices are tried again."""
        self.wake(device_cycle.class_changed(self.cache, name, generation, spec))

    def on_device_class_deleted(self, name: str) -> None:
        self.wake(device_cycle.class_deleted(self.cache, name))

    def enqueue_pending(self) -> None:
        """What a new leader does first: every Pending Run into the queue."""
        self.cache.unpark_all()  # each gets a cycle, which parks it again if it still fits nowhere
        for key in self.cache.pending_keys():
            self.queue.add(key)

    def wake(self, wakeups: Iterable[Wakeup]) -> None:
        """Enqueue the Pending Runs an event woke, counting each wake-up by its source."""
        for key, source in wakeups:
            if source is not None:
                self.metrics.wakeup(source)
            self.queue.add(key)

    def _dequeued(self, key: RunKey, waited: float) -> None:
        self.metrics.queue_duration.observe(waited)

    # -- the scheduling loop -------------------------------------------------------------------
    def start(self, workers: int | None = None) -> None:
        """Start the scheduling loop: one thread plans and reserves; writes go to the sender.

        More than one thread only adds contention when writes leave the cycle (the
        cycle is serial under the cache lock); the in-memory demo still asks for
        several, to exercise the locks.
        """
        for i in range(workers or 1):
            t = threading.Thread(target=self._work, args=(self.queue,), name=f"kruntimes-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking keys; cycles in flight finish (their writes answered); the loop is joined."""
        self.queue.shut_down(drain=True, timeout=timeout)
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()

    def pause(self, timeout: float = 10.0) -> bool:
        """Stop the loop but keep the scheduler: what a leader does when its term ends.

        As in `stop`, cycles in flight finish - a key stays "processing" in the queue
        until its write is answered, so this also waits for the writes still out - and
        the loop is joined. Then a fresh (default) work queue replaces the shut-down
        one and this term's memory of its own status writes is forgotten, so a later
        term can `enqueue_pending` and `start` again. Waiting keys are dropped: the
        next term enqueues every Pending Run. False when a cycle in flight did not
        finish within `timeout`: its answer, when it comes, only marks its key done
        on the old queue and changes nothing else (the term that sent it is over, and
        its assumptions were dropped with it).
        """
        drained = self.queue.shut_down(drain=True, timeout=timeout)
        for t in self._threads:
            t.join(timeout)
        stuck = any(t.is_alive() for t in self._threads)
        self._threads.clear()
        self._term += 1
        self._written.clear()
        self.binds.forget_all()  # the term's end drops every assumption
        self.queue = WorkQueue(on_dequeue=self._dequeued)
        return drained and not stuck

    def _work(self, queue: WorkQueue) -> None:
        # The queue is bound per thread: after `pause` swaps in a new one, a cycle still
        # finishing must mark its key done on the queue it took it from.
        while True:
            # Plan no faster than writes leave (kube-scheduler's binding cycles wait on the
            # client's rate limit the same way): a write queued behind too many others would
            # pass its deadline unsent, and its Run would be planned a second time.
            while not queue.shutting_down and not self.sender.wait_for_room(ROOM_POLL):
                pass
            try:
                key = queue.get()
            except QueueShutDown:
                return
            if key is None:
                continue
            result: str | None = None
            try:
                result = self.process(key, queue)
            except Exception:  # noqa: BLE001 - the loop never dies on one Run
                log.exception("scheduling cycle failed unexpectedly; retrying with backoff")
                self.queue.add_rate_limited(key)
            if result != IN_FLIGHT:
                queue.done(key)

    # -- one cycle ---------------------------------------------------------------------------
    def process(self, key: RunKey, queue: WorkQueue | None = None) -> str:
        """Run one scheduling cycle for `key`; returns the result (or "skipped").

        `IN_FLIGHT` when the cycle's write (or read) is still out: its answer ends the
        cycle and marks `key` done on `queue` (the caller must not). A `Sender` that
        answers at once (`writes.Inline`) never leaves a cycle in flight.
        """
        cycle = Cycle(key, queue if queue is not None else self.queue, self._term, time.perf_counter())
        cache = self.cache
        if self.binds.unsettled(key) and self.binds.settle(cycle):
            return cycle.hand_over()
        with cache.lock:
            run = cache.run(key)
            written = self._written.get(key)
            if written is not None:
                if run is not None and run.resource_version == written:
                    return "skipped"  # our write is not observed yet; its watch event re-enqueues
                del self._written[key]  # a newer version arrived: our write has been seen
            if run is None or not run.eligible or (run.namespace, run.uid) in cache.assumed:
                # Gone, no longer Pending, or bound and awaiting the informer.
                self.queue.forget(key)
                return "skipped"
            wakes_seen = cache.wakes(run)
            snapshot = cache.snapshot(run, self.clock())
            outcome = device_outcome.attach(self.planner, run, self.planner.plan(snapshot))
            devices = device_cycle.allocated(self.planner, self.metrics, run, outcome)
            # The new assumption is an affinity target: it wakes the Runs waiting for it (§3.1).
            # Devices (SPEC §7.6) only for a Run with a claim: a Run without one reserves exactly as before.
            with_devices = {"device_results": devices} if devices is not None else {}
            woken = (cache.reserve_waking(run, outcome.chosen or "", outcome.chosen_uid, **with_devices)
                     if outcome.status == out.SCHEDULED else None)
            reserved = woken is not None
        self.wake(woken or ())
        for plugin, reason, n in outcome.rejection_counts():
            self.metrics.filter_rejections.labels(plugin=plugin, reason=reason).inc(n)
        cycle.planned = Planned(run, outcome, wakes_seen)
        self._act(cycle, run, outcome, reserved, devices)
        return cycle.hand_over()

    def _end(self, cycle: Cycle, result: str) -> None:
        """The cycle's result is known: account for it, then let its key go."""
        if cycle.term == self._term:
            planned = cycle.planned
            if planned is not None:
                if result == "unschedulable" and not self._park(planned):
                    self.queue.add(cycle.key)  # its runtime was woken mid-cycle: try again now
                duration = cycle.duration if cycle.duration is not None else time.perf_counter() - cycle.started
                self.metrics.cycle_duration.observe(duration)
            self.metrics.result(result)
            self.results[result] += 1
            if planned is not None:
                self.cache.record("cycle", {"outcome": planned.outcome, "result": result, "duration": duration})
        if cycle.answered(result):
            cycle.queue.done(cycle.key)

    def _park(self, planned: Planned) -> bool:
        """Park an unschedulable Run until an event its rejecting plugins name (`wake_events`) or its
        Runtime's pods or released capacity can change its answer; False: a wake-up came mid-cycle."""
        outcome = planned.outcome
        return self.cache.park(planned.run, planned.wakes_seen, self.planner.wake_events(outcome.rejections),
                               outcome.waits_for_pods)

    def _act(self, cycle: Cycle, run: RunInfo, outcome: out.CycleOutcome, reserved: bool,
             devices: str | None = None) -> None:
        key, now = cycle.key, outcome.now
        if outcome.status == out.ERROR:
            self.requeue(cycle, "error")
            return
        if outcome.status == out.INVALID:
            body = st.terminal_status(None, "Failed", st.REASON_INVALID, outcome.message or "", now)
            self._write(cycle, run, body, "invalid")
            return
        if outcome.status == out.UNSCHEDULABLE:
            if outcome.message == run.pending_message:
                self.queue.forget(key)
                self._end(cycle, "unschedulable")
                if self.on_pending_again is not None:
                    self.on_pending_again(run, outcome.message or "")
                return
            self._write(cycle, run, st.pending_status(None, outcome.message or "", now), "unschedulable")
            return
        assert outcome.chosen is not None and outcome.chosen_uid is not None
        if not reserved:
            self.metrics.conflict("reserve")
            self.requeue(cycle, "conflict")
            return
        body = st.scheduled_status(None, outcome.chosen, outcome.chosen_uid, now, self.lease_term)
        if devices is not None:  # in the assignment's own guarded write (SPEC §7.6)
            body["devices"] = json.loads(devices)
        self._bind(cycle, run, Bind(run.resource_version, run.uid, outcome.chosen, outcome.chosen_uid, body))

    def _bind(self, cycle: Cycle, run: RunInfo, bind: Bind) -> None:
        """Step 5: the bind leaves the loop; the scheduler's `BindSettlement` sends it and settles its answer."""
        self.binds.send(cycle, run, bind)

    def _write(self, cycle: Cycle, run: RunInfo, body: dict[str, Any], result: str) -> None:
        """A status write that is not a bind (a Pending message, Failed for an invalid Run)."""
        self.sender.write(run, body, self.deadline(), lambda exc: self._wrote(cycle, run, body, result, exc))

    def _wrote(self, cycle: Cycle, run: RunInfo, body: dict[str, Any], result: str,
               exc: BaseException | None) -> None:
        if self.stale(cycle):
            return
        if isinstance(exc, st.Conflict):
            self.requeue(cycle, "conflict")  # a newer version is on its way; plan again on it
            return
        if exc is not None:
            log.warning("status write for a Run failed; retrying with backoff: %s", exc)
            self.retry_later(cycle, exc)
            return
        self.wrote(cycle, run, body, result)

    # -- how a cycle ends once its write is answered (`binding.CycleEnds`, for binds too) ----------
    def stale(self, cycle: Cycle) -> bool:
        """An answer for a term that is over: it only lets its key go on the old queue."""
        if cycle.term == self._term:
            return False
        self._end(cycle, "aborted")
        return True

    def requeue(self, cycle: Cycle, result: str) -> None:
        self.queue.add_rate_limited(cycle.key)
        self._end(cycle, result)

    def retry_later(self, cycle: Cycle, exc: BaseException) -> None:
        """Requeue after the key's backoff, or - a throttling server said when - after `retry_after`."""
        wait = getattr(exc, "retry_after", None)
        if isinstance(wait, (int, float)) and wait > 0:
            self.queue.add_after(cycle.key, wait)
        else:
            self.queue.add_rate_limited(cycle.key)
        self._end(cycle, "error")

    def wrote(self, cycle: Cycle, run: RunInfo, body: dict[str, Any], result: str) -> None:
        self._written[cycle.key] = run.resource_version
        self.queue.forget(cycle.key)
        self._end(cycle, result)
        if self.on_written is not None:
            try:
                self.on_written(run, body)
            except Exception:  # noqa: BLE001 - telling others of a write must never undo it
                log.exception("a hook told of a status write failed")

    def superseded(self, cycle: Cycle, run: RunInfo) -> None:
        self._written[cycle.key] = run.resource_version
        self._end(cycle, "conflict")
