"""Score plugins and the choice (SPEC §3.2 step 4, §3.4): exact raw scores, normalisation, weights, ties."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.plugins import least_loaded
from tests.builders import active, affinity, assume, cache_of, plan, pod, run, scores_of, sel

PREF, LL = "PreferredRunAffinity", "LeastLoaded"


def _frac_key(key: tuple[int, int, int, int]) -> tuple[Fraction, Fraction]:
    return Fraction(key[0], key[1]), Fraction(key[2], key[3])


# -- PreferredRunAffinity --------------------------------------------------------------------

def test_preferred_affinity_raw_is_the_sum_of_matching_term_weights_each_once_per_pod_minus_anti() -> None:
    cache = cache_of([pod("p1", capacity={"runs": 9}), pod("p2", capacity={"runs": 9}),
                      pod("p3", capacity={"runs": 9}), pod("p4", capacity={"runs": 9})],
                     [active("x1", "p1", labels={"a": "1"}), active("x2", "p1", labels={"a": "1"}),
                      active("x3", "p1", labels={"b": "1"}),
                      active("y1", "p2", labels={"c": "1"}),
                      active("z1", "p4", labels={"a": "1", "c": "1"})])
    r = run("r", affinity=affinity(preferred=[(10, sel(a="1")), (30, sel(b="1"))],
                                   preferred_anti=[(20, sel(c="1"))]))
    raw, norm = scores_of(plan(cache, r), PREF)
    # p1: A once (10, although two targets match) + B (30); p2: -C; p3: nothing; p4: A - C.
    assert raw == {"p1": 40, "p2": -20, "p3": 0, "p4": -10}
    # (raw - min) * 100 // (max - min), min -20, max 40: integer floor, never rounding.
    assert norm == {"p1": 100, "p2": 0, "p3": 20 * 100 // 60, "p4": 10 * 100 // 60}
    assert norm["p3"] == 33 and norm["p4"] == 16


def test_preferred_affinity_counts_assumed_targets() -> None:
    cache = cache_of([pod("p1"), pod("p2")])
    assume(cache, run("t", labels={"a": "1"}), "p2")
    raw, norm = scores_of(plan(cache, run("r", affinity=affinity(preferred=[(7, sel(a="1"))]))), PREF)
    assert raw == {"p1": 0, "p2": 7}
    assert norm == {"p1": 0, "p2": 100}


def test_preferred_affinity_scores_all_zero_when_every_pod_has_the_same_raw_score() -> None:
    cache = cache_of([pod("p1"), pod("p2")], [active("t1", "p1", labels={"a": "1"}),
                                             active("t2", "p2", labels={"a": "1"})])
    raw, norm = scores_of(plan(cache, run("r", affinity=affinity(preferred=[(50, sel(a="1"))]))), PREF)
    assert raw == {"p1": 50, "p2": 50}
    assert norm == {"p1": 0, "p2": 0}


def test_other_runs_preferences_do_not_count() -> None:
    cache = cache_of([pod("p1"), pod("p2")],
                     [active("t", "p1", labels={"a": "1"}, affinity=affinity(preferred=[(100, sel(b="1"))]))])
    raw, _ = scores_of(plan(cache, run("r", labels={"b": "1"})), PREF)
    assert raw == {"p1": 0, "p2": 0}


def test_preferences_never_make_a_feasible_pod_infeasible() -> None:
    cache = cache_of([pod("p1")], [active("t", "p1", labels={"a": "1"})])
    outcome = plan(cache, run("r", affinity=affinity(preferred_anti=[(100, sel(a="1"))])))
    assert outcome.chosen == "p1"


def test_preferred_normalisation_uses_only_the_feasible_pods() -> None:
    cache = cache_of([pod("p1"), pod("p2"), pod("p3", ready=False)],
                     [active("t1", "p2", labels={"a": "1"}), active("t3", "p3", labels={"a": "1", "b": "1"})])
    outcome = plan(cache, run("r", affinity=affinity(preferred=[(10, sel(a="1")), (90, sel(b="1"))])))
    raw, norm = scores_of(outcome, PREF)
    assert raw == {"p1": 0, "p2": 10}
    assert norm == {"p1": 0, "p2": 100}


# -- LeastLoaded ------------------------------------------------------------------------------

def test_least_loaded_key_is_max_and_sum_of_projected_utilisation_over_declared_positive_capacities() -> None:
    cache = cache_of([pod("p", capacity={"runs": 4, "example.com/gpu": 2, "mem": 3, "zero": 0})],
                     [active("a", "p", requests={"runs": 1, "example.com/gpu": 1})])
    raw, _ = scores_of(plan(cache, run("r", requests={"runs": 1})), LL)
    # runs (1+1)/4, gpu (1+0)/2, mem 0/3; "zero" is excluded (capacity 0).
    assert _frac_key(raw["p"]) == (Fraction(1, 2), Fraction(1, 2) + Fraction(1, 2) + 0)


def test_least_loaded_counts_the_default_runs_capacity_and_assumed_usage() -> None:
    cache = cache_of([pod("p", capacity={"example.com/gpu": 4})], config=SchedulerConfig(default_runs_capacity=3))
    assume(cache, run("s", requests={"runs": 1, "example.com/gpu": 1}), "p")
    raw, _ = scores_of(plan(cache, run("r", requests={"runs": 1})), LL)
    assert _frac_key(raw["p"]) == (Fraction(2, 3), Fraction(2, 3) + Fraction(1, 4))


@pytest.mark.parametrize("used, expected", [
    ({"a": 0, "b": 2, "c": 1}, {"a": 100, "b": 0, "c": 50}),
    ({"a": 0, "b": 1, "c": 2, "d": 3}, {"a": 100, "b": 66, "c": 33, "d": 0}),
    ({"a": 1, "b": 1, "c": 0}, {"a": 0, "b": 0, "c": 100}),
    ({"a": 2, "b": 2}, {"a": 100, "b": 100}),
    ({"a": 0}, {"a": 100}),
], ids=["three distinct keys rank 100/50/0", "four keys floor 100*(K-1-r)//(K-1)",
        "equal keys share a rank and K counts distinct keys", "all keys equal score 100", "a single pod scores 100"])
def test_least_loaded_normalises_by_rank_of_distinct_keys(used: dict[str, int], expected: dict[str, int]) -> None:
    cache = cache_of([pod(n, capacity={"runs": 6}) for n in used],
                     [active(f"{n}{i}", n) for n, k in used.items() for i in range(k)])
    _, norm = scores_of(plan(cache, run("r")), LL)
    assert norm == expected


def test_least_loaded_breaks_equal_maxima_by_the_sum() -> None:
    cache = cache_of([pod("x", capacity={"runs": 4, "example.com/gpu": 2}),
                      pod("y", capacity={"runs": 4, "example.com/gpu": 2})],
                     [active("a", "x", requests={"runs": 1}),
                      active("b", "y", requests={"runs": 1, "example.com/gpu": 1})])
    outcome = plan(cache, run("r"))
    raw, norm = scores_of(outcome, LL)
    assert _frac_key(raw["x"]) == (Fraction(1, 2), Fraction(1, 2))
    assert _frac_key(raw["y"]) == (Fraction(1, 2), Fraction(1))
    assert norm == {"x": 100, "y": 0}
    assert outcome.chosen == "x"


def test_least_loaded_compares_exact_fractions_not_floats() -> None:
    # 1/3 vs 333333333333333331/999999999999999994: distinct fractions, same float.
    big = 999_999_999_999_999_994
    cache = cache_of([pod("x", capacity={"runs": 3}), pod("y", capacity={"runs": big})],
                     [active("a", "y", requests={"runs": 333_333_333_333_333_330})])
    outcome = plan(cache, run("r"))
    raw, norm = scores_of(outcome, LL)
    assert Fraction(1, 3) > Fraction(333_333_333_333_333_331, big)
    assert float(Fraction(1, 3)) == float(Fraction(333_333_333_333_333_331, big))
    assert norm == {"x": 0, "y": 100}
    assert outcome.chosen == "y"


def test_least_loaded_ascending_order_is_exact_for_float_colliding_maxima() -> None:
    keys = {(1, 3, 1, 3), (333_333_333_333_333_331, 999_999_999_999_999_994, 1, 1)}
    assert least_loaded._ascending(keys) == sorted(keys, key=_frac_key)


# -- combining --------------------------------------------------------------------------------

def test_totals_are_the_weighted_sum_of_normalised_scores_and_the_highest_total_wins() -> None:
    pods = [pod("busy", capacity={"runs": 4}), pod("idle", capacity={"runs": 4})]
    runs = [active("t1", "busy", labels={"a": "1"}), active("t2", "busy")]
    r = run("r", affinity=affinity(preferred=[(10, sel(a="1"))]))
    # Equal weights: busy 100 + 0, idle 0 + 100 -> a tie, broken by name ("busy").
    even = plan(cache_of(pods, runs), r)
    assert dict(zip(even.feasible, even.totals)) == {"busy": 100, "idle": 100}
    assert even.chosen == "busy"
    spread = plan(cache_of(pods, runs, config=SchedulerConfig(scores=((PREF, 1), (LL, 3)))), r)
    assert dict(zip(spread.feasible, spread.totals)) == {"busy": 100, "idle": 300}
    assert spread.chosen == "idle"
    pack = plan(cache_of(pods, runs, config=SchedulerConfig(scores=((PREF, 5), (LL, 2)))), r)
    assert dict(zip(pack.feasible, pack.totals)) == {"busy": 500, "idle": 200}
    assert pack.chosen == "busy"


@pytest.mark.parametrize("weight", [0, -1, True, 1.5], ids=["zero", "negative", "a bool", "a float"])
def test_score_weights_must_be_positive_integers(weight) -> None:
    from kruntimes.scheduler.config import ConfigError
    with pytest.raises(ConfigError, match="weight must be a positive integer"):
        SchedulerConfig(scores=((LL, weight),))


def test_ties_go_to_the_lexicographically_smallest_pod_name() -> None:
    cache = cache_of([pod("pod-c"), pod("pod-b"), pod("pod-a10"), pod("pod-a2")])
    outcome = plan(cache, run("r"))
    assert len(set(outcome.totals)) == 1
    assert outcome.chosen == "pod-a10"


def test_a_tie_among_the_best_ignores_worse_pods_with_smaller_names() -> None:
    cache = cache_of([pod("a"), pod("m"), pod("z")], [active("x", "a")])
    outcome = plan(cache, run("r"))
    assert dict(zip(outcome.feasible, outcome.totals)) == {"a": 0, "m": 100, "z": 100}
    assert outcome.chosen == "m"
