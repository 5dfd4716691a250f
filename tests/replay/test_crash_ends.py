"""verify tells an epoch ended by a crash with nothing missing from one whose crash lost records (SPEC §5)."""

from __future__ import annotations

import pytest

from replay import ends, errors, integrity

CASES = {
    "an epoch its writer ended says why": ("shutdown", None, [], "ended: shutdown"),
    "an epoch a restart closed, everything handed over stored, says nothing is missing": (
        "recovered", 120, [], "ended by a crash, nothing missing (handed over up to LSN 120)"),
    "an epoch a restart closed after a lost tail counts what was lost": (
        "recovered", 120, [errors.LostInCrash(101, 120, "lost")], "ended by a crash, 20 records lost"),
    "an epoch closed by a restart from before the handed-over mark says only that it crashed": (
        "recovered", None, [], "ended by a crash"),
}


@pytest.mark.parametrize(("reason", "handed", "problems", "expected"), CASES.values(), ids=CASES.keys())
def test_verify_names_how_an_epoch_ended(reason: str, handed: int | None, problems: list[errors.JournalDamage],
                                         expected: str) -> None:
    report = integrity.EpochReport(epoch="e1", first_lsn=1, head_lsn=121, state=ends.ENDED, end_reason=reason,
                                   handed_lsn=handed)
    for p in problems:
        report.add(p)
    assert ends.describe(report) == expected


def test_an_open_epoch_is_open() -> None:
    assert ends.describe(integrity.EpochReport(epoch="e1", first_lsn=1)) == ends.OPEN
