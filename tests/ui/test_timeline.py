"""The Timeline's arithmetic: utilisation is time-weighted, bars are clipped to the window."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kruntimes.ui import queries, timeline

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def _window(*bars: queries.Bar) -> queries.Window:
    w = queries.Window(T0, T0 + timedelta(seconds=timeline.BUCKETS))  # one second per bucket
    w.bars = list(bars)
    return w


def _bar(pod: str, start: float | None, end: float | None, runs: int = 1) -> queries.Bar:
    at = (lambda s: None if s is None else T0 + timedelta(seconds=s))
    return queries.Bar("ns", f"r-{pod}-{start}", "uid", pod, {"runs": runs}, at(start), at(end), "Succeeded")


LANES = [queries.Lane("ns", "p", "rt", {"runs": 4}, True, False, None),
         queries.Lane("ns", "q", "rt", {"runs": 4}, True, False, None)]


def test_ten_short_runs_one_after_another_hold_one_slot_not_ten() -> None:
    bars = [_bar("p", 10 + i * 0.1, 10 + (i + 1) * 0.1) for i in range(10)]  # ten 100 ms Runs in second 10
    series = timeline.utilisation(_window(*bars), LANES)["runs"]
    assert series[10] == 12.5  # one of eight slots, for the whole second
    assert series[9] == series[11] == 0.0


def test_a_run_spanning_buckets_counts_whole_inside_and_partly_at_its_ends() -> None:
    series = timeline.utilisation(_window(_bar("p", 5.5, 8.25, runs=2)), LANES)["runs"]
    assert series[5:9] == [12.5, 25.0, 25.0, 6.25]


def test_a_run_placed_before_the_window_or_still_there_fills_it_to_the_edge() -> None:
    series = timeline.utilisation(_window(_bar("q", None, None, runs=8)), LANES)["runs"]
    assert series == [100.0] * timeline.BUCKETS


def test_utilisation_counts_only_the_pods_asked_about() -> None:
    series = timeline.utilisation(_window(_bar("q", 0, 120, runs=4)), LANES[:1])["runs"]
    assert set(series) == {0.0}


def test_runtimes_and_pods_are_listed_in_natural_order() -> None:
    assert list(timeline.colours(["rt10", "rt2", "rt1"])) == ["rt1", "rt2", "rt10"]
    assert sorted(["pod-10", "pod-9", "pod-100"], key=timeline.natural) == ["pod-9", "pod-10", "pod-100"]
