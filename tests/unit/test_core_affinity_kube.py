"""RunAffinity as kube-scheduler's InterPodAffinity decides it (SPEC §3.3, amended 2026-12-01; §3.4).

Two tables. The first holds the multi-term rule that the amendment changed: a
target *satisfies* a Run only when it matches ALL of its required affinity terms,
and the Run bootstraps only when no target anywhere satisfies it. The second
translates the cases of kube-scheduler's InterPodAffinity filtering and scoring
tests to kruntimes' one topology (`kruntimes.io/runtime-pod`: a node there is a
Runtime Pod here, an existing pod an active Run); the cases are restated, not
copied. Where SPEC §3.4 deliberately differs (other Runs' preferences and required
terms never score; a preferred term counts once per pod), the case says so.

Every case: pods `a`, `b`, `c` of runtime `rt` (ready, fresh, `runs: 4`) unless
it names others; targets as (name, pod, labels[, affinity]); the Run `r` planned.
"""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.scheduler.plugins import affinity as af
from kruntimes.scheduler.plugins import availability as av
from kruntimes.scheduler.projection import Affinity, Selector
from tests.builders import active, affinity, cache_of, expr, plan, pod, run, scores_of, sel, verdicts

U, ANTI, EXISTING = af.AFFINITY_UNSATISFIED, af.ANTI_AFFINITY, af.EXISTING_ANTI_AFFINITY
DB_SCAN = {"app": "db", "service": "scan"}
NEEDS_DB_AND_SCAN = affinity(required=[sel(app="db"), sel(service="scan")])
SCAN = {"service": "securityscan"}
S1 = {"security": "S1"}


def _exprs(*requirements: Any) -> Selector:
    return Selector(match_expressions=tuple(requirements))


def _verdicts_of(targets: list[tuple[Any, ...]], labels: dict[str, str], aff: Affinity,
                 pods: list[Any] | None = None) -> dict[str, str | None]:
    cache = cache_of(pods if pods is not None else [pod("a"), pod("b"), pod("c")],
                     [active(t[0], t[1], labels=t[2], affinity=t[3] if len(t) > 3 else affinity())
                      for t in targets])
    return verdicts(plan(cache, run("r", labels=labels, affinity=aff)))


MULTI_TERM = [
    ("one target matching all the terms admits its pod",
     [("t", "b", DB_SCAN)], {}, NEEDS_DB_AND_SCAN, None, {"a": U, "b": None, "c": U}),
    ("targets that each match some of the terms on one pod do not add up",
     [("t1", "b", {"app": "db"}), ("t2", "b", {"service": "scan"})], {}, NEEDS_DB_AND_SCAN, None,
     {"a": U, "b": U, "c": U}),
    ("a full match on one pod and partial matches on another admit only the first",
     [("t1", "a", {"app": "db"}), ("t2", "b", DB_SCAN), ("t3", "c", {"service": "scan"})], {},
     NEEDS_DB_AND_SCAN, None, {"a": U, "b": None, "c": U}),
    ("a run matching all its terms seeds its cohort although unrelated runs match one of them",
     [("t1", "b", {"app": "db"}), ("t2", "c", {"service": "scan"})], DB_SCAN, NEEDS_DB_AND_SCAN, None,
     {"a": None, "b": None, "c": None}),
    ("a run matching only some of its terms never seeds its cohort",
     [], {"app": "db"}, NEEDS_DB_AND_SCAN, None, {"a": U, "b": U, "c": U}),
    ("a full match only on an unavailable pod keeps the run pending with the affinity reason",
     [("t", "a", DB_SCAN)], DB_SCAN, NEEDS_DB_AND_SCAN, [pod("a", ready=False), pod("b"), pod("c")],
     {"a": av.NOT_READY, "b": U, "c": U}),
    ("a full match only on a pod of another runtime keeps the run pending with the affinity reason",
     [("t", "x", DB_SCAN)], DB_SCAN, NEEDS_DB_AND_SCAN, [pod("a"), pod("b"), pod("x", runtime="rt2")],
     {"a": U, "b": U}),
    ("each required anti-affinity term rejects on its own",
     [("t1", "a", {"app": "db"}), ("t2", "b", {"service": "scan"})], {},
     affinity(anti=[sel(app="db"), sel(service="scan")]), None, {"a": ANTI, "b": ANTI, "c": None}),
    ("an anti-affinity term with two labels needs both on one target",
     [("t1", "a", {"app": "db"}), ("t2", "b", DB_SCAN)], {}, affinity(anti=[sel(app="db", service="scan")]), None,
     {"a": None, "b": ANTI, "c": None}),
]


@pytest.mark.parametrize("targets, labels, aff, pods, expected", [c[1:] for c in MULTI_TERM],
                         ids=[c[0] for c in MULTI_TERM])
def test_required_affinity_with_several_terms_counts_only_targets_matching_all_of_them(
        targets, labels, aff, pods, expected) -> None:  # type: ignore[no-untyped-def]
    assert _verdicts_of(targets, labels, aff, pods) == expected


