"""Executing admitted Runs as processes (SPEC §4.1).

A task Run's `args` run as one process, never through a shell (no quoting, no
injection: what the user wrote is the argv), in a working directory of its own
under the executor's root (a writable volume; the image's root filesystem may be
read-only), with HOME and TMPDIR pointing there. Its stdout and stderr, merged in
order, go to runtimed's own output - the pod log - one line at a time, each prefixed
with the Run's `namespace/name`, and the last lines are kept (bounded) for the
terminal status message. The exit code decides Succeeded or Failed.

A function Run is active until released. Its mode's settings belong to the Runtime
Server; when they include `args`, that process is started and kept until the Run is
released (then stopped: SIGTERM to its process group, SIGKILL after a grace period);
without `args`, the Run simply holds its admission until released. A function
process that exits by itself ends the Run by its exit code.

Every end is reported once, to `on_end`, from the thread that saw it (or at once
for a process that cannot start). The adapter writes the status and releases the
admission. Threads and processes only: no Kubernetes, no status writes.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from kruntimes.runtimed import outcomes, run_users
from kruntimes.runtimed.executions import Executions, RunExecutor
from kruntimes.runtimed.outcomes import Ended, RunRef
from kruntimes.runtimed.pidfiles import PidFiles

TAIL_LINES = 20
TAIL_LINE_CHARS = 240
_STDOUT_LOCK = threading.Lock()


def pod_log(line: str) -> None:
    """Write one line to runtimed's stdout (the pod log); whole lines, never interleaved."""
    with _STDOUT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


@dataclass(slots=True)
class _Execution:
    run: RunRef
    function: bool
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    stopping: str | None = None  # "released" or "interrupted" once runtimed stops it


