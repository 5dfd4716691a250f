"""Pid files of the Runs' processes, and stopping what a killed runtimed left running (SPEC §4.1, amended 2026-12-04).

A runtimed killed outright (SIGKILL, OOM) has no say in what happens to its Runs'
processes: each leads a process group of its own, so they outlive it. Its successor
finds those Runs Running with no process of its own and ends them `ExecutionLost`;
left at that, it would then admit new Runs on top of processes still running (four
processes on a two-slot pod). So the executor records each process it starts in a
pid file in runtimed's state directory, and a starting runtimed stops every process
group those files name before it counts their capacity free.

A pid alone is no identity: after a restart the number may belong to someone else.
A file records the process's start time (in clock ticks since boot, from
/proc/<pid>/stat) and the boot id; a live process with another start time is a
stranger and is left alone. A dead leader's group is still signalled (a pid is not
reused while a group of that number exists), so children it left behind stop too.
Linux only (/proc); elsewhere nothing is recorded and nothing stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kruntimes.runtimed.outcomes import RunRef

log = logging.getLogger(__name__)

SUFFIX = ".pid.json"
POLL_SECONDS = 0.05
KILL_WAIT_SECONDS = 30.0  # after SIGKILL; only a process in uninterruptible sleep takes longer


@dataclass(frozen=True, slots=True)
class Recorded:
    """One process a runtimed started for a Run, as its pid file says."""

    run: RunRef
    pid: int
    start_ticks: int
    boot_id: str


class PidFiles:
    """The pid files of one runtimed's state directory."""

    def __init__(self, directory: Path | None, *, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._sleep, self._monotonic = sleep, monotonic
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def record(self, run: RunRef, pid: int) -> None:
        """Write the pid file of a process just started (a failure is logged: the process still runs)."""
        if self.directory is None:
            return
        ticks = start_ticks(pid)
        if ticks is None:
            return  # gone already, or not Linux
        body = {"namespace": run.namespace, "name": run.name, "uid": run.uid, "pid": pid, "startTicks": ticks,
                "bootId": boot_id()}
        path = self._path(run.uid)
        try:
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(body, sort_keys=True), encoding="utf-8")
            os.replace(temporary, path)
        except OSError as exc:
            log.warning("writing the pid file of Run %s failed: %s", run.label, exc)

    def forget(self, uid: str) -> None:
        """The Run's process ended and was reaped: its file goes. Idempotent."""
        if self.directory is None:
            return
        try:
            self._path(uid).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("removing a pid file from %s failed: %s", self.directory, exc)

    def recorded(self) -> list[Recorded]:
        """What the files say, in Run order; an unreadable file is removed (it can name no process safely)."""
        if self.directory is None:
            return []
        found = []
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                found.append(Recorded(RunRef(str(data["namespace"]), str(data["name"]), str(data["uid"])),
                                      int(data["pid"]), int(data["startTicks"]), str(data["bootId"])))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("an unreadable pid file %s is removed: %s", path.name, exc)
                path.unlink(missing_ok=True)
        return sorted(found, key=lambda r: (r.run.namespace, r.run.name, r.run.uid))

    def stop_predecessors(self, grace_seconds: float) -> list[RunRef]:
        """Stop every process group a previous runtimed left running; returns the Runs whose processes were stopped.

        SIGTERM to each group, SIGKILL to what is left after `grace_seconds`, then wait
        until none of them has a live member. Every file is removed afterwards.
        """
        stopped: list[Recorded] = []
        for entry in self.recorded():
            if self._still_ours(entry):
                _signal_group(entry.pid, signal.SIGTERM)
                stopped.append(entry)
            else:
                self.forget(entry.run.uid)
        deadline = self._monotonic() + grace_seconds
        while any(group_alive(e.pid) for e in stopped) and self._monotonic() < deadline:
            self._sleep(POLL_SECONDS)
        for entry in stopped:
            if group_alive(entry.pid):
                _signal_group(entry.pid, signal.SIGKILL)
        deadline = self._monotonic() + KILL_WAIT_SECONDS
        while any(group_alive(e.pid) for e in stopped):
            if self._monotonic() >= deadline:  # unkillable (uninterruptible sleep): say so, do not hang
                log.error("processes a previous runtimed left running survive SIGKILL; their Runs end anyway")
                break
            self._sleep(POLL_SECONDS)
        for entry in stopped:
            log.warning("stopped the process of Run %s that a previous runtimed left running", entry.run.label)
            self.forget(entry.run.uid)
        return [e.run for e in stopped]

    def _still_ours(self, entry: Recorded) -> bool:
        if entry.boot_id != boot_id():
            return False  # the machine restarted: no process of that boot is left
        ticks = start_ticks(entry.pid)
        if ticks is not None:
            return ticks == entry.start_ticks  # alive: ours only if it started when ours did
        return group_alive(entry.pid)  # the leader is gone; its group (never reused while alive) may not be

    def _path(self, uid: str) -> Path:
        assert self.directory is not None
        return self.directory / (hashlib.sha256(uid.encode("utf-8", "surrogatepass")).hexdigest()[:32] + SUFFIX)


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()  # the name in (...) may hold spaces
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """When the process started (field 22 of /proc/<pid>/stat); None when it is gone or a zombie."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] == "Z":
        return None
    return int(fields[19])


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process belongs to process group `pgid`."""
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return False
    for pid in entries:
        fields = _stat_fields(pid)
        if fields is not None and len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
