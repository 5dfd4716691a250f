"""CycleOutcome.top: the recorded candidates are the k best by total, ties by name."""

from __future__ import annotations

import heapq
from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as hs

from kruntimes.scheduler.outcome import SCHEDULED, CycleOutcome, PluginScores

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def outcome(totals: list[int], names: list[str]) -> CycleOutcome:
    n = len(totals)
    return CycleOutcome("ns", "run", "uid", 1, NOW, "cfg", SCHEDULED, pods=tuple(names), rejections=(None,) * n,
                        feasible=tuple(names), totals=tuple(totals),
                        scores=(PluginScores("LeastLoaded", 1, tuple((t, 1) for t in totals), tuple(totals)),))


@given(totals=hs.lists(hs.integers(0, 5), max_size=40), k=hs.integers(0, 8), data=hs.data())
def test_top_is_the_k_smallest_by_negated_total_then_name(totals: list[int], k: int, data: hs.DataObject) -> None:
    names = data.draw(hs.lists(hs.text("abc", min_size=1, max_size=3), min_size=len(totals), max_size=len(totals),
                               unique=True))
    o = outcome(totals, names)
    expected = [names[i] for _, _, i in heapq.nsmallest(k, zip([-t for t in totals], names, range(len(totals))))]
    got = o.top(k)
    assert [c.pod for c in got] == expected
    assert [c.total for c in got] == [totals[names.index(p)] for p in expected]
    assert all(c.scores == (("LeastLoaded", (c.total, 1), c.total),) for c in got)


def test_ties_at_the_cut_are_broken_by_name() -> None:
    o = outcome([3, 5, 3, 3, 1], ["d", "e", "b", "c", "a"])
    assert [c.pod for c in o.top(3)] == ["e", "b", "c"]
