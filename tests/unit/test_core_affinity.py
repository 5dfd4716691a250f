"""RunAffinity (SPEC §3.3.2) and label selector semantics (SPEC §2.2)."""

from __future__ import annotations

import pytest

from kruntimes.scheduler.plugins import affinity as af
from kruntimes.scheduler.plugins import availability as av
from kruntimes.scheduler.projection import Selector
from tests.builders import NOW, active, affinity, assume, cache_of, expr, plan, pod, run, sel, verdicts

PODS = [pod("a"), pod("b"), pod("c")]


def test_required_affinity_admits_only_pods_holding_an_active_matching_target() -> None:
    cache = cache_of(PODS, [active("t", "b", labels={"app": "db"})])
    outcome = plan(cache, run("r", affinity=affinity(required=[sel(app="db")])))
    assert verdicts(outcome) == {"a": af.AFFINITY_UNSATISFIED, "b": None, "c": af.AFFINITY_UNSATISFIED}


def test_required_affinity_counts_assumed_targets() -> None:
    cache = cache_of(PODS)
    assume(cache, run("t", labels={"app": "db"}), "c")
    outcome = plan(cache, run("r", affinity=affinity(required=[sel(app="db")])))
    assert verdicts(outcome) == {"a": af.AFFINITY_UNSATISFIED, "b": af.AFFINITY_UNSATISFIED, "c": None}


def test_every_required_affinity_term_must_match_one_and_the_same_target_on_the_pod() -> None:
    # SPEC §3.3 amended 2026-12-01 (kube's rule): t2 and t3 on "b" each match one term,
    # which does not add up to a satisfying target; t4 on "c" matches both.
    cache = cache_of(PODS, [active("t1", "a", labels={"app": "db"}), active("t2", "b", labels={"app": "db"}),
                            active("t3", "b", labels={"tier": "cache"}),
                            active("t4", "c", labels={"app": "db", "tier": "cache"})])
    outcome = plan(cache, run("r", affinity=affinity(required=[sel(app="db"), sel(tier="cache")])))
    assert verdicts(outcome) == {"a": af.AFFINITY_UNSATISFIED, "b": af.AFFINITY_UNSATISFIED, "c": None}


def test_targets_of_other_namespaces_never_count() -> None:
    cache = cache_of(PODS + [pod("a", ns="other")], [active("t", "a", ns="other", labels={"app": "db"})])
    outcome = plan(cache, run("r", labels={"app": "web"}, affinity=affinity(required=[sel(app="db")])))
    assert set(verdicts(outcome).values()) == {af.AFFINITY_UNSATISFIED}


def test_finished_runs_are_not_targets() -> None:
    cache = cache_of(PODS, [active("t", "b", labels={"app": "db"}, phase="Succeeded")])
    outcome = plan(cache, run("r", labels={"app": "web"}, affinity=affinity(required=[sel(app="db")])))
    assert set(verdicts(outcome).values()) == {af.AFFINITY_UNSATISFIED}


@pytest.mark.parametrize("target_assumed", [False, True], ids=["an active target", "an assumed target"])
def test_required_anti_affinity_rejects_pods_holding_a_matching_target(target_assumed: bool) -> None:
    cache = cache_of(PODS)
    if target_assumed:
        assume(cache, run("t", labels={"app": "db"}), "a")
    else:
        cache.upsert_run(active("t", "a", labels={"app": "db"}))
    outcome = plan(cache, run("r", affinity=affinity(anti=[sel(app="db")])))
    assert verdicts(outcome) == {"a": af.ANTI_AFFINITY, "b": None, "c": None}


