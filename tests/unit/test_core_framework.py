"""The planner framework (SPEC §3.2 steps 2-4): filter order, bounded verdicts, errors, the Pending message."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Sequence

import pytest

from kruntimes.scheduler import outcome as out
from kruntimes.scheduler.config import ConfigError, SchedulerConfig
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.plugins import affinity as af
from kruntimes.scheduler.plugins import availability as av
from kruntimes.scheduler.registry import REGISTRY, _registry
from kruntimes.scheduler.views import PodView
from tests.builders import NOW, active, affinity, cache_of, plan, pod, run, sel, verdicts


class RejectNamed:
    """Rejects the pods named in `rejects` with reason "nope"."""

    name = "RejectNamed"
    reasons = ("nope",)
    rejects: frozenset[str] = frozenset({"b", "d"})

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        return ["nope" if p.name in self.rejects else None for p in pods]


class Recording:
    """Accepts everything and records which pods it was shown."""

    name = "Recording"
    reasons = ("never",)
    seen: list[list[str]] = []

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        Recording.seen.append([p.name for p in pods])
        return [None] * len(pods)


class StrayReason:
    name = "StrayReason"
    reasons = ("bounded",)

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        return [f"pod {p.name} is odd" for p in pods]


class RaisingScore:
    name = "RaisingScore"

    def score(self, state: CycleState, pods: Sequence[PodView]) -> list[int]:
        raise ZeroDivisionError("boom")


class OutOfRangeScore:
    name = "OutOfRangeScore"

    def score(self, state: CycleState, pods: Sequence[PodView]) -> list[int]:
        return [101] * len(pods)


class RaisingPreFilter:
    name = "RaisingPreFilter"
    reasons = ("x",)

    def pre_filter(self, snapshot: Any, r: Any) -> Any:
        raise KeyError("boom")

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        return [None] * len(pods)


TEST_REGISTRY = {**REGISTRY, **{c.name: c for c in (RejectNamed, Recording, StrayReason, RaisingScore,
                                                     OutOfRangeScore, RaisingPreFilter)}}


def _config(filters: tuple[str, ...], scores: tuple[tuple[str, int], ...] = ()) -> SchedulerConfig:
    return SchedulerConfig(filters=filters, scores=scores)


def test_a_pod_rejected_by_a_filter_plugin_is_never_shown_to_the_next_plugin() -> None:
    Recording.seen = []
    cache = cache_of([pod(n) for n in "abcde"])
    outcome = plan(cache, run("r"), config=_config(("RejectNamed", "Recording")), registry=TEST_REGISTRY)
    assert Recording.seen == [["a", "c", "e"]]
    assert verdicts(outcome) == {"a": None, "b": "nope", "c": None, "d": "nope", "e": None}
    assert outcome.rejections[1] == ("RejectNamed", "nope")


def test_filter_plugins_run_in_registration_order_and_the_first_rejection_is_the_recorded_one() -> None:
    # Pod "a" is both not ready (plugin 1) and anti-affine (plugin 2): only plugin 1's reason counts.
    cache = cache_of([pod("a", ready=False), pod("b")], [active("t", "a", labels={"x": "1"})])
    outcome = plan(cache, run("r", affinity=affinity(anti=[sel(x="1")])))
    assert outcome.rejections == (("RuntimePodAvailability", av.NOT_READY), None)
    reversed_order = plan(cache, run("s", affinity=affinity(anti=[sel(x="1")])),
                          config=SchedulerConfig(filters=("RunAffinity", "RuntimePodAvailability")))
    assert reversed_order.rejections == (("RunAffinity", af.ANTI_AFFINITY), None)


def test_a_plugin_is_not_called_once_every_pod_is_rejected() -> None:
    Recording.seen = []
    RejectNamed.rejects = frozenset({"b", "d"})
    cache = cache_of([pod("b"), pod("d")])
    outcome = plan(cache, run("r"), config=_config(("RejectNamed", "Recording")), registry=TEST_REGISTRY)
    assert Recording.seen == []
    assert outcome.status == out.UNSCHEDULABLE


def test_a_reason_outside_the_plugins_bounded_set_is_an_error_not_a_verdict() -> None:
    outcome = plan(cache_of([pod("secret-pod")]), run("r"), config=_config(("StrayReason",)), registry=TEST_REGISTRY)
    assert outcome.status == out.ERROR
    assert outcome.chosen is None
    assert "StrayReason" in (outcome.message or "")
    assert "secret-pod" not in (outcome.message or "")


@pytest.mark.parametrize("config", [
    _config(("RuntimePodAvailability",), (("LeastLoaded", 1), ("RaisingScore", 1))),
    _config(("RuntimePodAvailability",), (("OutOfRangeScore", 1),)),
    _config(("RaisingPreFilter",), (("LeastLoaded", 1),)),
], ids=["a raising score plugin", "a score plugin outside 0..100", "a raising prefilter"])
def test_a_plugin_failure_aborts_the_cycle_with_status_error(config: SchedulerConfig) -> None:
    outcome = plan(cache_of([pod("a"), pod("b")]), run("r"), config=config, registry=TEST_REGISTRY)
    assert outcome.status == out.ERROR
    assert outcome.chosen is None and outcome.scores == ()


def test_an_unknown_plugin_name_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="unknown plugin 'Nope'"):
        Planner(_config(("Nope",)))


def test_a_filter_plugin_configured_as_a_score_plugin_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="not a Score plugin"):
        Planner(_config((), (("RunAffinity", 1),)))


def test_the_registry_refuses_a_plugin_registered_twice() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        _registry(RejectNamed, Recording, RejectNamed)


def test_every_registered_filter_plugin_declares_a_bounded_reason_set() -> None:
    for name in ("RuntimePodAvailability", "RunAffinity"):
        reasons = REGISTRY[name]().reasons
        assert reasons and all(isinstance(r, str) and r for r in reasons)
        assert len(set(reasons)) == len(reasons)


def test_plan_is_a_pure_function_of_the_snapshot() -> None:
    cache = cache_of([pod("a"), pod("b"), pod("c", ready=False)], [active("t", "a", labels={"x": "1"})])
    r = run("r", affinity=affinity(preferred=[(5, sel(x="1"))]))
    cache.upsert_run(r)
    with cache.lock:
        snap = cache.snapshot(r, NOW)
        planner = Planner(cache.config)
        first, second = planner.plan(snap), planner.plan(snap)
    assert first == second
    assert first.digest() == second.digest()


# -- the Pending message ---------------------------------------------------------------------------

def test_the_pending_message_aggregates_rejection_reasons_with_counts() -> None:
    stale = NOW - timedelta(minutes=5)
    cache = cache_of([pod("p1", capacity={"runs": 0}), pod("p2", heartbeat=stale), pod("p3", capacity={"runs": 0}),
                      pod("p4", heartbeat=stale), pod("p5", capacity={"runs": 0})])
    outcome = plan(cache, run("r"))
    assert outcome.status == out.UNSCHEDULABLE
    assert outcome.message == "0/5 runtime pods available: 3 insufficient capacity (runs), 2 runtimed stale"


def test_pending_reasons_with_equal_counts_are_ordered_by_reason() -> None:
    cache = cache_of([pod("p1", ready=False), pod("p2", terminating=True)])
    assert plan(cache, run("r")).message == \
        "0/2 runtime pods available: 1 runtime pod not ready, 1 runtime pod terminating"


M = "zq7marker"
MK = f"{M}.io/key"


def _marker_case(setup: str) -> tuple[list, list, Any]:
    """Three marker-named pods and a marker-named Run that fits none of them, for one reason each."""
    ns, rt = f"{M}-ns", f"{M}-rt"
    names = [f"{M}-pod-{i}" for i in range(3)]
    cap = {"runs": 0} if setup == "capacity" else {"runs": 1, f"{M}.io/res": 1}
    pods = [pod(n, ns=ns, runtime=rt, capacity=cap) for n in names]
    own = {MK: f"{M}-own"}
    runs, kwargs = [], dict(ns=ns, runtime=rt, labels=own)
    if setup == "affinity":
        kwargs["affinity"] = affinity(required=[sel(**{MK: f"{M}-absent"})])
    elif setup == "anti":
        runs = [active(f"{M}-t{i}", n, ns=ns, labels={MK: f"{M}-v"}, requests={})
                for i, n in enumerate(names)]
        kwargs["affinity"] = affinity(anti=[sel(**{MK: f"{M}-v"})])
    elif setup == "symmetric":
        runs = [active(f"{M}-t{i}", n, ns=ns, requests={}, affinity=affinity(anti=[sel(**own)]))
                for i, n in enumerate(names)]
    elif setup == "workspace":
        runs = [active(f"{M}-w", names[0], ns=ns, workspace=f"{M}-ws")]
        kwargs["workspace"] = f"{M}-ws"
    elif setup == "resource":  # the message names the resource the Run asks for (issue 27), nothing else
        kwargs["requests"] = {"runs": 1, "example.com/other": 1}
    return pods, runs, run(f"{M}-r", **kwargs)


@pytest.mark.parametrize("setup", ["capacity", "affinity", "anti", "symmetric", "workspace", "resource"])
def test_the_pending_message_never_names_pods_runs_or_selectors(setup: str) -> None:
    pods, runs, r = _marker_case(setup)
    outcome = plan(cache_of(pods, runs), r)
    assert outcome.status == out.UNSCHEDULABLE
    assert outcome.message is not None and outcome.message.startswith("0/3 runtime pods available: ")
    assert M not in outcome.message


def test_the_pending_message_with_no_pods_says_so_without_naming_the_runtime() -> None:
    outcome = plan(cache_of([]), run("r", runtime="zq7marker"))
    assert outcome.message == "0/0 runtime pods available: no runtime pods for this runtime"


def test_the_outcome_records_every_pods_verdict_and_every_score() -> None:
    cache = cache_of([pod("a"), pod("b", ready=False), pod("c")], [active("t", "a")])
    outcome = plan(cache, run("r"))
    assert outcome.pods == ("a", "b", "c")
    assert outcome.feasible == ("a", "c")
    # DevicePreference (SPEC §7.6) scores a Run without devices 0 everywhere: recorded, deciding nothing.
    assert [s.plugin for s in outcome.scores] == ["PreferredRunAffinity", "LeastLoaded", "DevicePreference"]
    assert all(len(s.raw) == len(s.normalized) == 2 for s in outcome.scores)
    assert outcome.scores[2].normalized == (0, 0)
    assert outcome.chosen == "c" and outcome.chosen_uid == "uid-ns-c"
    assert outcome.rejection_counts() == (("RuntimePodAvailability", av.NOT_READY, 1),)