def test_a_run_requiring_bs_labels_and_b_requiring_as_both_wait_until_one_of_them_is_placed() -> None:
    a = run("a-run", labels={"role": "a"}, affinity=affinity(required=[sel(role="b")]))
    b = run("b-run", labels={"role": "b"}, affinity=affinity(required=[sel(role="a")]))
    cache = cache_of([pod("p"), pod("q")], [a, b])
    for r in (a, b):
        outcome = plan(cache, r)
        assert outcome.chosen is None
        assert outcome.message == "0/2 runtime pods available: 2 run affinity not satisfied"
    cache.upsert_run(active("a-run", "q", labels={"role": "a"}, affinity=a.affinity))
    assert verdicts(plan(cache, b)) == {"p": U, "q": None}


KUBE_FILTERING = [
    ("a run without required affinity can go to a pod holding no runs",
     [], {}, affinity(), {"a": None, "b": None, "c": None}),
    ("an In term matching the existing run is satisfied",
     [("t", "a", SCAN)], S1, affinity(required=[_exprs(expr("service", "In", "securityscan", "value2"))]),
     {"a": None, "b": U, "c": U}),
    ("a NotIn term whose values the existing run lacks is satisfied by it",
     [("t", "a", SCAN)], S1, affinity(required=[_exprs(expr("service", "NotIn", "securityscan3", "value3"))]),
     {"a": None, "b": U, "c": U}),
    ("a selector not matching the existing run is not satisfied",
     [("t", "a", SCAN)], SCAN, affinity(required=[_exprs(expr("service", "In", "antivirusscan", "value2"))]),
     {"a": U, "b": U, "c": U}),
    ("several terms with different operators all matching one existing run are satisfied",
     [("t", "a", SCAN)], S1, affinity(required=[
         _exprs(expr("service", "Exists"), expr("wrongkey", "DoesNotExist")),
         _exprs(expr("service", "In", "securityscan"), expr("service", "NotIn", "WrongValue"))]),
     {"a": None, "b": U, "c": U}),
    ("the expressions of a term are ANDed, so one failing expression fails the term",
     [("t", "a", SCAN)], S1, affinity(required=[
         _exprs(expr("service", "Exists"), expr("wrongkey", "DoesNotExist")),
         _exprs(expr("service", "In", "securityscan2"), expr("service", "NotIn", "WrongValue"))]),
     {"a": U, "b": U, "c": U}),
    ("affinity and anti-affinity both hold when the existing run matches only the affinity",
     [("t", "a", SCAN)], S1, affinity(required=[_exprs(expr("service", "In", "securityscan"))],
                                      anti=[_exprs(expr("service", "In", "antivirusscan"))]),
     {"a": None, "b": U, "c": U}),
    ("the existing run's anti-affinity not matching the incoming run keeps symmetry satisfied",
     [("t", "a", SCAN, affinity(anti=[_exprs(expr("service", "In", "antivirusscan"))]))], S1,
     affinity(required=[_exprs(expr("service", "In", "securityscan"))]), {"a": None, "b": U, "c": U}),
    ("affinity satisfied but the run's own anti-affinity matching the existing run rejects the pod",
     [("t", "a", SCAN)], S1, affinity(required=[_exprs(expr("service", "In", "securityscan"))],
                                      anti=[_exprs(expr("service", "In", "securityscan"))]),
     {"a": ANTI, "b": U, "c": U}),
    ("affinity satisfied but the existing run's anti-affinity matching the incoming run rejects the pod",
     [("t", "a", SCAN, affinity(anti=[_exprs(expr("service", "In", "securityscan"))]))], SCAN,
     affinity(required=[_exprs(expr("service", "In", "securityscan"))]), {"a": EXISTING, "b": U, "c": U}),
    ("a term matching the run's own labels but no existing run does not bootstrap when the labels fail it",
     [("t", "b", SCAN)], SCAN, affinity(required=[_exprs(expr("service", "NotIn", "securityscan"))]),
     {"a": U, "b": U, "c": U}),
    ("an existing run's anti-affinity is respected when the incoming run has no affinity at all",
     [("t", "a", SCAN, affinity(anti=[_exprs(expr("service", "In", "securityscan"))]))], SCAN, affinity(),
     {"a": EXISTING, "b": None, "c": None}),
    ("an existing run's NotIn anti-affinity excluding the incoming labels leaves the pod open",
     [("t", "a", SCAN, affinity(anti=[_exprs(expr("service", "NotIn", "securityscan"))]))], SCAN, affinity(),
     {"a": None, "b": None, "c": None}),
    ("one of an existing run's anti-affinity terms matching the incoming run is enough to reject",
     [("t", "a", S1, affinity(anti=[_exprs(expr("service", "Exists")), _exprs(expr("security", "Exists"))]))],
     SCAN, affinity(), {"a": EXISTING, "b": None, "c": None}),
    ("the first run of a collection requiring its own labels is blocked nowhere",
     [], {"service": "securityscan"}, affinity(required=[_exprs(expr("service", "In", "securityscan"))]),
     {"a": None, "b": None, "c": None}),
    ("an anti-affinity matching existing runs on every pod leaves no pod",
     [("t1", "a", SCAN), ("t2", "b", SCAN), ("t3", "c", SCAN)], S1,
     affinity(anti=[_exprs(expr("service", "Exists"))]), {"a": ANTI, "b": ANTI, "c": ANTI}),
    ("a run whose required term matches an existing run and whose anti-affinity matches another pod",
     [("t1", "a", {"foo": "bar"}), ("t2", "b", {"foo": "bar", "bar": "x"})], {"foo": "bar"},
     affinity(required=[sel(foo="bar")], anti=[_exprs(expr("bar", "Exists"))]), {"a": None, "b": ANTI, "c": U}),
]


