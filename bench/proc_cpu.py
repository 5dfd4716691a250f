"""Where a machine's CPU went over a measurement: every process's CPU time, read from /proc (Linux).

A benchmark of a whole system on one shared machine (the API server, etcd, the
scheduler, its binder and journal writer processes, the benchmark itself) is bound by
what all of them spend together; the scheduler's own `os.times()` shows one part.
`snapshot()` before and after, then `spent(before, after)` gives seconds of CPU by role.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
Snapshot = dict[int, tuple[str, float]]  # pid -> (role, CPU seconds so far)
ROLES = ("kube-apiserver", "etcd", "this process", "binder processes", "journal writer", "kube-scheduler",
         "other")


def role(pid: int, cmdline: str) -> str:
    if pid == os.getpid():
        return "this process"
    for name in ("kube-apiserver", "kube-scheduler", "etcd"):
        if f"/{name} " in cmdline or cmdline.startswith(f"{name} "):
            return name
    if "forkserver" in cmdline:
        return "binder processes"
    if "kruntimes.journal" in cmdline:
        return "journal writer"
    return "other"


def cpu_of(pid: int) -> float:
    """CPU seconds one process has used: its threads' scheduler run times, in nanoseconds
    (/proc/PID/task/*/schedstat), where the kernel keeps them; else its clock ticks
    (/proc/PID/stat), which at 10 ms a tick read a short run's few ms as 0. OSError if it is gone."""
    try:
        return sum(int((task / "schedstat").read_text().split()[0]) for task in Path(f"/proc/{pid}/task").iterdir()) / 1e9
    except (ValueError, IndexError):
        return _ticks(Path(f"/proc/{pid}/stat").read_text())


def _ticks(stat: str) -> float:
    """User and system CPU seconds from a /proc/PID/stat line (clock ticks)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def snapshot() -> Snapshot:
    taken: Snapshot = {}
    for entry in Path("/proc").iterdir() if Path("/proc/stat").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone in between
        taken[int(entry.name)] = (role(int(entry.name), cmdline), _ticks(stat))
    return taken


def spent(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds by role between two snapshots (a process that ended in between is not counted)."""
    totals = dict.fromkeys(ROLES, 0.0)
    for pid, (name, seconds) in after.items():
        totals[name] += seconds - (before[pid][1] if pid in before and before[pid][0] == name else 0.0)
    return totals


def line(totals: dict[str, float], wall: float) -> str:
    shown = [f"{name} {seconds:.1f}" for name, seconds in totals.items() if seconds >= 0.05]
    return f"{sum(totals.values()):.1f} s ({sum(totals.values()) / wall:.2f} cores): " + ", ".join(shown)
