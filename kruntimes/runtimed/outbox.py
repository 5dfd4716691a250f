"""Run ends not yet written, kept on the pod's disk until the API has them (SPEC §4.1, amended 2026-12-04).

A process's exit is a fact that happens once: if runtimed cannot write it (the API
hiccups, or runtimed restarts before it could), re-running the Run is no way to get
it back. So every end is put here first, one small file per Run, written atomically
(a temporary file, fsync, rename, fsync of the directory), and removed only once the
API has the Run's terminal status. A restarted runtimed reads what is left and writes
those ends, with the time they happened, instead of calling the Runs lost.

The directory is runtimed's own state directory on a volume that outlives the
container (the Runtime Pod's emptyDir), never a Run's working directory. Without a
directory (tests, the in-memory demo) the outbox keeps nothing across restarts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from kruntimes.api import ingest
from kruntimes.runtimed.outcomes import Ended, RunRef
from kruntimes.scheduler.status import rfc3339

log = logging.getLogger(__name__)

SUFFIX = ".end.json"
TEMPORARY = ".tmp"


@dataclass(frozen=True, slots=True)
class PendingEnd:
    """An end kept until written, with the time it happened (the Run's `completionTime`)."""

    ended: Ended
    at: datetime


class Outbox:
    """The pending ends of one runtimed, one file per Run UID. Thread-safe: each put writes a temporary
    file of its own and renames it into place, so two threads keeping an end of the same Run at once
    (recovery and the Runtime Server's hand-over) leave one whole file, the later one's."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            for left in self.directory.glob(f"*{TEMPORARY}"):  # a predecessor killed mid-put: never renamed
                left.unlink(missing_ok=True)

    def put(self, pending: PendingEnd) -> None:
        """Keep an end until `remove`; a disk that refuses is logged, the end is still written from memory."""
        if self.directory is None:
            return
        path = self._path(pending.ended.run.uid)
        temporary = None
        try:
            fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=path.name + ".", suffix=TEMPORARY)
            with open(fd, "w", encoding="utf-8") as f:
                json.dump(_encode(pending), f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
            temporary = None
            _sync_directory(self.directory)
        except OSError as exc:
            log.warning("keeping the end of Run %s on disk failed: %s; it is written from memory only",
                        pending.ended.run.label, exc)
        finally:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)

    def remove(self, uid: str) -> None:
        """The API has the end (or the Run is gone): forget it. Idempotent."""
        if self.directory is None:
            return
        try:
            self._path(uid).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("removing a written end from %s failed: %s", self.directory, exc)

    def pending(self) -> dict[str, PendingEnd]:
        """Every end kept here, by Run UID; an unreadable file is set aside, not fatal."""
        if self.directory is None:
            return {}
        found: dict[str, PendingEnd] = {}
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            try:
                entry = _decode(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("an unreadable pending end %s is set aside: %s", path.name, exc)
                path.rename(path.with_suffix(".unreadable"))
                continue
            found[entry.ended.run.uid] = entry
        return found

    def _path(self, uid: str) -> Path:
        assert self.directory is not None
        # Hashed: a UID is only a string to runtimed, never a path.
        return self.directory / (hashlib.sha256(uid.encode("utf-8", "surrogatepass")).hexdigest()[:32] + SUFFIX)


def _encode(pending: PendingEnd) -> dict[str, object]:
    e = pending.ended
    return {"namespace": e.run.namespace, "name": e.run.name, "uid": e.run.uid, "phase": e.phase,
            "reason": e.reason, "message": e.message, "exitCode": e.exit_code, "released": e.released,
            "at": rfc3339(pending.at)}


def _decode(data: dict[str, object]) -> PendingEnd:
    at = ingest.parse_time(data["at"])
    exit_code = data.get("exitCode")
    if at is None or not all(isinstance(data[k], str) for k in ("namespace", "name", "uid", "phase", "reason",
                                                                  "message")):
        raise ValueError("not a pending end")
    ended = Ended(RunRef(str(data["namespace"]), str(data["name"]), str(data["uid"])), str(data["phase"]),
                  str(data["reason"]), str(data["message"]), exit_code if isinstance(exit_code, int) else None,
                  data.get("released") is True)
    return PendingEnd(ended, at)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
