"""What replay raises when the journal cannot be trusted, each naming the LSN and what is wrong.

Replay never guesses: a missing record, a checkpoint that disagrees with the
records before it, a record written by a newer schema, or a record the rebuilt
state cannot have produced stops the replay with one of these. A divergent
*decision* is not an error - it is the result replay exists to report.
"""

from __future__ import annotations


class ReplayError(Exception):
    """Base class: replay cannot give an answer."""


class CycleNotFound(ReplayError):
    """The cycle (or Run) asked for is not in the journal; a user's mistake, not damage."""


class JournalDamage(ReplayError):
    """The journal is damaged or tampered with at `lsn` (of `epoch`, once known); replaying past it would be
    silently wrong."""

    what = "damaged record"

    def __init__(self, lsn: int, message: str, *, epoch: str | None = None) -> None:
        self.lsn = lsn
        self.detail = message
        self.epoch = epoch
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"journal LSN {self.lsn}" if self.epoch is None else f"journal epoch {self.epoch} LSN {self.lsn}"
        return f"{where}: {self.what}: {self.detail}"

    def located(self, epoch: str) -> JournalDamage:
        """The same damage, named with the epoch it is in (LSNs are unique only within an epoch)."""
        if self.epoch is None:
            self.epoch = epoch
            self.args = (self._text(),)
        return self

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled across the verify process pool: rebuilt from its attributes, not from __init__'s arguments.
        return _restore, (type(self), self.args, self.__dict__)


def _restore(cls: type[JournalDamage], args: tuple[object, ...], state: dict[str, object]) -> JournalDamage:
    damage = cls.__new__(cls)
    damage.args = args
    damage.__dict__.update(state)
    return damage


class RecordGap(JournalDamage):
    """Records are missing: LSNs `lsn`..`last` are not in the journal."""

    what = "missing records"

    def __init__(self, lsn: int, last: int | None, message: str) -> None:
        super().__init__(lsn, message)
        self.last = last


class UnsupportedSchema(JournalDamage):
    """A record's schema_version is one this replay does not know how to read."""

    what = "unknown schema version"


class CorruptRecord(JournalDamage):
    """A record's payload does not match its SHA-256, or is not the JSON its kind needs."""

    what = "corrupt record"


class CheckpointMismatch(JournalDamage):
    """A checkpoint's state differs from the state the records before it produce."""

    what = "checkpoint disagrees with the records before it"

    def __init__(self, lsn: int, differences: list[str]) -> None:
        shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
        super().__init__(lsn, shown)
        self.differences = differences


class InconsistentHistory(JournalDamage):
    """A record the rebuilt state cannot have produced (a reserve that does not fit, a drop never derived, ...)."""

    what = "record inconsistent with the records before it"


class MissingStart(JournalDamage):
    """An epoch does not begin with its incarnation record: its start was deleted."""

    what = "missing start of epoch"


class BrokenLink(JournalDamage):
    """A record's chain link does not follow from the record before it in its epoch."""

    what = "broken link"


class MissingEnd(JournalDamage):
    """An epoch that is not the newest has no end record: its tail may be lost."""

    what = "missing end of epoch"


class HeadMismatch(JournalDamage):
    """The epoch's stored head is not its last stored record (or there is no head at all)."""

    what = "stored head disagrees with the records"


class HeadBehindPublished(JournalDamage):
    """The stored head is behind a head that was published, or the chain no longer passes through it."""

    what = "head behind the published one"


class KeyMismatch(JournalDamage):
    """The epoch's links cannot be checked with the key given (none, another one), or are unkeyed despite a key."""

    what = "key mismatch"


class SchemaDamage(JournalDamage):
    """A table or column the journal's schema revision has is missing: dropped, so nothing in it can be proven."""

    what = "damaged schema"

    def __init__(self, message: str) -> None:
        super().__init__(0, message)

    def _text(self) -> str:
        return f"journal schema: {self.what}: {self.detail}"
