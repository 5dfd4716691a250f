"""Each Run as a user of its own, where the Runtime Pod gives a range of them (SPEC §4.1, amended 2026-12-04).

Runs on one pod are tenants of each other: a Run must not read a co-tenant's working
directory nor signal its processes. A directory of mode 0700 keeps out other users
only, so a Runtime Server that may change user (it runs as root, or with CAP_SETUID,
CAP_SETGID, CAP_CHOWN and CAP_KILL) is given a range (`--run-uids 20000-20999`) and
runs each Run as the lowest user of it that no executing Run holds, with that user's
own group and no supplementary groups; its working directory belongs to that user.
Without a range every Run is the server's own user: the directory modes still keep
out anyone else, but not co-tenants (docs/runtimed.md says so).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


class RunUsersExhausted(Exception):
    """Every user of the range belongs to an executing Run."""


class BadUserRange(ValueError):
    """A `--run-uids` value that is not `FIRST-LAST` of unprivileged user ids."""


def parse_range(text: str) -> range:
    """`"20000-20999"` → range(20000, 21000); user 0 (root) is never a Run's user."""
    first, sep, last = text.partition("-")
    try:
        low, high = int(first), int(last if sep else first)
    except ValueError as exc:
        raise BadUserRange(f"{text!r} is not FIRST-LAST (e.g. 20000-20999)") from exc
    if not 0 < low <= high < 2**31:
        raise BadUserRange(f"{text!r}: the users must be 1 or more, FIRST not above LAST")
    return range(low, high + 1)


class RunUsers:
    """The users of a range, each held by at most one executing Run."""

    def __init__(self, users: range) -> None:
        self._users = users
        self._held: dict[str, int] = {}  # Run UID -> its user
        self._lock = threading.Lock()

    def take(self, run_uid: str) -> int:
        with self._lock:
            if run_uid in self._held:
                return self._held[run_uid]
            busy = set(self._held.values())
            user = next((u for u in self._users if u not in busy), None)
            if user is None:
                raise RunUsersExhausted(f"all {len(self._users)} users of the range {self._users.start}-"
                                        f"{self._users.stop - 1} belong to executing Runs")
            self._held[run_uid] = user
            return user

    def give_back(self, run_uid: str) -> None:
        with self._lock:
            self._held.pop(run_uid, None)


class UnsafeWorkdir(OSError):
    """A path of a Run's working directory is a symbolic link: another Run may have planted it."""


def prepare_workdir(root: Path, workdir: Path, user: int | None) -> None:
    """Create a Run's working directory, 0700 and (with a user) owned by it; its parents let others pass, not list.

    The work volume itself may belong to someone else (an emptyDir is root's, mode 0777):
    its mode is set where this process may. Nothing on the way may be a symbolic link,
    or a server that may change owners would hand a Run whatever the link names.
    """
    for parent in reversed([p for p in workdir.parents if p == root or root in p.parents]):
        parent.mkdir(exist_ok=True, mode=0o711)
        _refuse_link(parent)
        try:
            os.chmod(parent, 0o711)
        except PermissionError:
            if parent != root:
                raise
    workdir.mkdir(exist_ok=True, mode=0o700)
    _refuse_link(workdir)
    os.chmod(workdir, 0o700)  # mkdir's mode passes through the umask
    if user is not None:
        os.chown(workdir, user, user, follow_symlinks=False)


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise UnsafeWorkdir(f"{path} is a symbolic link; a Run's working directory is never one")
