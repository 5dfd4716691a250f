"""What runtimed does with each Run of its pod: admit, claim, execute, end, recover (SPEC §4.1).

This joins the admission guard, the executor and two seams to the API (what it writes and
tells about a Run is `telling`'s):
- `StatusWriter.update_status(run, status)`: replace a Run's status at the observed
  resourceVersion, raising `status.Conflict` on 409 (or 404). The scheduler's
  `KubernetesBinder` is exactly this, so runtimed's writes are guarded alike.
- `RunReader.read_run(namespace, name)`: a fresh read after a conflict.
Events come in from whoever watches (`observe`, `forget`, `set_capacity`); nothing
here knows how. The steps, each as SPEC §4.1 states it:

1. A Scheduled Run assigned to this pod is offered to the guard. Reserved: claim it
   (`Running`, guarded). A refused or unanswered claim is read back and settled
   (`claims.settle`): still ours and Scheduled, it keeps its reservation and is tried
   again with backoff on a thread of its own; ended, moved or gone, it is released.
   Claimed: start it. Waiting: it stays Scheduled; its `Admitted` condition says why
   (written only when the reason changes).
2. An execution ends: the end is kept on disk and written through the shared helper
   (`ends.EndWriter`: re-read on conflict, retried with backoff otherwise, until
   written or someone else ended the Run); only then is its reservation released and
   the waiting Runs now fitting claimed, oldest first. So the API never shows more
   Runs active on this pod than it holds.
3. After a restart (`recover`), the processes a killed predecessor left running are
   stopped, then Running Runs of this pod are counted first, whatever their fit;
   ends the predecessor kept are written; those whose process this runtimed does not
   have end Failed. So does a Running Run of this pod seen later that this runtimed
   never claimed.
4. A function Run is released by the annotation `kruntimes.io/release: "true"`.
5. A Run that is malformed (the scheduler would have failed it) or has no mode ends
   Failed with a reason that says what to fix; a Run another writer ended, or one
   deleted, is stopped here, or forgotten if it was only waiting or reserved.
Releases that reserve further Runs go through one trampoline (`_claim_all`), so no
chain of claims ever recurses.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from kruntimes.runtimed import claims, devices, outcomes
from kruntimes.runtimed.telling import ADMITTED, STARTED, Tell, end_event, running_status, waiting_status
from kruntimes.runtimed.admission import REFUSED, RESERVED, WAITING, AdmissionGuard, AssignedRun, Capacity, Decision
from kruntimes.runtimed.ends import EndWriter, RunReader, Seams, StatusWriter
from kruntimes.runtimed.executor import Executor, pod_log
from kruntimes.runtimed.outbox import Outbox, PendingEnd
from kruntimes.runtimed.pidfiles import PidFiles
from kruntimes.runtimed.server_client import RemoteExecutor
from kruntimes.runtimed.outcomes import Ended, RunRef
from kruntimes.runtimed.reading import assigned_run, execution_mode
from kruntimes.scheduler import status as st
from kruntimes.scheduler.projection import RunInfo
from kruntimes.wire import RELEASE_ANNOTATION

log = logging.getLogger(__name__)

REASON_NO_MODE = "NothingToExecute"
NO_MODE = "spec.mode sets neither task nor function, so there is nothing to execute; set spec.mode.task.args"
INLINE_CONFLICT_RETRIES = 2  # a claim refused with 409 is re-read and re-sent at once this often, then backs off
MAX_REMEMBERED_ENDS = 10_000


@dataclass(frozen=True, slots=True)
class _Attempt:
    """How one claim attempt ended: the verdict, and what the next attempt needs to know."""

    verdict: str
    may_have_landed: bool
    retry_after: float | None = None
    conflict: bool = False


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Lifecycle:
    """The Runs of one Runtime Pod, from Scheduled to their end. Thread-safe."""

    def __init__(self, pod_name: str, pod_uid: str, capacity: Capacity, writer: StatusWriter, reader: RunReader,
                 work_root: Path, *, clock: Callable[[], datetime] = utcnow,
                 log_line: Callable[[str], None] = pod_log, stop_grace_seconds: float = 10.0,
                 backoff: claims.Backoff = claims.Backoff(), wait: Callable[[float], bool] | None = None,
                 state_dir: Path | None = None, runtime_server: Path | None = None,
                 tell: Tell | None = None) -> None:
        self.guard = AdmissionGuard(pod_name, pod_uid, capacity)
        self._tell: Tell = tell or (lambda run, reason, note, warning: None)
        # Deployed, Runs execute in the runtime container's Runtime Server (their own users, no
        # API token); without its socket (`kruntimes demo`, tests) as runtimed's own children.
        self.executor: Executor | RemoteExecutor
        if runtime_server is not None:
            self.executor = RemoteExecutor(runtime_server, self._ended, stop_grace_seconds=stop_grace_seconds)
        else:
            self.executor = Executor(work_root, self._ended, log=log_line, stop_grace_seconds=stop_grace_seconds,
                                     pid_files=PidFiles(state_dir / "processes" if state_dir is not None else None))
        self._grace = stop_grace_seconds
        self._writer, self._reader, self._clock = writer, reader, clock
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}  # uid -> the newest object seen, for Runs of this pod
        # Runs that ended here: a late event showing one still active (the watch lags
        # our own writes) is old news, not a Run to adopt. Bounded: terminal is final.
        self._ended_uids: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._pod_leaving = False
        self._local = threading.local()  # this thread's claims still to make (`_claim_all`)
        self._stopping = threading.Event()
        # `wait(seconds)` sleeps between retries and says whether runtimed is stopping; tests pass a fake one.
        self._backoff, self._sleep = backoff, wait or self._stopping.wait
        self._threads: list[threading.Thread] = []  # claims and ends retrying with backoff
        self.outbox = Outbox(state_dir / "ends" if state_dir is not None else None)
        self._ends = EndWriter(writer, reader, self.outbox,
                               Seams(latest=self._known, remember=self._remember, written=self._end_written,
                                     spawn=self._spawn, wait=self._wait), backoff)

    # -- events ----------------------------------------------------------------------

    def recover(self, objs: list[dict[str, Any]]) -> None:
        """Start-up: count this pod's Running Runs first, end those without a process, then the rest.

        First the processes a killed predecessor left running are stopped. A Running Run
        whose end the predecessor kept but could not write gets that end (with the time
        it happened), not `ExecutionLost`; other kept ends are old news.
        """
        # Processes a killed predecessor left running are stopped before anything counts as free.
        left_behind = {r.uid for r in self.executor.pid_files.stop_predecessors(self._grace)}
        kept = self.outbox.pending()
        running: list[RunRef] = []
        for obj in objs:
            run, info = assigned_run(obj)
            if info.phase == "Running" and info.active and self.guard.is_mine(run):
                self._remember(obj)
                self.guard.adopt(run)
                running.append(RunRef(run.namespace, run.name, run.uid))
        for uid in sorted(set(kept) - {r.uid for r in running}):
            self.outbox.remove(uid)  # its end was written, or the Run is gone
        # A Runtime Server outlives runtimed: what it still executes for these Runs is adopted, the rest stopped.
        # Lost is what adoption did not find, not what the executor holds afterwards: the server may hand
        # an adopted Run's end over (settling it) before this goes on.
        adopted = self.executor.adopt({r.uid for r in running if r.uid not in kept})
        for run in sorted(running, key=lambda r: (r.namespace, r.name, r.uid)):
            if run.uid in kept:
                self._ends.write(kept[run.uid])
        for ended in outcomes.lost_executions([r for r in running if r.uid not in kept], adopted.__contains__,
                                              left_behind=left_behind):
            self._finish(ended)
        for obj in objs:
            if (obj.get("status") or {}).get("phase") != "Running":
                self.observe(obj)

    def observe(self, obj: dict[str, Any]) -> None:
        """A Run was added or changed (watch event, list entry or fresh read)."""
        run, info = assigned_run(obj)
        admitted_here = self.guard.holds(run.uid)
        if info.terminal or info.deleting:
            with self._lock:
                self._latest.pop(run.uid, None)
            if self.executor.has(run.uid):  # someone else ended it, or it is being deleted: stop it here
                threading.Thread(target=self.executor.stop, args=(run.uid,), daemon=True).start()
            else:  # reserved, waiting or unknown here: the guard forgets it (idempotent)
                self._release(run.uid)
            return
        with self._lock:
            if run.uid in self._ended_uids:
                return
        if not self.guard.is_mine(run) and (not admitted_here or
                                            (info.phase == "Scheduled" and not self.executor.has(run.uid))):
            # Assigned elsewhere. Reserved here with its claim not landed (a claim sets
            # Running): the reservation goes now, not at the claim's next retry.
            with self._lock:
                self._latest.pop(run.uid, None)
            self.guard.offer(run)  # forgets it if it was waiting here
            self._release(run.uid)
            return
        self._remember(obj)
        if info.phase == "Running" and admitted_here and self._release_requested(obj):
            threading.Thread(target=self.executor.release, args=(run.uid,), daemon=True).start()
            return
        if info.phase == "Running" and not admitted_here and info.active and self.guard.is_mine(run):
            # Running on this pod, yet not claimed by this runtimed (a claim whose answer
            # was lost and could not be re-read, a status someone else wrote): its process
            # is not here. Count it, then end it as lost; the guarded write settles races.
            self.guard.adopt(run)
            self._finish(Ended(_ref(run), "Failed", outcomes.REASON_EXECUTION_LOST, outcomes.EXECUTION_LOST))
            return
        if info.phase != "Scheduled" or not self.guard.is_mine(run):
            return
        if info.problems:
            self._finish(Ended(_ref(run), "Failed", st.REASON_INVALID, "; ".join(info.problems)))
            return
        decision = self.guard.offer(run)
        if decision.outcome in (RESERVED, REFUSED):
            self._claim(decision)
        elif decision.outcome == WAITING:
            self._note_waiting(obj, run, decision.reason)

    def forget(self, namespace: str, name: str) -> None:
        """A Run was deleted: stop what runs for it and free what it held."""
        with self._lock:
            uid = next((u for u, o in self._latest.items()
                        if (o["metadata"].get("namespace"), o["metadata"].get("name")) == (namespace, name)), None)
        if uid is None:  # e.g. its deletion was announced first (a finalizer held it): the guard may still know it
            uid = self.guard.uid_of(namespace, name)
        if uid is None:
            return
        if self.executor.has(uid):
            self.executor.stop(uid)
        with self._lock:
            self._latest.pop(uid, None)
        self._release(uid)

    def set_capacity(self, capacity: Capacity) -> None:
        """The pod's capacity annotations changed."""
        self._claim_all(self.guard.set_capacity(capacity))

    def shutdown(self) -> None:
        """runtimed stops: every execution ends Failed, saying so; claims still retrying give up."""
        self._stopping.set()
        self.executor.stop_all()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()

    def pod_leaving(self) -> None:
        """The pod is being deleted (or is gone): executions stopped from now on end `RuntimePodLost`.

        Deleting a pod sends runtimed SIGTERM; it would otherwise say only that it was
        stopped, while the controller says `RuntimePodLost` for the same event when
        runtimed could not write. One event, one reason.
        """
        self._pod_leaving = True

    # -- steps -----------------------------------------------------------------------

    def _release(self, uid: str) -> None:
        """The guard forgets the Run (admitted or waiting); the Runs now fitting are claimed."""
        self._claim_all(self.guard.release(uid))

    def _claim_all(self, decisions: list[Decision]) -> None:
        # A trampoline: a claim that releases (and so reserves others) queues them here
        # instead of recursing, however many Runs wait or however often a claim fails.
        pending: collections.deque[Decision] | None = getattr(self._local, "pending", None)
        if pending is not None:
            pending.extend(decisions)
            return
        self._local.pending = pending = collections.deque(decisions)
        try:
            while pending:
                self._claim(pending.popleft())
        finally:
            self._local.pending = None

    def _claim(self, decision: Decision) -> None:
        """Claim a reserved Run: at once on this thread; while unsure, again with backoff on a thread of its own.

        A Run whose devices are refused (SPEC §7.7) ends Failed instead, saying why.
        """
        if self._stopping.is_set():
            return  # runtimed is going away: nothing new is claimed (the reservation goes with the process)
        if decision.outcome == REFUSED:
            self._finish(Ended(_ref(decision.run), "Failed", decision.reason, devices.REFUSED_MESSAGES[decision.reason]))
            return
        attempt = self._try_claim(decision.run, may_have_landed=False)
        for _ in range(INLINE_CONFLICT_RETRIES):
            if attempt.verdict != claims.RETRY or not attempt.conflict:
                break
            attempt = self._try_claim(decision.run, may_have_landed=False)  # a 409 is settled by one more read
        if attempt.verdict == claims.RETRY:
            self._spawn(f"claim {decision.run.namespace}/{decision.run.name}", self._claim_with_backoff,
                        decision.run, attempt)

    def _claim_with_backoff(self, run: AssignedRun, attempt: _Attempt) -> None:
        for number in itertools.count():
            if self._wait(self._backoff.delay(number, attempt.retry_after)):
                return  # runtimed is stopping
            attempt = self._try_claim(run, may_have_landed=attempt.may_have_landed)
            if attempt.verdict != claims.RETRY:
                return

    def _try_claim(self, run: AssignedRun, *, may_have_landed: bool) -> _Attempt:
        """One claim write (read back unless it succeeded); executes or releases the Run as the verdict says."""
        with self._lock:
            obj = self._latest.get(run.uid)
        if obj is None or not self.guard.holds(run.uid):  # ended or deleted since it was reserved
            self._release(run.uid)
            return _Attempt(claims.DROPPED, may_have_landed)
        retry_after: float | None = None
        conflict = False
        try:
            self._writer.update_status(assigned_run(obj)[1],
                                       running_status(obj.get("status"), self.guard.pod_name, self._clock()))
        except st.Conflict:
            conflict = True
        except Exception as exc:  # noqa: BLE001 - an API error, or anything else: the claim may have landed
            log.warning("claiming Run %s/%s failed: %s; reading it back", run.namespace, run.name, exc)
            may_have_landed, retry_after = True, getattr(exc, "retry_after", None)
        else:
            self._execute(run, obj)
            return _Attempt(claims.CLAIMED, may_have_landed)
        try:
            fresh = self._reader.read_run(run.namespace, run.name)
        except Exception as exc:  # noqa: BLE001 - unknown: keep the reservation, ask again later
            log.warning("reading Run %s/%s back failed: %s", run.namespace, run.name, exc)
            return _Attempt(claims.RETRY, may_have_landed, retry_after or getattr(exc, "retry_after", None))
        verdict = claims.settle(run, fresh, is_mine=self.guard.is_mine, may_have_landed=may_have_landed)
        if verdict == claims.DROPPED:
            self._release(run.uid)
            if fresh is not None:
                self.observe(fresh)  # ended, moved or someone else's Running: dealt with as any event
            return _Attempt(verdict, may_have_landed)
        assert fresh is not None
        self._remember(fresh)
        if verdict == claims.CLAIMED:
            self._execute(run, fresh)
        return _Attempt(verdict, may_have_landed, retry_after, conflict)

    def _execute(self, run: AssignedRun, obj: Mapping[str, Any]) -> None:
        if not self.guard.claimed(run.uid):
            return  # it ended or vanished while the claim was in flight: nothing executes
        mode = execution_mode(obj)
        ref = _ref(run)
        # SPEC §7.7: the process is told its devices (the inventory of now, that admitted them).
        env = devices.process_env(self.guard.capacity().devices, run.devices) if run.devices is not None else None
        self._tell(ref, ADMITTED, f"Admitted on Runtime Pod {self.guard.pod_name} by its runtimed", False)
        if mode is None:
            self._finish(Ended(ref, "Failed", REASON_NO_MODE, NO_MODE))
            return
        if mode[0] == "task":
            self.executor.start_task(ref, mode[1] or [], env=env)
        else:
            self.executor.start_function(ref, mode[1], env=env)
        self._tell(ref, STARTED, f"Started the {mode[0]} on Runtime Pod {self.guard.pod_name}", False)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _note_waiting(self, obj: dict[str, Any], run: AssignedRun, reason: str) -> None:
        status = waiting_status(obj.get("status"), reason, self._clock())
        if status.get("conditions") == (obj.get("status") or {}).get("conditions"):
            return
        try:
            self._writer.update_status(assigned_run(obj)[1], status)
        except (st.Conflict, st.ApiError):
            pass  # the next event for this Run re-evaluates and writes again

    def _ended(self, ended: Ended) -> None:
        """The executor's report (on its thread)."""
        self._finish(ended)

    def _finish(self, ended: Ended) -> None:
        """Keep the end and write it (unless the Run already ended or is gone); its capacity is freed once written."""
        run = ended.run
        if ended.reason == outcomes.REASON_INTERRUPTED and self._pod_leaving:
            ended = outcomes.pod_lost(run, self.guard.pod_name)
        self._ends.write(PendingEnd(ended, self._clock()))
        self._tell(ended.run, *end_event(ended))

    def _end_written(self, uid: str) -> None:
        with self._lock:
            self._latest.pop(uid, None)
            self._ended_uids[uid] = None
            while len(self._ended_uids) > MAX_REMEMBERED_ENDS:
                self._ended_uids.popitem(last=False)
        self._release(uid)

    # -- state -----------------------------------------------------------------------

    def _wait(self, seconds: float) -> bool:
        """Sleep between retries; True (at once) when runtimed is stopping."""
        return self._stopping.is_set() or self._sleep(seconds) or self._stopping.is_set()

    def _known(self, uid: str) -> dict[str, Any] | None:
        with self._lock:
            return self._latest.get(uid)

    def _remember(self, obj: dict[str, Any]) -> tuple[AssignedRun, RunInfo]:
        run, info = assigned_run(obj)
        with self._lock:
            self._latest[run.uid] = obj
        return run, info

    @staticmethod
    def _release_requested(obj: Mapping[str, Any]) -> bool:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        return annotations.get(RELEASE_ANNOTATION) == "true"


def _ref(run: AssignedRun) -> RunRef:
    return RunRef(run.namespace, run.name, run.uid)
