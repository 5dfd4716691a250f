"""CycleOutcome.top: the recorded candidates are the k best by total, ties by name."""

from __future__ import annotations

import heapq
import random
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


def two_sorts(totals: list[int], names: list[str], k: int) -> list[int]:
    """The order top() had before it ordered only the pods reaching the floor: every pod, two stable sorts."""
    order = sorted(range(len(totals)), key=names.__getitem__)
    order.sort(key=totals.__getitem__, reverse=True)
    return order[:k]


@given(totals=hs.lists(hs.integers(0, 3), max_size=60), k=hs.integers(0, 12), data=hs.data())
def test_top_orders_as_sorting_every_pod_does_with_many_ties_and_repeated_names(
        totals: list[int], k: int, data: hs.DataObject) -> None:
    names = data.draw(hs.lists(hs.text("ab", min_size=1, max_size=2), min_size=len(totals), max_size=len(totals)))
    o = outcome(totals, names)
    expected = two_sorts(totals, names, k)
    got = o.top(k)
    assert [(c.pod, c.total, c.scores[0][1]) for c in got] == [(names[i], totals[i], (totals[i], 1)) for i in expected]


def test_top_of_a_thousand_pods_in_three_buckets_is_the_two_sort_order() -> None:
    rng = random.Random(7)
    names = [f"pod-{i:05d}" for i in range(1000)]
    rng.shuffle(names)
    for k in (1, 5, 124, 125, 126, 1000, 1001):
        totals = [rng.choice((0, 50, 50, 50, 50, 50, 100)) for _ in names]
        assert [c.pod for c in outcome(totals, names).top(k)] == [names[i] for i in two_sorts(totals, names, k)]


@given(totals=hs.lists(hs.integers(0, 3), max_size=60), k=hs.integers(0, 8), data=hs.data())
def test_top_of_pods_in_name_order_takes_the_first_tied_ones_in_pod_order(
        totals: list[int], k: int, data: hs.DataObject) -> None:
    # Pods in name order, as a snapshot gives them (repeats allowed): the scan that stops after
    # the first tied pods must pick what ordering all of them picks.
    names = sorted(data.draw(hs.lists(hs.text("ab", min_size=1, max_size=2), min_size=len(totals),
                                      max_size=len(totals))))
    o = outcome(totals, names)
    expected = [i for _, _, i in heapq.nsmallest(k, zip([-t for t in totals], names, range(len(totals))))]
    assert [c.pod for c in o.top(k)] == [names[i] for i in expected]
    assert [c.total for c in o.top(k)] == [totals[i] for i in expected]
