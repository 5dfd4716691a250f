"""Exceptions raised at the journal's boundary.

Why a module of its own: the writer, the backends and callers (scheduler, CLI, replay)
all need to tell "this record is bad" from "the database is away" from "this LSN is
taken" without importing SQLAlchemy or psycopg error classes. Each type chains the
driver's error as its ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Sequence


class JournalError(Exception):
    """Base class of every journal error."""


class RecordRejected(JournalError, ValueError):
    """A record cannot be stored as it is: fix the producer, retrying will not help.

    ``reason`` is a bounded label (``malformed`` or ``oversized``) used for metrics.
    """

    def __init__(self, message: str, *, reason: str = "malformed", lsn: int | None = None) -> None:
        where = f"record lsn={lsn}: " if lsn is not None else ""
        super().__init__(where + message)
        self.reason = reason
        self.lsn = lsn


class DuplicateRecord(JournalError):
    """A key (epoch, LSN) is already in the journal.

    ``keys`` lists the conflicting (epoch, LSN) pairs when they are known (always in
    ``skip_existing`` mode, where only rows whose stored content or link differs
    count); ``lsns`` their LSNs.
    """

    def __init__(self, message: str, *, keys: Sequence[tuple[str, int]] = ()) -> None:
        super().__init__(message)
        self.keys = tuple(keys)
        self.lsns = tuple(lsn for _epoch, lsn in self.keys)


class JournalUnavailable(JournalError):
    """The journal database cannot be reached or refused the operation; retry later."""


class CorruptRecord(JournalError):
    """A stored record no longer matches its content hash (or cannot be decoded)."""


class SpoolUnwritable(JournalError):
    """The local spool file cannot be written (disk full, read-only, permissions)."""


class JournalTimeout(JournalUnavailable):
    """The journal database did not answer within the writer's bound (``deadline``): counted as away."""
