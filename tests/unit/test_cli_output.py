"""`kruntimes.cli.output` and `kruntimes.scores`: how every listing prints."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from kruntimes import scores, wire
from kruntimes.cli import output
from kruntimes.cli.output import Column, Listing

LONG_POD = "python-runtime-with-a-very-long-generated-name-0000000000000042"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    output.add_options(parser)
    return parser.parse_args(list(argv))


def _listing() -> Listing:
    table = Listing([Column("LSN", right=True), Column("POD", name=True), Column("TOTAL", right=True),
                     Column("LeastLoaded", optional=True), Column("SNAPSHOT", wide_only=True),
                     Column("REASON")], title="Cycles", legend="a legend")
    table.add(12, LONG_POD, 100, "100 (1/40 Σ1/40) ×1", 7, "the reason why this Run went where it went, at length")
    return table


@pytest.mark.parametrize("width", [60, 80, 120])
def test_a_table_never_cuts_or_wraps_a_pod_name_whatever_the_width(width: int,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    output.render(_listing(), _args(), width=width)
    out = capsys.readouterr().out
    assert any(LONG_POD in line for line in out.splitlines())
    assert "SNAPSHOT" not in out  # a wide-only column


def test_a_narrow_table_drops_optional_columns_before_wrapping(capsys: pytest.CaptureFixture[str]) -> None:
    output.render(_listing(), _args(), width=200)
    assert "LeastLoaded" in capsys.readouterr().out
    output.render(_listing(), _args(), width=100)
    assert "LeastLoaded" not in capsys.readouterr().out


def test_wide_shows_every_column_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    output.render(_listing(), _args("-o", "wide"), width=60)
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if LONG_POD in line)
    assert "SNAPSHOT" in "\n".join(lines) and "at length" in row and "Σ1/40" in row


def test_no_headers_prints_only_the_rows(capsys: pytest.CaptureFixture[str]) -> None:
    output.render(_listing(), _args("--no-headers"), width=200)
    out = capsys.readouterr().out
    assert out.strip().startswith("12") and "POD" not in out and "Cycles" not in out and "legend" not in out


def test_json_is_the_old_spelling_of_output_json() -> None:
    assert _args("--json").output == "json" and output.structured(_args("-o", "yaml"))


def test_least_loaded_raw_scores_print_and_serialise_by_name() -> None:
    assert scores.text("LeastLoaded", 0, [5, 4, 7, 4], 2) == "0 (5/4 Σ7/4) ×2"
    assert scores.text("LeastLoaded", 100, "[1,40,2,40]") == "100 (1/40 Σ1/20)"
    assert scores.named("LeastLoaded", "[5,4,7,4]") == {"max": "5/4", "sum": "7/4"}
    assert scores.named("PreferredRunAffinity", "3") == 3


def test_recorded_positional_arrays_become_named_fields() -> None:
    recorded = {"candidates": [{"pod": "p", "scores": [["LeastLoaded", [1, 2, 1, 2], 100], ["Other", 0, 0]]}],
                "rejections": [["RuntimePodAvailability", "runtimed stale", 2]],
                "config": {"scores": [["LeastLoaded", 1]]}}
    named = scores.with_named_raws(recorded)
    assert named["candidates"][0]["scores"] == [
        {"plugin": "LeastLoaded", "raw": {"max": "1/2", "sum": "1/2"}, "normalized": 100},
        {"plugin": "Other", "raw": 0, "normalized": 0}]
    assert named["rejections"] == [{"plugin": "RuntimePodAvailability", "reason": "runtimed stale", "pods": 2}]
    assert named["config"]["scores"] == [{"plugin": "LeastLoaded", "weight": 1}]


@pytest.mark.parametrize("text,length", [("90s", timedelta(seconds=90)), ("1h30m", timedelta(minutes=90)),
                                         ("1d 12h", timedelta(hours=36)), ("2w", timedelta(days=14))])
def test_durations_add_up_their_parts(text: str, length: timedelta) -> None:
    assert wire.parse_duration(text) == length


@pytest.mark.parametrize("text", ["", "1.5h", "h", "30", "1h-5m"])
def test_a_duration_needs_a_number_and_a_unit(text: str) -> None:
    with pytest.raises(wire.NotATime, match="is not a duration"):
        wire.parse_duration(text)


def test_a_compound_age_counts_back_from_now() -> None:
    now = wire.parse_when("2026-11-29T12:00:00Z")
    assert wire.parse_when("1h30m", now=now) == wire.parse_when("2026-11-29T10:30:00+00:00")
