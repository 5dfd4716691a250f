"""The handed-over mark: how far the scheduler has handed an epoch's records to its writer process, on disk.

SPEC §5 "Availability" and "Crash vs loss" (amended 2026-12-04): a record handed to
the writer is durable - in the database or the spool - within the write timeout
(``deadline``), and a crash that still loses a tail must be visible to ``verify``. A
replica killed as a whole (its writer process with it) loses what its writer had
received and not yet made durable: at most one write timeout's worth of records. So
the writer process notes, before it takes a message's records, the highest LSN it has
received of its epoch, in ``<spool>.handed.<epoch>`` (rewritten in place and
fdatasync'd: one small write per message, at most ~40 a second). When the replica
restarts and closes that epoch (``end`` {"reason": "recovered"}, ``spool_drain``), the
mark says what the stored head must reach: an end record after a head at or past the
mark says "ended by a crash, nothing missing"; one after a shorter head names the
records handed over and lost, and ``verify`` reports them.

The scheduler's own mark (``Numbered``): the records it has numbered and not yet sent to
the writer process (its sender writes every 25 ms, ``process.LINGER_SECONDS``, later if the
pipe is full) die with it. So the recorder stores each LSN, before it hands the record
over, in a file mapped into its memory, ``<spool>.numbered.<epoch>``: a store to memory,
no system call, which the kernel keeps when the process is killed (SIGKILL, the OOM
killer). The recovered end record takes the higher of the two marks, so verify names
those records too. Unseen can only be a loss in a crash of the machine itself, whose
page cache goes with it: then the numbered mark may be older (it is never synced), and
what the writer process had received is still named by its fdatasync'd mark.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

log = logging.getLogger("kruntimes.journal.handover")  # the name operators' log configuration knows

_WIDTH = 20  # decimal digits of a mark: fixed, so that a rewrite in place never leaves a longer old one behind


def path_for(spool_path: str | os.PathLike[str], epoch: str) -> Path:
    return Path(f"{os.fspath(spool_path)}.handed.{epoch}")


class Mark:
    """The writer process's mark of one epoch: ``advance`` before its writer takes a message's records."""

    def __init__(self, spool_path: str | os.PathLike[str], epoch: str) -> None:
        self.epoch = epoch
        self.path = path_for(spool_path, epoch)
        self.lsn = read(spool_path, epoch) or 0  # a writer process restarted mid-epoch goes on from its mark
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    def advance(self, handed: Iterable[Any]) -> None:
        """Note the highest LSN of this epoch among ``handed`` (records, in LSN order) if it is new."""
        highest = max((r.lsn for r in handed if r.incarnation == self.epoch), default=0)
        if highest <= self.lsn:
            return
        try:
            os.pwrite(self._fd, f"{highest:0{_WIDTH}d}\n".encode(), 0)
            os.fdatasync(self._fd)
        except OSError as exc:  # the records still go on; a crash now would lose them unseen
            log.error("journal: cannot write the handed-over mark %s: %s", self.path, exc)
            return
        self.lsn = highest

    def close(self, *, ended: bool) -> None:
        """Close the file; an epoch whose end record is durable needs no mark any more."""
        os.close(self._fd)
        if ended:
            forget(self.path)


def numbered_path_for(spool_path: str | os.PathLike[str], epoch: str) -> Path:
    return Path(f"{os.fspath(spool_path)}.numbered.{epoch}")


class Numbered:
    """The scheduler's mark of one epoch: ``view[0] = lsn`` before the recorder hands record ``lsn`` over.

    A file of two int64 mapped shared: the highest LSN numbered, then the epoch's first
    LSN (written once, here), so that recovery can name what an epoch lost even when
    not one of its records was stored. The store lands in the page cache, which outlives
    the process. Native byte order: only this machine's recovery reads it (``read_numbered``).
    """

    def __init__(self, spool_path: str | os.PathLike[str], epoch: str, *, first_lsn: int | None = None) -> None:
        self.path = numbered_path_for(spool_path, epoch)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, _NUMBERED_BYTES)
            self._map = mmap.mmap(fd, _NUMBERED_BYTES)
        finally:
            os.close(fd)
        self.view = memoryview(self._map).cast(_NUMBERED.format)
        if first_lsn is not None:
            self.view[1] = first_lsn

    def close(self, *, ended: bool) -> None:
        """Unmap; an epoch whose end record was handed over needs no mark any more."""
        self.view.release()
        self._map.close()
        if ended:
            forget(self.path)


_NUMBERED = memoryview(bytes(8)).cast("q")  # the mark's layout: native int64s, the highest LSN numbered first
_NUMBERED_BYTES = 2 * _NUMBERED.itemsize  # then the epoch's first LSN (a mark from before it holds one int64)


def _numbered(spool_path: str | os.PathLike[str], epoch: str, slot: int) -> int | None:
    data = _contents(numbered_path_for(spool_path, epoch))
    if data is None or len(data) not in (_NUMBERED.itemsize, _NUMBERED_BYTES) or len(data) <= slot * _NUMBERED.itemsize:
        return None
    value = memoryview(data).cast(_NUMBERED.format)[slot]
    return value if value > 0 else None


def read_numbered(spool_path: str | os.PathLike[str], epoch: str) -> int | None:
    """The highest LSN the scheduler numbered in ``epoch`` (None when there is no mark)."""
    return _numbered(spool_path, epoch, 0)


def first_numbered(spool_path: str | os.PathLike[str], epoch: str) -> int | None:
    """The first LSN of ``epoch``, as its session noted it when it began (None when no mark says)."""
    return _numbered(spool_path, epoch, 1)


def marked_at(spool_path: str | os.PathLike[str], epoch: str) -> datetime | None:
    """When the epoch's marks last changed (the newer of the two; None without marks): about when it died.

    A mapped file's time lags its last store by up to the kernel's writeback interval,
    so this is at or before the kill, never after it.
    """
    times = []
    for path in (path_for(spool_path, epoch), numbered_path_for(spool_path, epoch)):
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    return datetime.fromtimestamp(max(times), timezone.utc) if times else None


def handed(spool_path: str | os.PathLike[str], epoch: str) -> int | None:
    """How far the epoch's records were handed over: the higher of the scheduler's and its writer's marks."""
    marks = [m for m in (read(spool_path, epoch), read_numbered(spool_path, epoch)) if m is not None]
    return max(marks) if marks else None


def forget_all(spool_path: str | os.PathLike[str], epoch: str) -> None:
    """Remove both marks of an epoch that is closed."""
    forget(path_for(spool_path, epoch))
    forget(numbered_path_for(spool_path, epoch))


def read(spool_path: str | os.PathLike[str], epoch: str) -> int | None:
    """The epoch's mark: the highest LSN its writer process received; None when there is none."""
    data = _contents(path_for(spool_path, epoch))
    return int(data) if data is not None and data.strip().isdigit() else None


def _contents(path: Path) -> bytes | None:
    """A mark file's bytes; None when there is none (or it cannot be read: logged)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.error("journal: cannot read the mark %s: %s", path, exc)
        return None


def forget(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.error("journal: cannot remove the handed-over mark %s: %s", path, exc)