@pytest.mark.parametrize("targets, labels, aff, expected", [c[1:] for c in KUBE_FILTERING],
                         ids=[c[0] for c in KUBE_FILTERING])
def test_required_run_affinity_filters_as_kube_schedulers_inter_pod_affinity(
        targets, labels, aff, expected) -> None:  # type: ignore[no-untyped-def]
    assert _verdicts_of(targets, labels, aff) == expected


PREFERRING_SCAN = affinity(preferred=[(5, _exprs(expr("service", "In", "securityscan", "value2")))])
KUBE_SCORING = [
    ("every pod scores 0 when the run has no preferences",
     [("t", "a", SCAN)], affinity(), {"a": 0, "b": 0, "c": 0}),
    ("a pod holding a run that matches a preferred term scores highest",
     [("t1", "a", SCAN), ("t2", "b", S1)], PREFERRING_SCAN, {"a": 100, "b": 0, "c": 0}),
    ("a preferred term counts once per pod however many runs there match it (SPEC §3.4, unlike kube)",
     [("t1", "a", SCAN), ("t2", "a", SCAN), ("t3", "b", SCAN)], PREFERRING_SCAN, {"a": 100, "b": 100, "c": 0}),
    ("preferred terms with different operators add up their weights",
     [("t1", "a", {**SCAN, **S1}), ("t2", "b", SCAN), ("t3", "c", {"x": "y"})],
     affinity(preferred=[(8, _exprs(expr("service", "In", "securityscan"))),
                         (2, _exprs(expr("security", "Exists"))), (5, _exprs(expr("x", "NotIn", "y")))]),
     {"a": 100, "b": 86, "c": 0}),  # raw 15, 13 (NotIn also matches runs without the key), 0
    ("a pod holding a run that matches a preferred anti-affinity term scores lowest",
     [("t1", "a", SCAN), ("t2", "b", S1)], affinity(preferred_anti=[(5, sel(service="securityscan"))]),
     {"a": 0, "b": 100, "c": 100}),
    ("affinity and anti-affinity preferences net out per pod",
     [("t1", "a", {**SCAN, **S1}), ("t2", "b", SCAN), ("t3", "c", S1)],
     affinity(preferred=[(5, sel(service="securityscan"))], preferred_anti=[(3, sel(security="S1"))]),
     {"a": 62, "b": 100, "c": 0}),  # raw 2, 5, -3: (raw + 3) * 100 // 8
    ("another run's required affinity matching the incoming run earns nothing (SPEC §3.4, unlike kube)",
     [("t", "a", S1, affinity(required=[sel(service="securityscan")]))], affinity(), {"a": 0, "b": 0, "c": 0}),
    ("another run's preferred affinity matching the incoming run earns nothing (SPEC §3.4, unlike kube)",
     [("t", "a", S1, affinity(preferred=[(5, sel(service="securityscan"))]))], affinity(),
     {"a": 0, "b": 0, "c": 0}),
    ("another run's preferred anti-affinity matching the incoming run costs nothing (SPEC §3.4, unlike kube)",
     [("t", "a", S1, affinity(preferred_anti=[(5, sel(service="securityscan"))]))], affinity(),
     {"a": 0, "b": 0, "c": 0}),
]


@pytest.mark.parametrize("targets, aff, expected", [c[1:] for c in KUBE_SCORING],
                         ids=[c[0] for c in KUBE_SCORING])
def test_preferred_run_affinity_scores_as_kube_schedulers_inter_pod_affinity_save_other_runs_preferences(
        targets, aff, expected) -> None:  # type: ignore[no-untyped-def]
    cache = cache_of([pod("a", capacity={"runs": 9}), pod("b", capacity={"runs": 9}), pod("c", capacity={"runs": 9})],
                     [active(t[0], t[1], labels=t[2], affinity=t[3] if len(t) > 3 else affinity()) for t in targets])
    outcome = plan(cache, run("r", labels=SCAN, affinity=aff))
    assert scores_of(outcome, "PreferredRunAffinity")[1] == expected
