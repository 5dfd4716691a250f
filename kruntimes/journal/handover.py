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

What a crash can still lose unseen: the records the scheduler had appended but not yet
sent to the writer process (its sender writes every 25 ms, ``process.LINGER_SECONDS``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

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


def read(spool_path: str | os.PathLike[str], epoch: str) -> int | None:
    """The epoch's mark: the highest LSN its writer process received; None when there is none."""
    path = path_for(spool_path, epoch)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.error("journal: cannot read the handed-over mark %s: %s", path, exc)
        return None
    return int(text) if text.strip().isdigit() else None


def forget(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.error("journal: cannot remove the handed-over mark %s: %s", path, exc)
