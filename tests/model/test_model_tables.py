"""The model checked against the SPEC's own examples, so that it is not trusted blindly.

Each case is a sentence of SPEC §2–§3.4 (amended 2026-12-01) turned into a tiny
workload with the outcome the sentence dictates. These run the model only.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from tests.model import compare, objects, planner, syntax
from tests.model.workloads import NOW, pod, run, term

RUNS_1 = {"runs": "1"}


def _outcomes(*documents: dict) -> dict[str, planner.Outcome]:
    return {o.name: o for o in planner.simulate(list(documents), NOW)}


def _active(name: str, pod_name: str, uid: str | None, **kw: object) -> dict:
    return run(name, phase="Running", pod_name=pod_name, pod_uid=uid, **kw)  # type: ignore[arg-type]


def _anti(selector: dict) -> dict:
    return {"runAntiAffinity": {"required": [term(selector)]}}


def _requires(*selectors: dict) -> dict:
    return {"runAffinity": {"required": [term(s) for s in selectors]}}


# -- syntax (§2.2) --------------------------------------------------------------------------

@pytest.mark.parametrize("text, value", [
    ("2", 2), ("1k", 1000), ("1000m", 1), ("1Ki", 1024), ("0", 0), ("+1", 1), ("1e3", 1000), ("1E", 10**18),
    ("9223372036854775807", 2**63 - 1), ("0e999999999", 0), (3, 3),
    ("500m", None), ("1.5", None), ("-1", None), ("abc", None), ("9223372036854775808", None), ("1e999999999", None),
    (" 1", None), ("", None), (True, None), (None, None), ("1e-999999999", None), ("\u0661", None),
])
def test_a_quantity_is_a_non_negative_whole_number_of_at_most_int64(text: object, value: int | None) -> None:
    assert syntax.count(text) == value


@pytest.mark.parametrize("name, ok", [
    ("runs", True), ("example.com/gpu", True), ("a.b-c_d", True), ("bad name!", False), ("_x", False),
    ("example.com/", False), ("/gpu", False), ("a/b/c", False), ("Example.com/gpu", False), ("x" * 63, True),
    ("x" * 64, False), ("", False),
])
def test_resource_names_are_kubernetes_qualified_names(name: str, ok: bool) -> None:
    assert syntax.is_qualified_name(name) is ok


@pytest.mark.parametrize("text, seconds", [
    ("2026-11-29T12:00:00Z", 0), ("2026-11-29T14:00:00+02:00", 0), ("2026-11-29T12:00:00.5Z", 0.5),
    ("2026-11-29t12:00:00z", 0), ("2026-11-29T12:00Z", None), ("2026-11-29T12:00:00", None),
    ("2026-11-29 12:00:00Z", None), ("20261129T120000Z", None), ("2026-13-01T00:00:00Z", None), ("", None),
])
def test_times_are_rfc3339_with_a_zone(text: str, seconds: float | None) -> None:
    got = syntax.instant(text)
    base = syntax.instant(NOW)
    assert (None if got is None else float(got - base)) == seconds  # type: ignore[operator]


# -- capacity annotations (§2.1 amended, §2.3) -------------------------------------------------

@pytest.mark.parametrize("annotations, capacity", [
    ({"kruntimes.io/capacity": '{"example.com/gpu":"1","runs":"4"}'}, {"example.com/gpu": 1, "runs": 4}),
    ({"kruntimes.io/capacity": '{"runs":"4"}', "kruntimes.io/capacity.mem": "2"}, {"runs": 4, "mem": 2}),
    ({"kruntimes.io/capacity": '{"runs":"4"}', "kruntimes.io/capacity.runs": "4"}, {"runs": 4}),
    ({"kruntimes.io/capacity": '{"runs":"1k"}', "kruntimes.io/capacity.runs": "1000"}, {"runs": 1000}),
    ({"kruntimes.io/capacity": '{"runs":"4"}', "kruntimes.io/capacity.runs": "3"}, None),
    ({"kruntimes.io/capacity": '{"runs":4}'}, None),
    ({"kruntimes.io/capacity": "[1]"}, None),
    ({"kruntimes.io/capacity": "not json"}, None),
    ({"kruntimes.io/capacity": '{"bad name!":"1"}'}, None),
    ({"kruntimes.io/capacity._x": "1"}, None),
    ({"kruntimes.io/capacity.runs": "500m"}, None),
    ({"kruntimes.io/capacity.runs": "9223372036854775808"}, None),
    ({"kruntimes.io/capacity.example.com/gpu": "1"}, {"example.com/gpu": 1}),
])
def test_a_pods_capacity_is_the_union_of_both_annotation_forms_and_conflicts_are_malformed(
        annotations: dict, capacity: dict | None) -> None:
    assert objects.read_capacity(annotations) == capacity


def test_a_pod_without_a_runs_annotation_has_the_default_runs_capacity_of_one() -> None:
    got = _outcomes(pod("p"), run("a", created="2026-11-29T10:00:00Z"), run("b", created="2026-11-29T10:00:01Z"))
    assert (got["a"].phase, got["a"].pod, got["b"].phase) == ("Scheduled", "p", "Pending")


def test_an_undeclared_resource_makes_the_pod_infeasible_and_a_zero_request_is_ignored() -> None:
    got = _outcomes(pod("p"), run("gpu", requests={"example.com/gpu": "1"}),
                    run("zero", requests={"example.com/gpu": "0", "runs": 0}))
    assert got["gpu"].phase == "Pending" and got["gpu"].allowed == [frozenset({"not_offered"})]
    assert got["zero"].pod == "p"


# -- the Pending message (§3.2) --------------------------------------------------------------

def test_the_specs_pending_example_is_what_the_model_allows_and_nothing_else() -> None:
    pods = [pod(f"full{i}", capacity=RUNS_1) for i in range(3)] + \
           [pod(f"old{i}", heartbeat=NOW - timedelta(minutes=5)) for i in range(2)]
    busy = [_active(f"busy{i}", f"full{i}", None) for i in range(3)]
    got = _outcomes(*pods, *busy, run("new", created="2026-11-29T11:00:00Z"))["new"]
    assert (got.phase, got.evaluated) == ("Pending", 5)
    # The SPEC's example, naming the resource as issue 27 asks (planner version 2).
    spec_example = "0/5 runtime pods available: 3 insufficient capacity (runs), 2 runtimed stale"
    assert compare._judge_message(got, spec_example) is None
    assert compare._judge_message(got, "0/5 runtime pods available: 2 runtimed stale, 3 insufficient capacity (runs)") is None
    assert compare._judge_message(got, "0/5 runtime pods available: 2 insufficient capacity (runs), 3 runtimed stale")
    assert compare._judge_message(got, "0/4 runtime pods available: 3 insufficient capacity (runs), 1 runtimed stale")
    assert compare._judge_message(got, "0/5 runtime pods available: 3 insufficient capacity, 2 runtimed stale")
    assert compare._judge_message(got, "0/5 runtime pods available: 3 insufficient capacity (example.com/gpu), "
                                       "2 runtimed stale")
    assert compare._judge_message(got, spec_example + "; " + compare.NEVER_FITS)  # runs frees up: it may fit


@pytest.mark.parametrize("capacity, message", [
    ({"example.com/gpu": "2", "runs": "4"},
     "0/2 runtime pods available: 2 insufficient capacity (example.com/gpu); " + compare.NEVER_FITS),
    ({"runs": "4"}, "0/2 runtime pods available: 2 resource not offered (example.com/gpu); " + compare.NEVER_FITS),
], ids=["above every pod's capacity", "a resource no pod declares"])
def test_a_run_no_pod_could_ever_fit_says_so_and_names_the_resource(capacity: dict[str, str], message: str) -> None:
    got = _outcomes(pod("a", capacity=capacity), pod("b", capacity=capacity),
                    run("big", requests={"example.com/gpu": "4"}))["big"]
    assert got.never_fits and compare._judge_message(got, message) is None
    assert compare._judge_message(got, message.split("; ")[0])  # without saying so


def test_a_pod_failing_several_availability_checks_may_be_counted_under_any_of_them_but_not_twice() -> None:
    assert compare.explainable(Counter({"stale": 1}), [frozenset({"not_ready", "stale"})])
    assert compare.explainable(Counter({"not_ready": 1, "stale": 1}),
                               [frozenset({"not_ready", "stale"}), frozenset({"stale"})])
    assert not compare.explainable(Counter({"not_ready": 2}), [frozenset({"not_ready", "stale"}), frozenset({"stale"})])


@pytest.mark.parametrize("heartbeat, fresh", [
    (NOW - timedelta(seconds=30), True), (NOW - timedelta(seconds=31), False), (NOW + timedelta(hours=1), True),
    (None, False), ("yesterday", False), ((NOW + timedelta(hours=2)).astimezone(timezone(timedelta(hours=2))), True),
])
def test_the_heartbeat_is_fresh_when_now_minus_heartbeat_is_at_most_30_seconds(heartbeat: object, fresh: bool) -> None:
    got = _outcomes(pod("p", heartbeat=heartbeat), run("r"))["r"]
    assert (got.phase == "Scheduled") is fresh


# -- one pod identity and old active Runs (§2.2 amended) -----------------------------------------

def test_a_run_on_an_earlier_uid_of_the_same_pod_name_counts_nowhere_and_repels_nothing() -> None:
    got = _outcomes(pod("p", uid="new", capacity=RUNS_1),
                    _active("old", "p", "gone-uid", labels={"app": "db"}, affinity=_anti({}), workspace="ws"),
                    run("r", labels={"app": "db"}, workspace="other"),
                    run("w", workspace="ws", created="2026-11-29T10:00:01Z"))
    assert got["r"].pod == "p"          # neither capacity nor symmetric anti-affinity
    assert got["w"].allowed == [frozenset({"insufficient"})]  # r took the slot; ws is bound nowhere


def test_an_assignment_without_a_uid_is_on_the_pod_of_that_name() -> None:
    got = _outcomes(pod("p", uid="u", capacity=RUNS_1), _active("old", "p", None), run("r"))
    assert got["r"].allowed == [frozenset({"insufficient"})]


def test_an_old_active_run_with_a_malformed_request_still_repels_with_its_valid_anti_affinity() -> None:
    old = _active("old", "p", "u", requests={"runs": "500m", "mem": "abc"},
                  affinity=_anti({"matchLabels": {"app": "db"}}))
    got = _outcomes(pod("p", uid="u", capacity={"runs": "2"}), old, run("r", labels={"app": "db"}))
    assert got["r"].allowed == [frozenset({"existing_anti_affinity"})]


def test_an_old_active_run_with_a_malformed_affinity_loses_all_of_it_but_counts_its_runs_default() -> None:
    bad = {"runAntiAffinity": {"required": [term({})], "preferred": [{"weight": "10", "term": term({})}]}}
    got = _outcomes(pod("p", uid="u", capacity={"runs": "2"}), _active("old", "p", "u", affinity=bad),
                    run("r"), run("s", created="2026-11-29T10:00:01Z"))
    assert got["r"].pod == "p" and got["s"].allowed == [frozenset({"insufficient"})]


# -- required affinity (§3.3 amended) ------------------------------------------------------------

DB, SCAN = {"matchLabels": {"app": "db"}}, {"matchLabels": {"service": "scan"}}


def test_two_targets_that_each_match_some_terms_do_not_add_up_to_one() -> None:
    got = _outcomes(pod("a", uid="a", capacity={"runs": "9"}), pod("b", uid="b"),
                    _active("db", "a", "a", labels={"app": "db"}),
                    _active("scan", "a", "a", labels={"service": "scan"}),
                    run("r", affinity=_requires(DB, SCAN)))
    assert got["r"].phase == "Pending" and got["r"].allowed == [frozenset({"affinity"})] * 2


def test_one_target_matching_all_terms_satisfies_the_run() -> None:
    got = _outcomes(pod("a", uid="a"), pod("b", uid="b", capacity={"runs": "2"}),
                    _active("both", "b", "b", labels={"app": "db", "service": "scan"}),
                    run("r", affinity=_requires(DB, SCAN)))
    assert got["r"].pod == "b"


def test_a_run_seeds_its_cohort_when_only_unrelated_partial_targets_exist() -> None:
    got = _outcomes(pod("a", uid="a"), pod("b", uid="b"), _active("db", "a", "a", labels={"app": "db"}),
                    run("r", labels={"app": "db", "service": "scan"}, affinity=_requires(DB, SCAN)))
    assert got["r"].pod == "b"  # bootstrap: affinity passes everywhere; LeastLoaded prefers the empty pod


def test_a_full_match_only_on_an_unavailable_pod_blocks_the_bootstrap() -> None:
    got = _outcomes(pod("a", uid="a", ready=False), pod("b", uid="b"),
                    _active("both", "a", "a", labels={"app": "db", "service": "scan"}),
                    run("r", labels={"app": "db", "service": "scan"}, affinity=_requires(DB, SCAN)))
    assert got["r"].allowed == [frozenset({"not_ready", "insufficient"}), frozenset({"affinity"})]


def test_runs_that_require_each_others_labels_wait() -> None:
    got = _outcomes(pod("p"), run("a", labels={"app": "db"}, affinity=_requires(SCAN)),
                    run("b", labels={"service": "scan"}, affinity=_requires(DB), created="2026-11-29T10:00:01Z"))
    assert got["a"].phase == got["b"].phase == "Pending"


def test_a_missing_selector_matches_nothing_and_an_empty_one_matches_every_run() -> None:
    missing = {"runAffinity": {"required": [term(None)]}}
    got = _outcomes(pod("p", capacity={"runs": "3"}), run("m", affinity=missing),
                    run("e", affinity=_anti({}), created="2026-11-29T10:00:01Z"),
                    run("x", created="2026-11-29T10:00:02Z"))
    assert got["m"].phase == "Pending"
    assert got["e"].pod == "p" and got["x"].allowed == [frozenset({"existing_anti_affinity"})]


def test_an_assumed_run_is_a_target_for_the_runs_after_it() -> None:
    got = _outcomes(pod("a", capacity={"runs": "4"}), pod("b", capacity={"runs": "4"}),
                    run("seed", labels={"app": "db"}, affinity=_requires(DB)),
                    run("next", affinity=_requires(DB), created="2026-11-29T10:00:01Z"))
    assert got["seed"].pod == "a" and got["next"].pod == "a"


def test_a_workspace_bound_to_several_pods_allows_any_of_them() -> None:
    got = _outcomes(pod("a", uid="a", capacity={"runs": "9"}), pod("b", uid="b", capacity={"runs": "9"}),
                    pod("c", uid="c"), _active("x", "a", "a", workspace="ws"), _active("y", "b", "b", workspace="ws"),
                    run("r", workspace="ws"))
    assert got["r"].pod in ("a", "b") and got["r"].allowed == []


# -- scores (§3.4) ------------------------------------------------------------------------------

def test_preferred_affinity_outweighs_least_loaded_only_by_normalised_scores() -> None:
    pref = {"runAffinity": {"preferred": [{"weight": 1, "term": term(DB)}]}}
    got = _outcomes(pod("a", uid="a", capacity={"runs": "4"}), pod("b", uid="b", capacity={"runs": "4"}),
                    _active("db", "b", "b", labels={"app": "db"}), run("r", affinity=pref))
    # a: pref 0, load 100; b: pref 100, load 0: a tie, so the smaller name wins.
    assert got["r"].scores == {"a": (0, 100), "b": (100, 0)} and got["r"].pod == "a"


def test_least_loaded_ranks_distinct_keys_by_max_then_sum() -> None:
    pods = [pod("a", capacity={"runs": "4", "mem": "4"}), pod("b", capacity={"runs": "4"}),
            pod("c", capacity={"runs": "2"})]
    got = _outcomes(*pods, run("r"))["r"]
    # keys: a (1/4, 1/4+0), b (1/4, 1/4), c (1/2, 1/2) -> a and b share rank 0, c rank 1.
    assert got.scores == {"a": (0, 100), "b": (0, 100), "c": (0, 0)} and got.pod == "a"


def test_runs_are_scheduled_by_creation_instant_not_by_its_text() -> None:
    got = _outcomes(pod("p"), run("late", created="2026-11-29T10:30:00+00:00"),
                    run("early", created="2026-11-29T12:00:00+02:00"),
                    run("unquoted", created=datetime(2026, 11, 29, 10, 15, tzinfo=timezone.utc)))
    assert got["early"].pod == "p" and got["unquoted"].phase == got["late"].phase == "Pending"


def test_an_invalid_weight_or_topology_fails_the_run() -> None:
    for aff in ({"runAffinity": {"preferred": [{"weight": True, "term": term({})}]}},
                {"runAffinity": {"preferred": [{"weight": "10", "term": term({})}]}},
                {"runAffinity": {"required": [term({}, "kubernetes.io/hostname")]}},
                {"runAffinity": {"required": [term({"matchExpressions": [{"key": "a", "operator": "Gt"}]})]}}):
        assert _outcomes(pod("p"), run("r", affinity=aff))["r"].phase == "Failed"
    assert _outcomes(pod("p"), run("r", runtime=None))["r"].phase == "Failed"


def test_whole_file_errors_in_the_model() -> None:
    with pytest.raises(planner.ModelInputError, match="document 1 and document 2"):
        planner.simulate([pod("p"), pod("p", namespace=None)], NOW)
    with pytest.raises(planner.ModelInputError, match="document 1"):
        planner.simulate([run("r", created="yesterday")], NOW)


def test_the_model_shares_no_code_with_kruntimes() -> None:
    """Issue 12: a second implementation, not a second caller of the first."""
    import subprocess
    import sys

    code = ("import sys, tests.model.planner, tests.model.compare, tests.model.workloads; "
            "print(sorted(m for m in sys.modules if m == 'kruntimes' or m.startswith('kruntimes.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_model_places_the_documented_cohort_example_as_the_docs_show() -> None:
    """docs/examples/cohort.yaml and its expected output (README "Where would my Runs go?")."""
    import json
    import pathlib

    examples = pathlib.Path(__file__).resolve().parents[2] / "docs" / "examples"
    now = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    outcomes = planner.simulate(planner.load((examples / "cohort.yaml").read_text()), now)
    rows = json.loads((examples / "cohort.expected.json").read_text())
    got = {o.name: (o.phase, o.pod) for o in outcomes}
    expected = {row["name"]: (row["phase"], row["pod"]) for row in rows}
    assert got == {name: expected[name] for name in got}
