"""How an epoch ended: by its writer, by a crash its replica's restart closed, or not (yet) at all.

SPEC §5 "Several writers, one truth" and "Crash vs loss" (amended 2026-12-04). An
epoch closes with an ``end`` record. A scheduler killed mid-term writes none; the
replica's next start closes the epoch for it (``end`` {"reason": "recovered"}) after
its last stored record, and says in ``handed_lsn`` how far the killed process had
handed records to its writer (``kruntimes.journal.handover``). So ``verify`` tells:

- ended by a crash, nothing missing: the end follows the stored records, and every
  record handed over is among them;
- ended by a crash with records missing: the end comes after a gap, the LSNs the
  writer had received and never stored - named, and a problem (exit 3), but its link
  still follows from the last stored record;
- no end while a newer epoch began: the writer died and its replica never came back
  (or the end record was deleted), its tail may be lost.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from replay import errors

if TYPE_CHECKING:
    from replay.integrity import EpochReport

OPEN = "open"
ENDED = "ended"
BEFORE_EPOCHS = "before-epochs"
#: The end reason a replica's restart writes when it closes the epoch its killed process left open.
RECOVERED = "recovered"


def handed(end_payload: str) -> int | None:
    """What an end record written for a crashed epoch says was handed to its writer (``handed_lsn``)."""
    try:
        value = json.loads(end_payload).get("handed_lsn")
    except (ValueError, AttributeError):
        return None
    return value if type(value) is int else None


def lost_tail(first: int, last: int) -> errors.LostInCrash:
    """The records a crash lost, as the end record after them names them."""
    span = f"LSN {first}" if first == last else f"LSNs {first}..{last} ({last - first + 1} records)"
    return errors.LostInCrash(first, last, f"{span}: handed to the writer of the epoch's replica, which was killed "
                                           "before it stored them (the replica's restart closed the epoch after them)")


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
    lost = sum((p.last or p.lsn) - p.lsn + 1 for p in report.problems if isinstance(p, errors.LostInCrash))
    if lost:
        return f"ended by a crash, {lost} record{'s' if lost != 1 else ''} lost"
    if report.handed_lsn is None:
        return "ended by a crash"
    return f"ended by a crash, nothing missing (handed over up to LSN {report.handed_lsn})"