@pytest.mark.parametrize("target_assumed", [False, True], ids=["an active run", "an assumed run"])
def test_a_run_on_the_pod_whose_required_anti_affinity_matches_the_incoming_run_rejects_the_pod(
        target_assumed: bool) -> None:
    guard = run("guard", labels={"app": "db"}, affinity=affinity(anti=[sel(app="web")]))
    cache = cache_of(PODS)
    if target_assumed:
        assume(cache, guard, "b")
    else:
        cache.upsert_run(active("guard", "b", labels={"app": "db"}, affinity=affinity(anti=[sel(app="web")])))
    outcome = plan(cache, run("r", labels={"app": "web"}))
    assert verdicts(outcome) == {"a": None, "b": af.EXISTING_ANTI_AFFINITY, "c": None}
    assert verdicts(plan(cache, run("s", labels={"app": "batch"}))) == {"a": None, "b": None, "c": None}


def test_bootstrap_a_run_matching_its_own_required_terms_seeds_the_cohort_when_no_target_exists() -> None:
    cache = cache_of(PODS)
    outcome = plan(cache, run("r", labels={"app": "db"}, affinity=affinity(required=[sel(app="db")])))
    assert verdicts(outcome) == {"a": None, "b": None, "c": None}
    assert outcome.chosen == "a"


def test_bootstrap_still_applies_the_other_hard_constraints() -> None:
    cache = cache_of([pod("a", ready=False), pod("b", capacity={"runs": 0}), pod("c")])
    outcome = plan(cache, run("r", labels={"app": "db"}, affinity=affinity(required=[sel(app="db")])))
    assert verdicts(outcome) == {"a": av.NOT_READY, "b": av.INSUFFICIENT, "c": None}


def test_bootstrap_needs_the_runs_labels_to_match_all_of_its_terms() -> None:
    cache = cache_of(PODS)
    outcome = plan(cache, run("r", labels={"app": "db"},
                              affinity=affinity(required=[sel(app="db"), sel(tier="gold")])))
    assert set(verdicts(outcome).values()) == {af.AFFINITY_UNSATISFIED}


def test_once_the_cohort_is_seeded_the_next_member_must_join_it() -> None:
    cache = cache_of(PODS)
    member = affinity(required=[sel(app="db")])
    assume(cache, run("seed", labels={"app": "db"}, affinity=member), "b")
    outcome = plan(cache, run("next", labels={"app": "db"}, affinity=member))
    assert verdicts(outcome) == {"a": af.AFFINITY_UNSATISFIED, "b": None, "c": af.AFFINITY_UNSATISFIED}


def test_two_runs_each_requiring_only_the_others_labels_both_stay_pending_with_the_affinity_reason() -> None:
    cache = cache_of(PODS)
    a = run("a-run", labels={"role": "a"}, affinity=affinity(required=[sel(role="b")]))
    b = run("b-run", labels={"role": "b"}, affinity=affinity(required=[sel(role="a")]))
    cache.upsert_run(a)
    cache.upsert_run(b)
    for r in (a, b):
        outcome = plan(cache, r)
        assert outcome.chosen is None
        assert outcome.message == "0/3 runtime pods available: 3 run affinity not satisfied"


def test_a_run_whose_targets_are_only_on_unavailable_pods_stays_pending_with_the_affinity_reason() -> None:
    cache = cache_of([pod("a", ready=False), pod("b"), pod("other-rt", runtime="rt2")],
                     [active("t1", "a", labels={"app": "db"}), active("t2", "other-rt", labels={"app": "db"})])
    outcome = plan(cache, run("r", labels={"app": "db"}, affinity=affinity(required=[sel(app="db")])))
    assert verdicts(outcome) == {"a": av.NOT_READY, "b": af.AFFINITY_UNSATISFIED}
    assert outcome.chosen is None


def test_a_term_never_matches_its_own_run() -> None:
    # The Run is already assumed on "b" (e.g. a retry after a failed cycle): its own
    # labels there must neither satisfy its affinity nor trip its anti-affinity.
    cache = cache_of(PODS)
    me = run("me", labels={"app": "db"}, affinity=affinity(anti=[sel(app="db")]))
    assume(cache, me, "b")
    with cache.lock:
        targets = cache.snapshot(me, NOW).targets
        assert list(targets.select(sel(app="db"), exclude_uid=me.uid)) == []
        assert targets.pods_rejecting({"app": "db"}, exclude_uid=me.uid) == frozenset()
    outcome = plan(cache, me)
    assert verdicts(outcome)["b"] is None


