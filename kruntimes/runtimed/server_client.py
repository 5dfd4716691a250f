"""runtimed's side of the Runtime Server: the executor `Lifecycle` drives, over the socket (SPEC §4.1).

`RemoteExecutor` answers what `Executor` answers (`has`, `active`, `start_task`,
`start_function`, `release`, `stop`, `stop_all`, `adopt`), so admission, claims, the
end outbox and restart recovery are the same code whether Runs execute in runtimed's
container (`kruntimes demo`, tests) or, as deployed, in the runtime container.

Ends come from one thread asking the server for them (`ends`, a long poll); each is
handed to `on_end` (which keeps it on runtimed's disk before it returns) and only then
acknowledged, so an end is never only in a process that may die.

After a restart (`adopt`), the Runs the server still executes and that are Running on
this pod are this runtimed's again: their ends come as if it had never gone. What the
server executes for any other Run (ended or deleted meanwhile) is stopped and its end
dropped, so no process runs that the API does not count. A server that cannot be
reached makes `start` end the Run `StartFailed`: nothing holds a slot it does not use.
A server that restarted (another `incarnation`) has lost its predecessor's processes:
every Run this runtimed had it execute and that it does not know ends `ExecutionLost`,
so no Run stays Running, holding its slot, for a process that no longer exists.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from kruntimes.runtimed import outcomes
from kruntimes.runtimed import server_protocol as wire
from kruntimes.runtimed.executions import Executions, RunExecutor
from kruntimes.runtimed.outcomes import Ended, RunRef

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # one `ends` request waits this long for an end (an end answers at once)
RETRY_SECONDS = 1.0  # after the server could not be reached
SERVER_LOST = ("the Runtime Server restarted (its container restarted, e.g. out of memory) and this Run's process "
               "went with it, so its result is unknown; create the Run again to retry it")
CONNECT_TIMEOUT = 10.0
#: At start-up runtimed waits this long for the server (the two containers start together) before it admits
#: anything, so the pod's first Runs do not end `StartFailed` because runtimed was quicker.
SERVER_WAIT_SECONDS = 120.0


class ServerUnreachable(Exception):
    """The Runtime Server did not answer (not started yet, restarting, or refused)."""


class _NoPidFiles:
    """Processes are the server's: a restarted runtimed adopts them (`adopt`) instead of stopping them."""

    def stop_predecessors(self, grace_seconds: float) -> list[RunRef]:
        return []