class Executor(RunExecutor[_Execution]):
    """The processes of the Runs admitted on this pod, one execution per Run UID."""

    def __init__(self, work_root: Path, on_end: Callable[[Ended], None], *,
                 log: Callable[[str], None] = pod_log, env: Mapping[str, str] | None = None,
                 stop_grace_seconds: float = 10.0, keep_workdirs: bool = False,
                 pid_files: PidFiles | None = None, users: run_users.RunUsers | None = None) -> None:
        # An execution's process and `stopping` change under the lock of whether it is held.
        super().__init__(Executions(lambda e: e.run))
        self.work_root = Path(work_root)
        self._on_end = on_end
        self._log = log
        self._env = dict(os.environ if env is None else env)
        self._grace = stop_grace_seconds
        self._keep = keep_workdirs
        self.pid_files = pid_files or PidFiles(None)
        self._users = users  # each Run as a user of its own (the Runtime Server, given a range)
        self._spawn_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # -- starting --------------------------------------------------------------------

    def _start(self, run: RunRef, args: list[str] | None, *, function: bool,
               env: Mapping[str, str] | None = None) -> None:
        execution = _Execution(run, function, self._workdir(run))
        self._executions.begin(run, execution)
        if args is None:
            return
        problem = outcomes.unusable_argument(args)
        if problem is not None:
            self._finish(execution, outcomes.start_refused(run, problem))
            return
        try:
            user = self._users.take(run.uid) if self._users is not None else None
            run_users.prepare_workdir(self.work_root, execution.workdir, user)
            as_user = {} if user is None else {"user": user, "group": user, "extra_groups": []}
            with self._spawn_lock:  # the orphan reaper must never see this child before it is known
                process = subprocess.Popen(
                    args, cwd=execution.workdir, env=self._process_env(run, execution.workdir, env),
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopping it stops its children too
                    **as_user,
                )
        except Exception as exc:  # noqa: BLE001 - whatever Popen refuses ends the Run; none may keep its slot
            self._finish(execution, outcomes.start_failed(run, args, exc))
            return
        self.pid_files.record(run, process.pid)  # so a successor can stop it if runtimed is killed
        with self._lock:  # `_stop` reads `process` under this lock: one of the two sees the other
            execution.process = process
            stopped_while_starting = execution.stopping is not None
        if stopped_while_starting:
            # A stop came while the process was being started (it saw no process to signal):
            # the process must not outlive it. `_follow` still drains and reaps it.
            _signal_group(process, signal.SIGKILL)
        thread = threading.Thread(target=self._follow, args=(execution,), name=f"run {run.label}", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _workdir(self, run: RunRef) -> Path:
        # The UID keeps a recreated Run of the same name out of its predecessor's directory.
        return self.work_root / run.namespace / f"{run.name}-{run.uid}"

    def _process_env(self, run: RunRef, workdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(self._env)
        env.update(extra or {})  # KRUNTIMES_DEVICES and the device env mapping (SPEC §7.7)
        env.update(HOME=str(workdir), TMPDIR=str(workdir), KRUNTIMES_RUN_NAMESPACE=run.namespace,
                   KRUNTIMES_RUN_NAME=run.name, KRUNTIMES_RUN_UID=run.uid)
        return env

    # -- following and ending --------------------------------------------------------

    def _follow(self, execution: _Execution) -> None:
        process = execution.process
        assert process is not None and process.stdout is not None
        prefix = f"{execution.run.label}: "
        # Children the process left behind would hold the pipe open and keep the Run
        # going after its process ended: once it exits, its process group is stopped.
        reaper = threading.Thread(target=_reap_leftovers, args=(process,), daemon=True)
        reaper.start()
        for raw in process.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            self._log(prefix + line)
            execution.tail.append(line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS] + "...")
        code = process.wait()
        reaper.join()
        if execution.stopping == "released":
            ended = outcomes.released(execution.run)
        elif execution.stopping == "interrupted":
            ended = outcomes.interrupted(execution.run)
        else:
            ended = outcomes.exited(execution.run, code, list(execution.tail), function=execution.function)
        self._finish(execution, ended)

    def _finish(self, execution: _Execution, ended: Ended) -> None:
        if self._executions.settle(execution.run.uid, execution) is None:
            return  # already reported
        self.pid_files.forget(execution.run.uid)
        if not self._keep:
            shutil.rmtree(execution.workdir, ignore_errors=True)
        if self._users is not None:
            self._users.give_back(execution.run.uid)  # after its files went: the next holder starts clean
        self._on_end(ended)

    def adopt(self, running: set[str]) -> set[str]:
        """Restart recovery: these Runs are Running here; the UIDs of those whose executions it found
        (none: a new executor has no processes)."""
        return set()

    def release(self, uid: str) -> bool:
        """Release a function Run: stop its process (if any) and report it released. False if unknown."""
        return self._stop(uid, "released", functions_only=True)

    def stop(self, uid: str) -> bool:
        """Stop a Run's execution because the Run ended elsewhere or was deleted; False if unknown."""
        return self._stop(uid, "interrupted", functions_only=False)

    def stop_all(self) -> None:
        """runtimed is stopping: stop every process; each Run ends Failed, saying runtimed stopped."""
        for run in self.active():
            self._stop(run.uid, "interrupted", functions_only=False)
        self.join()

    def _stop(self, uid: str, why: str, *, functions_only: bool) -> bool:
        with self._lock:
            execution = self._executions.get(uid)
            if execution is None or (functions_only and not execution.function):
                return False
            execution.stopping = why
            process = execution.process
        if process is None:  # not started (or still starting: `_start` then kills what it started)
            self._finish(execution, outcomes.released(execution.run) if why == "released"
                         else outcomes.interrupted(execution.run))
            return True
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(self._grace)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
        return True

    def reap_orphans(self) -> int:
        """Reap exited processes re-parented to runtimed; returns how many.

        A Run's process may leave children behind; once they exit they become zombies
        of whatever adopted them, and in a container that is runtimed (PID 1, or a
        child subreaper: see `become_subreaper`). Python reaps only its own `Popen`
        children, so without this they would pile up for the pod's lifetime. Only
        zombies that are not a current execution's process are reaped, so no
        `Popen.wait` ever loses its exit code. Linux only (reads /proc); elsewhere 0.
        """
        me, reaped = os.getpid(), 0
        with self._spawn_lock:
            own = {e.process.pid for e in self._executions.held() if e.process is not None}
            for pid in _zombie_children(me):
                if pid in own:
                    continue
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        reaped += 1
                except ChildProcessError:
                    pass
        return reaped

    def join(self, timeout: float | None = None) -> None:
        """Wait for the threads following processes (tests; shutdown)."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux prctl), so `reap_orphans` can reap them."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _zombie_children(parent: int) -> list[int]:
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    zombies = []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # the name in (...) may hold spaces
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[0] == "Z" and fields[1] == str(parent):
            zombies.append(int(entry))
    return zombies


def _reap_leftovers(process: subprocess.Popen[bytes]) -> None:
    process.wait()
    _signal_group(process, signal.SIGKILL)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):  # already gone, or nothing of ours left
        pass