def test_a_required_term_matching_only_its_own_run_bootstraps_instead_of_matching_itself() -> None:
    cache = cache_of(PODS)
    me = run("me", labels={"app": "db"}, affinity=affinity(required=[sel(app="db")]))
    assume(cache, me, "c")
    # If the term matched the Run itself there would be a target on "c" only.
    assert verdicts(plan(cache, me)) == {"a": None, "b": None, "c": None}


@pytest.mark.parametrize("selector, matches", [
    (None, False), (Selector(), True),
], ids=["a missing selector matches nothing", "an empty selector matches every run"])
def test_a_missing_selector_matches_nothing_and_an_empty_one_matches_every_run(selector, matches: bool) -> None:
    cache = cache_of(PODS, [active("t", "b", labels={"anything": "x"}), active("u", "c")])
    anti = plan(cache, run("r", affinity=affinity(anti=[selector])))
    assert verdicts(anti) == ({"a": None, "b": af.ANTI_AFFINITY, "c": af.ANTI_AFFINITY} if matches
                              else {"a": None, "b": None, "c": None})
    required = plan(cache, run("s", affinity=affinity(required=[selector])))
    assert verdicts(required) == ({"a": af.AFFINITY_UNSATISFIED, "b": None, "c": None} if matches
                                  else {"a": af.AFFINITY_UNSATISFIED, "b": af.AFFINITY_UNSATISFIED,
                                        "c": af.AFFINITY_UNSATISFIED})


def test_a_missing_selector_never_bootstraps() -> None:
    outcome = plan(cache_of(PODS), run("r", affinity=affinity(required=[None])))
    assert outcome.chosen is None


@pytest.mark.parametrize("selector, expected", [
    (sel(app="db"), {"b"}),
    (sel(app="db", tier="gold"), {"b"}),
    (Selector(match_expressions=(expr("app", "In", "db", "cache"),)), {"b", "c"}),
    (Selector(match_expressions=(expr("app", "NotIn", "db"),)), {"a", "c"}),
    (Selector(match_expressions=(expr("tier", "Exists"),)), {"a", "b"}),
    (Selector(match_expressions=(expr("tier", "DoesNotExist"),)), {"c"}),
    (Selector(match_labels=(("app", "db"),), match_expressions=(expr("tier", "NotIn", "gold"),)), set()),
    (Selector(match_expressions=(expr("app", "In", "nope"),)), set()),
], ids=["matchLabels", "matchLabels with two keys", "In", "NotIn also matches runs without the key",
        "Exists", "DoesNotExist", "matchLabels and expressions are ANDed", "In with no matching value"])
def test_selectors_have_kubernetes_semantics(selector: Selector, expected: set[str]) -> None:
    cache = cache_of(PODS, [active("ta", "a", labels={"app": "web", "tier": "silver"}),
                            active("tb", "b", labels={"app": "db", "tier": "gold"}),
                            active("tc", "c", labels={"app": "cache"})])
    outcome = plan(cache, run("r", labels={"self": "x"}, affinity=affinity(required=[selector])))
    if expected:
        assert {p for p, v in verdicts(outcome).items() if v is None} == expected
    else:
        assert outcome.chosen is None


def test_required_affinity_is_checked_before_anti_affinity_and_both_hold() -> None:
    cache = cache_of(PODS, [active("t1", "a", labels={"app": "db"}), active("t2", "b", labels={"app": "db"}),
                            active("t3", "b", labels={"app": "noisy"})])
    outcome = plan(cache, run("r", affinity=affinity(required=[sel(app="db")], anti=[sel(app="noisy")])))
    assert verdicts(outcome) == {"a": None, "b": af.ANTI_AFFINITY, "c": af.AFFINITY_UNSATISFIED}