class RemoteExecutor(RunExecutor[RunRef]):
    """The Runs this runtimed has the Runtime Server execute."""

    def __init__(self, socket_path: Path, on_end: Callable[[Ended], None], *,
                 stop_grace_seconds: float = 10.0) -> None:
        # `_dropped` and `_incarnation` change under the lock of what is held.
        super().__init__(Executions(lambda run: run))  # executing (or ended, end not yet handed over)
        self.socket_path = Path(socket_path)
        self._on_end = on_end
        self._grace = stop_grace_seconds
        self.pid_files = _NoPidFiles()
        self._dropped: set[str] = set()  # stopped at adoption: their ends are acknowledged, not reported
        self._stopping = threading.Event()
        self._follower: threading.Thread | None = None
        self._incarnation: str | None = None  # the server these Runs were started on

    # -- requests ---------------------------------------------------------------------

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request, one answer; ServerUnreachable when there is none or it says no."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(str(self.socket_path))
                wire.send(sock, request)
                answer = wire.receive(sock)
        except (OSError, wire.ProtocolError) as exc:
            raise ServerUnreachable(f"the Runtime Server at {self.socket_path} did not answer "
                                    f"{request.get('op')!r}: {exc}") from exc
        if answer.get("ok") is not True:
            raise ServerUnreachable(f"the Runtime Server refused {request.get('op')!r}: {answer.get('error')}")
        return answer

    # -- starting and stopping -----------------------------------------------------------

    def _start(self, run: RunRef, args: list[str] | None, *, function: bool,
               env: Mapping[str, str] | None = None) -> None:
        self._executions.begin(run, run)
        self._follow()
        try:
            self.call({"op": "start", "run": wire.encode_run(run), "args": args, "function": function,
                       "env": dict(env) if env else None}, CONNECT_TIMEOUT)
        except ServerUnreachable as exc:
            with self._lock:
                self._executions.settle(run.uid)
                self._dropped.add(run.uid)  # should the server have started it after all, its end is not ours
            # Unanswered is not refused: a process the server did start must not run beside the Runs admitted
            # in this one's place.
            threading.Thread(target=self._stop_unclaimed, args=(run.uid,), daemon=True).start()
            self._on_end(outcomes.start_failed(run, args or ["(function)"], exc))

    def release(self, uid: str) -> bool:
        return self._stop(uid, "released")

    def stop(self, uid: str) -> bool:
        return self._stop(uid, "interrupted")

    def _stop(self, uid: str, why: str) -> bool:
        if not self.has(uid):
            return False
        try:
            return bool(self.call({"op": "stop", "uid": uid, "why": why}, self._grace + CONNECT_TIMEOUT)["known"])
        except ServerUnreachable as exc:
            log.warning("stopping a Run failed: %s", exc)
            return False

    def stop_all(self) -> None:
        """runtimed is stopping: the server stops every Run; their ends are collected before this returns."""
        for run in self.active():
            self._stop(run.uid, "interrupted")
        deadline = threading.Event()
        for _ in range(int(CONNECT_TIMEOUT / 0.05)):
            if not self.active():
                break
            deadline.wait(0.05)
        self._stopping.set()
        self.join()

    def _stop_unclaimed(self, uid: str) -> None:
        try:
            self.call({"op": "stop", "uid": uid, "why": "interrupted"}, self._grace + CONNECT_TIMEOUT)
        except ServerUnreachable as exc:
            log.warning("%s", exc)

    def adopt(self, running: set[str], *, wait_seconds: float = SERVER_WAIT_SECONDS) -> set[str]:
        """Start-up: wait for the server; keep what it executes (or has the end of) for `running`, and
        return those Runs' UIDs; stop and drop everything else."""
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                listed = self.call({"op": "list"}, CONNECT_TIMEOUT)
                break
            except ServerUnreachable as exc:
                if time.monotonic() >= deadline or self._stopping.is_set():
                    log.warning("%s; the Runs it may still execute count as lost", exc)
                    listed = {"running": [], "ended": []}
                    break
                self._stopping.wait(0.1)
        there = [wire.decode_run(r) for r in listed.get("running", [])] + \
                [wire.decode_ended(e).run for e in listed.get("ended", [])]
        with self._lock:
            self._incarnation = listed.get("incarnation")
            for run in there:
                if run.uid in running:
                    self._executions.adopt(run, run)
                else:
                    self._dropped.add(run.uid)
        for run in there:
            if run.uid not in running:
                log.warning("stopping the process of Run %s: it is not Running on this pod any more", run.label)
                try:
                    self.call({"op": "stop", "uid": run.uid, "why": "interrupted"}, self._grace + CONNECT_TIMEOUT)
                except ServerUnreachable as exc:
                    log.warning("%s", exc)
        self._follow()
        return {run.uid for run in there if run.uid in running}

    def reap_orphans(self) -> int:
        return 0  # the Runs' processes are the server's children, and it reaps them

    def join(self, timeout: float | None = None) -> None:
        follower = self._follower
        if follower is not None and self._stopping.is_set():
            follower.join(timeout)

    # -- ends -------------------------------------------------------------------------

    def _follow(self) -> None:
        with self._lock:
            if self._follower is not None:
                return
            self._follower = threading.Thread(target=self._collect, name="runtime server ends", daemon=True)
        self._follower.start()

    def _collect(self) -> None:
        while not self._stopping.is_set():
            try:
                answer = self.call({"op": "ends", "wait": POLL_SECONDS}, POLL_SECONDS + CONNECT_TIMEOUT)
            except ServerUnreachable as exc:
                log.warning("%s; asking again in %.0f s", exc, RETRY_SECONDS)
                self._stopping.wait(RETRY_SECONDS)
                continue
            for data in answer.get("ended", []):
                self._hand_over(wire.decode_ended(data))
            self._check_incarnation(answer.get("incarnation"))

    def _check_incarnation(self, incarnation: Any) -> None:
        """A restarted server: the Runs it does not know end `ExecutionLost` (their processes went with it)."""
        with self._lock:
            known, self._incarnation = self._incarnation, incarnation
        if known is None or incarnation == known:
            return
        try:
            listed = self.call({"op": "list"}, CONNECT_TIMEOUT)
        except ServerUnreachable as exc:
            log.warning("%s", exc)
            with self._lock:
                self._incarnation = known  # checked again with the next answer
            return
        there = {wire.decode_run(r).uid for r in listed.get("running", [])} | \
                {wire.decode_ended(e).run.uid for e in listed.get("ended", [])}
        lost = self._executions.settle_all_but(there)
        for run in sorted(lost, key=lambda r: (r.namespace, r.name)):
            log.warning("the Runtime Server restarted without the process of Run %s", run.label)
            self._on_end(Ended(run, "Failed", outcomes.REASON_EXECUTION_LOST, SERVER_LOST))

    def _hand_over(self, ended: Ended) -> None:
        uid = ended.run.uid
        with self._lock:
            dropped = uid in self._dropped
            self._dropped.discard(uid)
            ours = self._executions.settle(uid) is not None
        if ours and not dropped:
            self._on_end(ended)  # kept on runtimed's disk before it returns
        try:
            self.call({"op": "ack", "uids": [uid]}, CONNECT_TIMEOUT)
        except ServerUnreachable as exc:
            log.warning("%s; the end is handed over again", exc)
