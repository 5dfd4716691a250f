"""verify tells an epoch ended by a crash with nothing missing from one whose crash lost its unacknowledged tail.

Neither is damage (SPEC §5 "Crash vs loss": verify fails only where records are missing): the lost tail
is named in the epoch's state.
"""

from __future__ import annotations

import pytest

from replay import ends, integrity

CASES = {
    "an epoch its writer ended says why": ("shutdown", None, None, "ended: shutdown"),
    "an epoch a restart closed, everything handed over stored, says nothing is missing": (
        "recovered", 120, None, "ended by a crash, nothing missing (handed over up to LSN 120)"),
    "an epoch a restart closed after a lost tail counts what was lost": (
        "recovered", 120, (101, 120), "ended by a crash, 20 unacknowledged records lost"),
    "an epoch closed by a restart from before the handed-over mark says only that it crashed": (
        "recovered", None, None, "ended by a crash"),
}


@pytest.mark.parametrize(("reason", "handed", "lost", "expected"), CASES.values(), ids=CASES.keys())
def test_verify_names_how_an_epoch_ended(reason: str, handed: int | None, lost: tuple[int, int] | None,
                                         expected: str) -> None:
    report = integrity.EpochReport(epoch="e1", first_lsn=1, head_lsn=121, state=ends.ENDED, end_reason=reason,
                                   handed_lsn=handed, lost_in_crash=lost)
    assert ends.describe(report) == expected and report.ok


def test_an_open_epoch_is_open() -> None:
    assert ends.describe(integrity.EpochReport(epoch="e1", first_lsn=1)) == ends.OPEN
