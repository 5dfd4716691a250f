"""`kruntimes.wire`'s typed times: every command and the UI read a time the same way (STYLE.md: it was parsed twice)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from kruntimes import wire

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "examples"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kruntimes.cli.main", *args], capture_output=True, text=True,
                          check=False, timeout=120)


@pytest.mark.parametrize("text, expected", [
    ("2026-11-29T10:00:00Z", datetime(2026, 11, 29, 10, tzinfo=timezone.utc)),
    ("2026-11-29T12:00:00.5+02:00", datetime(2026, 11, 29, 10, 0, 0, 500000, tzinfo=timezone.utc)),
    ("2026-11-29T10:00:00", datetime(2026, 11, 29, 10, tzinfo=timezone.utc)),
    ("2026-11-29", datetime(2026, 11, 29, tzinfo=timezone.utc)),
    (" now ", NOW),
    ("90m", NOW - timedelta(minutes=90)),
    ("2 d", NOW - timedelta(days=2)),
], ids=["RFC 3339 in UTC", "an offset and a fraction", "no zone is UTC", "a date is its midnight UTC", "now",
        "an age in minutes", "an age in days"])
def test_a_time_is_read_as_the_instant_it_names_in_utc(text: str, expected: datetime) -> None:
    parsed = wire.parse_when(text, now=NOW)
    assert parsed == expected and parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize("text", ["yesterday", "", "10x", "99999999999d", "2026-13-01", "0001-01-01T00:30:00+01:00"],
                         ids=["a word", "nothing", "an unknown unit", "an age beyond the calendar", "no such month",
                              "an instant before year 1 in UTC"])
def test_text_that_is_not_a_time_is_an_error_naming_the_option(text: str) -> None:
    with pytest.raises(wire.NotATime, match=r"^--since .* is not a time: use RFC 3339"):
        wire.parse_when(text, now=NOW, what="--since")


def test_an_age_beyond_the_calendar_is_a_one_line_error_in_history_not_a_traceback() -> None:
    result = _cli("history", "cycles", "--since", "99999999999d", "--journal", "sqlite:////nonexistent/j.db")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--since '99999999999d' is not a time" in result.stderr


def test_simulate_reads_now_as_history_reads_its_times() -> None:
    zoned = _cli("simulate", "-f", str(EXAMPLES / "cohort.yaml"), "--now", "2026-11-29T12:00:00Z", "--json")
    unzoned = _cli("simulate", "-f", str(EXAMPLES / "cohort.yaml"), "--now", "2026-11-29T12:00:00", "--json")
    assert zoned.returncode == unzoned.returncode == 0, unzoned.stderr
    assert json.loads(unzoned.stdout) == json.loads(zoned.stdout)
