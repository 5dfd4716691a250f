"""How an epoch ended: by its writer, by a crash its replica's restart closed, or not (yet) at all.

SPEC §5 "Several writers, one truth" and "Crash vs loss" (amended 2026-12-04). An
epoch closes with an ``end`` record. A scheduler killed mid-term writes none; the
replica's next start closes the epoch for it (``end`` {"reason": "recovered"}) after
its last stored record, and says in ``handed_lsn`` how far the killed process had
handed records to its writer (``kruntimes.journal.write.handover``). So ``verify`` tells:

- ended by a crash, nothing missing: the end follows the stored records, and every
  record handed over is among them;
- ended by a crash, its last records lost: the end comes after a gap it accounts for,
  the LSNs its writer had received and not yet made durable - records never
  acknowledged, at most one write timeout's worth (SPEC §5 "Availability"). Named, in
  the epoch's state and ``lost_in_crash``, not damage: nothing acknowledged is missing,
  and the end's link still follows from the last stored record;
- ended by a crash before any of its records was stored: the epoch's one record is
  the end, chained from its start, naming the LSNs lost (``first_lsn``..``handed_lsn``),
  named as above;
- records missing: any other gap (integrity's problems, exit 3);
- no end while a newer epoch began: the writer died and its replica never came back
  (or the end record was deleted), its tail may be lost.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from replay import errors

OPEN = "open"
ENDED = "ended"
BEFORE_EPOCHS = "before-epochs"
#: The end reason a replica's restart writes when it closes the epoch its killed process left open.
RECOVERED = "recovered"


class EpochReport(Protocol):
    """What this module reads and sets of an epoch's report (`integrity.EpochReport`, which imports this module)."""

    first_lsn: int
    state: str
    end_reason: str | None
    handed_lsn: int | None
    lost_in_crash: tuple[int, int] | None

    def add(self, problem: errors.JournalDamage) -> None: ...


def handed(end_payload: str) -> int | None:
    """What an end record written for a crashed epoch says was handed to its writer (``handed_lsn``)."""
    try:
        value = json.loads(end_payload).get("handed_lsn")
    except (ValueError, AttributeError):
        return None
    return value if type(value) is int else None


def lost_whole(end_payload: str, lsn: int) -> tuple[int, int] | None:
    """The LSNs an end record at ``lsn`` says its epoch lost whole (none of its records was stored), or None.

    Such an end is the epoch's only record, chained from its start, written by the
    restart that closed it: ``first_lsn`` (where its process began numbering) through
    ``handed_lsn``, which it directly follows.
    """
    try:
        payload = json.loads(end_payload)
    except ValueError:
        return None
    if not isinstance(payload, dict) or payload.get("reason") != RECOVERED:
        return None
    first, handed = payload.get("first_lsn"), payload.get("handed_lsn")
    if type(first) is not int or type(handed) is not int or handed != lsn - 1 or not 0 < first <= handed:
        return None
    return first, handed


def check(report: EpochReport, row: Any, ended_at: int | None, newest: bool) -> None:
    """Set the epoch's state from its end record (at ``ended_at``) and its head row; add what is wrong."""
    if ended_at is not None:
        report.state = ENDED
        if row.head_lsn is not None and row.end_lsn != ended_at:
            report.add(errors.HeadMismatch(ended_at, f"the epoch's end record is at LSN {ended_at}, its head row "
                                                     f"says {'no end' if row.end_lsn is None else row.end_lsn}"))
        return
    if row.end_reason == BEFORE_EPOCHS:
        report.state = BEFORE_EPOCHS
        return
    if row.end_lsn is not None:
        report.add(errors.MissingEnd(row.end_lsn, f"the head row says the epoch ended at LSN {row.end_lsn} "
                                                  f"({row.end_reason}), but its end record is not in the journal"))
        return
    if newest:
        report.state = OPEN
        return
    lsn = row.head_lsn if row.head_lsn is not None else report.first_lsn
    report.add(errors.MissingEnd(lsn, "the epoch has no end record and a newer epoch began: its writer died and "
                                      "did not come back, its tail may be lost"))


def describe(report: EpochReport) -> str:
    """The epoch's state in words for verify's table: ``ended by a crash`` for an epoch a restart closed."""
    if report.state != ENDED or report.end_reason is None:
        return report.state
    if report.end_reason != RECOVERED:
        return f"ended: {report.end_reason}"
    if report.lost_in_crash is not None:
        first, last = report.lost_in_crash
        return f"ended by a crash, {last - first + 1} unacknowledged record{'s' if last > first else ''} lost"
    if report.handed_lsn is None:
        return "ended by a crash"
    return f"ended by a crash, nothing missing (handed over up to LSN {report.handed_lsn})"
