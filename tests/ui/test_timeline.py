"""The Timeline's arithmetic, done in SQL over history_placements: time-weighted, clipped to the window.

On SQLite and on PostgreSQL: each turns stored times into microseconds its own way, and both must put every
placement in the same buckets.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from kruntimes.journal.history import buckets, derive
from kruntimes.journal.store import backends
from kruntimes.ui import timeline
from tests.ui.test_epoch_order import journal_url  # noqa: F401  (the fixture: both backends)

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
WINDOW = buckets.Buckets.of(T0, T0 + timedelta(seconds=buckets.BUCKETS))  # one second per bucket
CAPACITY = {"runs": 8}  # two pods of 4


@pytest.fixture
def journal(journal_url: str) -> Iterator[backends.Journal]:  # noqa: F811
    j = backends.Journal.open(journal_url)
    yield j
    j.close()


def _placements(journal: backends.Journal, *bars: tuple[str, float, float | None, int]) -> None:
    """(pod, start, end, runs) in seconds from T0; LSN 1 on, so all after a checkpoint at LSN 0."""
    rows: list[dict[str, Any]] = []
    for lsn, (pod, start, end, runs) in enumerate(bars, start=1):
        rows.append({"epoch": "e", "lsn": lsn, "decided_at": T0 + timedelta(seconds=start), "namespace": "ns",
                     "run": f"r{lsn}", "run_uid": f"u{lsn}", "pod": pod, "outcome": "scheduled",
                     "ended_at": None if end is None else T0 + timedelta(seconds=end),
                     "requests": f'[["runs",{runs}]]'})
    with journal.engine.begin() as conn:
        conn.execute(sa.insert(derive.placements), rows)


def _runs(journal: backends.Journal, pods: tuple[str, ...] = ("p", "q"), after: int = 0,
          placed_before: dict[str, set[str]] | None = None) -> list[float]:
    held = buckets.held(journal, WINDOW, [("ns", pod) for pod in pods], {"e": after} if after else {},
                        {"e": 10**6}, placed_before or {})
    return timeline.utilisation(held, WINDOW, CAPACITY)["runs"]


def test_ten_short_runs_one_after_another_hold_one_slot_not_ten(journal: backends.Journal) -> None:
    _placements(journal, *[("p", 10 + i * 0.1, 10 + (i + 1) * 0.1, 1) for i in range(10)])  # ten 100 ms Runs
    series = _runs(journal)
    assert series[10] == 12.5  # one of eight slots, for the whole second
    assert series[9] == series[11] == 0.0


def test_a_run_spanning_buckets_counts_whole_inside_and_partly_at_its_ends(journal: backends.Journal) -> None:
    _placements(journal, ("p", 5.5, 8.25, 2))
    assert _runs(journal)[5:9] == [12.5, 25.0, 25.0, 6.25]


def test_a_run_placed_before_the_window_or_still_there_fills_it_to_the_edge(journal: backends.Journal) -> None:
    _placements(journal, ("q", -30, None, 8))
    assert _runs(journal) == [100.0] * buckets.BUCKETS


def test_runs_that_ended_before_the_window_or_began_after_it_hold_nothing(journal: backends.Journal) -> None:
    _placements(journal, ("p", -30, -1, 4), ("p", 120, None, 4))
    assert set(_runs(journal)) == {0.0}


def test_utilisation_counts_only_the_pods_asked_about(journal: backends.Journal) -> None:
    _placements(journal, ("q", 0, 120, 4))
    assert set(_runs(journal, pods=("p",))) == {0.0}


def test_before_the_starting_checkpoint_only_the_runs_it_shows_placed_are_read(journal: backends.Journal) -> None:
    _placements(journal, ("p", -60, None, 2), ("q", -60, None, 2))  # r1 and r2, both before a checkpoint at LSN 2
    assert set(_runs(journal, after=2, placed_before={"ns": {"r1"}})) == {25.0}


def test_runtimes_are_listed_in_natural_order() -> None:
    assert list(timeline.colours(["rt10", "rt2", "rt1"])) == ["rt1", "rt2", "rt10"]
    assert sorted(["pod-10", "pod-9", "pod-100"], key=timeline.natural) == ["pod-9", "pod-10", "pod-100"]
