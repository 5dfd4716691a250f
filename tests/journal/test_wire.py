"""wire: what crosses to the writer process comes back equal, and a chunk says repeated vectors once."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as hs

from kruntimes.journal.write import wire
from kruntimes.scheduler.outcome import SCHEDULED, UNSCHEDULABLE, CycleOutcome, PluginScores

NOW = datetime(2026, 11, 29, 12, tzinfo=timezone.utc)
PODS = tuple(f"pod-{i:03d}" for i in range(100))
NOT_READY = ("RuntimePodAvailability", "runtime pod not ready")


def outcome(pods: tuple[str, ...], totals: list[int], rejected: set[int] = frozenset(),  # type: ignore[assignment]
            run: str = "r") -> CycleOutcome:
    feasible = tuple(p for i, p in enumerate(pods) if i not in rejected)
    raw = tuple((t, 100) for t in totals[: len(feasible)])
    return CycleOutcome("ns", run, f"uid-{run}", 7, NOW, "cfg", SCHEDULED, pods=pods,
                        rejections=tuple(NOT_READY if i in rejected else None for i in range(len(pods))),
                        feasible=feasible, totals=tuple(totals[: len(feasible)]),
                        scores=(PluginScores("LeastLoaded", 1, raw, tuple(totals[: len(feasible)])),),
                        chosen=feasible[0] if feasible else None, chosen_uid="u0")


def test_chunks_cross_in_order_and_whole() -> None:
    chunks = [wire.dumps([1, "a"]), wire.dumps([]), wire.dumps([{"b": (2, 3)}])]
    message = wire.chunks_message(chunks)
    assert message[:1] == wire.CHUNKS and wire.dumps(("close", None))[:1] != wire.CHUNKS
    assert list(wire.chunks_of(message)) == [[1, "a"], [], [{"b": (2, 3)}]]
    assert list(wire.chunks_of(wire.chunks_message([]))) == []


def test_a_cycle_like_the_one_before_it_over_the_same_pods_costs_a_fraction_of_the_first() -> None:
    first = outcome(PODS, [50] * 100, rejected={3, 4})
    again = replace(first, run_name="r2", run_uid="uid-r2")  # equal vectors, other tuples
    again = replace(again, rejections=tuple(list(first.rejections)), totals=tuple(list(first.totals)))
    one = len(wire.dumps([first]))
    two = len(wire.dumps([first, again]))
    assert two - one < one / 4
    back = wire.loads(wire.dumps([first, again]))
    assert back == [first, again]
    assert back[1].rejections is back[0].rejections and back[1].totals is back[0].totals


def test_outcomes_over_other_pods_or_with_other_scores_are_sent_as_they_are() -> None:
    a = outcome(PODS, [50] * 100)
    b = outcome(PODS, [50] * 99 + [49], run="b")  # the last pod scores differently
    c = outcome(PODS[:60], [50] * 60, run="c")  # another Runtime's pods
    d = replace(outcome(PODS, [50] * 100, rejected=set(range(100)), run="d"), status=UNSCHEDULABLE, scores=(),
                totals=(), chosen=None, chosen_uid=None, message="0/100 runtime pods available")
    back = wire.loads(wire.dumps([a, b, c, d, a]))
    assert back == [a, b, c, d, a]
    assert back[1].totals != back[0].totals and back[1].scores[0].raw[-1] == (49, 100)


@settings(max_examples=60)
@given(hs.lists(hs.tuples(hs.sampled_from([PODS, PODS[:10], PODS[40:47]]),
                          hs.lists(hs.integers(0, 3), min_size=100, max_size=100),
                          hs.sets(hs.integers(0, 99), max_size=5)), max_size=8))
def test_any_sequence_of_outcomes_comes_back_equal(draws: list[tuple[tuple[str, ...], list[int], set[int]]]) -> None:
    outcomes = [outcome(pods, totals, {i for i in rejected if i < len(pods)}, run=f"r{n}")
                for n, (pods, totals, rejected) in enumerate(draws)]
    assert wire.loads(wire.dumps(outcomes)) == outcomes
