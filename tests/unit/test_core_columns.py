"""The column planner (pod tables kept between cycles) decides exactly as the pod-by-pod one.

Every case plans the same snapshot twice: with `Planner(config)`, whose tables have
seen the earlier cycles, and with `Planner(config, columns=False)`, which evaluates
each plugin on the pods it is handed; the two outcomes must be equal in every field.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from bench.planner_digest import mixed_cycles
from kruntimes.scheduler import columns
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.outcome import CycleOutcome
from kruntimes.scheduler.projection import Affinity, RunInfo, Selector, Term
from tests.builders import NOW, active, pod, run


def _both(planner: Planner, cache: ClusterCache, r: RunInfo, now: datetime = NOW) -> CycleOutcome:
    with cache.lock:
        snapshot = cache.snapshot(r, now)
        outcome = planner.plan(snapshot)
        assert outcome == Planner(planner.config, columns=False).plan(snapshot)
    return outcome


def _cache(*pods, runs=()) -> ClusterCache:  # type: ignore[no-untyped-def]
    cache = ClusterCache(SchedulerConfig())
    for p in pods:
        cache.upsert_pod(p)
    for r in runs:
        cache.upsert_run(r)
    return cache


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_cycle_of_a_churning_cluster_matches_the_pod_by_pod_planner(seed: int) -> None:
    pod_by_pod: dict[int, Planner] = {}
    used_columns = 0
    for planner, snapshot, outcome in mixed_cycles(150, seed):
        other = pod_by_pod.setdefault(id(planner), Planner(planner.config, columns=False))
        assert outcome == other.plan(snapshot)
        used_columns += planner.columnar
    assert used_columns > 150


def test_the_built_in_plugins_plan_through_columns_and_the_option_turns_it_off() -> None:
    assert Planner(SchedulerConfig()).columnar
    assert not Planner(SchedulerConfig(), columns=False).columnar


def test_a_subclass_that_overrides_a_batch_method_but_not_the_column_is_planned_pod_by_pod() -> None:
    from kruntimes.scheduler.plugins.least_loaded import LeastLoaded

    class MostLoaded(LeastLoaded):
        def normalize(self, state, raws):  # type: ignore[no-untyped-def, override]
            return [100 - s for s in super().normalize(state, raws)]

    registry = {"LeastLoaded": MostLoaded, "RuntimePodAvailability": Planner(SchedulerConfig()).filters[0].__class__}
    config = SchedulerConfig(filters=("RuntimePodAvailability",), scores=(("LeastLoaded", 1),))
    planner = Planner(config, registry)
    assert not planner.columnar
    cache = _cache(pod("a"), pod("b"), runs=[active("x", on="a")])
    with cache.lock:
        assert planner.plan(cache.snapshot(run("r"), NOW)).chosen == "a"  # packs: the overriding method ran


def test_a_pod_that_goes_stale_while_its_view_stays_is_rejected_as_stale() -> None:
    cache, planner = _cache(pod("a"), pod("b", heartbeat=NOW + timedelta(seconds=60))), Planner(SchedulerConfig())
    assert _both(planner, cache, run("r1")).chosen == "a"
    later = _both(planner, cache, run("r2"), NOW + timedelta(seconds=45))
    assert later.rejections[0] == ("RuntimePodAvailability", "runtimed stale")
    assert later.chosen == "b"


def test_pods_that_shift_position_when_one_leaves_and_another_joins_are_judged_by_their_own_view() -> None:
    pods = [pod(f"p{i}", capacity={"runs": i + 1}) for i in range(12)]
    cache, planner = _cache(*pods, runs=[active("x", on="p0")]), Planner(SchedulerConfig())
    _both(planner, cache, run("r1"))
    cache.delete_pod("ns", "p3")
    cache.upsert_pod(pod("p99", capacity={"runs": 0}))
    outcome = _both(planner, cache, run("r2"))
    assert "p3" not in outcome.pods and outcome.rejections[outcome.pods.index("p99")] is not None


def test_a_pod_readded_under_a_new_uid_is_a_new_pod_to_its_table() -> None:
    w1 = run("w1", workspace="ws")
    cache, planner = _cache(pod("a"), pod("b"), runs=[w1]), Planner(SchedulerConfig())
    assert _both(planner, cache, w1).chosen == "a"
    assert cache.reserve(w1, "a")
    assert _both(planner, cache, run("w2", workspace="ws")).feasible == ("a",)
    cache.upsert_pod(pod("a", uid="uid-new"))
    # The assumption was onto the old UID: the workspace binds no current pod now.
    assert _both(planner, cache, run("w3", workspace="ws")).feasible == ("a", "b")


def test_pods_that_share_a_uid_are_planned_pod_by_pod() -> None:
    cache, planner = _cache(pod("a", uid="same"), pod("b", uid="same")), Planner(SchedulerConfig())
    outcome = _both(planner, cache, run("r"))
    assert outcome.chosen == "a"


def test_heartbeats_that_do_not_compare_give_the_pod_by_pod_error() -> None:
    naive = datetime(2026, 1, 1)
    cache, planner = _cache(pod("a"), pod("b", heartbeat=naive)), Planner(SchedulerConfig())
    assert _both(planner, cache, run("r")).status == "error"


def test_workspace_affinity_and_preferences_combine_as_in_the_pod_by_pod_planner() -> None:
    web = Selector(match_labels=(("app", "web"),))
    cache = _cache(*(pod(f"p{i}") for i in range(6)),
                   runs=[active("w", on="p1", labels={"app": "web"}, workspace="ws"),
                         active("v", on="p2", labels={"app": "web"})])
    planner = Planner(SchedulerConfig())
    _both(planner, cache, run("plain"))
    required = _both(planner, cache, run("req", affinity=Affinity(required=(Term(web),))))
    assert required.feasible == ("p1", "p2")
    anti = _both(planner, cache, run("anti", affinity=Affinity(required_anti=(Term(web),)), workspace="ws"))
    assert anti.status == "unschedulable"  # the workspace's pod holds a web Run
    assert _both(planner, cache, run("ws", workspace="ws")).chosen == "p1"


def test_the_planner_keeps_a_bounded_number_of_tables() -> None:
    cache, planner = _cache(pod("a", capacity={"runs": 100})), Planner(SchedulerConfig())
    planner._tables.limit = 3
    for i in range(6):
        _both(planner, cache, run(f"r{i}", requests={"runs": i + 1}))
    assert len(planner._tables) == 3


def test_a_group_logs_the_positions_of_replaced_views_and_starts_an_era_on_a_rebuild() -> None:
    cache = _cache(pod("a"), pod("b"), pod("c"))
    cache.upsert_run(run("r1"))
    with cache.lock:
        first = cache.snapshot(run("r"), NOW).changes
        assert cache.reserve(run("r1"), "c")
        second = cache.snapshot(run("r"), NOW).changes
    assert first is not None and second is not None and second.era is first.era
    assert second.log[first.length:second.length] == [2]
    cache.upsert_pod(pod("d"))
    with cache.lock:
        third = cache.snapshot(run("r"), NOW).changes
    assert third is not None and third.era is not first.era


def test_a_table_patches_only_the_logged_positions() -> None:
    cache = _cache(*(pod(f"p{i}") for i in range(8)))
    seen: list[object] = []

    class Recording:
        def update(self, table: columns.PodTable, changed: object) -> None:
            seen.append(changed)

    table = columns.PodTable({"rec": Recording()})  # type: ignore[dict-item]
    cache.upsert_run(run("r1"))
    with cache.lock:
        s1 = cache.snapshot(run("r"), NOW)
        table.update(s1.pods, s1.changes)
        assert cache.reserve(run("r1"), "p5")
        s2 = cache.snapshot(run("r"), NOW)
        table.update(s2.pods, s2.changes)
        table.update(s2.pods, s2.changes)
    assert seen == [None, [5]]
    assert replace(s2, changes=None).changes is None


def _fraction_key(capacity: dict[str, int], used: dict[str, int], request: dict[str, int]) -> tuple[int, ...]:
    from fractions import Fraction

    fractions = [Fraction(used.get(r, 0) + request.get(r, 0), c) for r, c in sorted(capacity.items()) if c > 0]
    if not fractions:
        return (0, 1, 0, 1)
    top, total = max(fractions), sum(fractions, Fraction(0))
    return (top.numerator, top.denominator, total.numerator, total.denominator)


def test_the_integer_load_key_equals_the_one_computed_with_fractions() -> None:
    import random

    from kruntimes.scheduler.plugins.least_loaded import load_key
    from kruntimes.scheduler.views import make_view
    from kruntimes.scheduler.projection import PodInfo

    rng = random.Random(16)
    names = ("runs", "memory", "example.com/gpu", "cpu")
    for _ in range(3000):
        capacity = {r: rng.choice((0, 1, 2, 3, 4, 6, 7, 12, 10**12)) for r in rng.sample(names, rng.randrange(0, 5))}
        used = {r: rng.choice((0, 1, 2, 5, 9, 10**9)) for r in rng.sample(names, rng.randrange(0, 5))}
        request = {r: rng.choice((1, 2, 3)) for r in rng.sample(names, rng.randrange(0, 3))}
        info = PodInfo("ns", "p", "uid", "rt", capacity=tuple(sorted(capacity.items())))
        view = make_view(info, used, {}, default_runs_capacity=rng.choice((0, 1, 4)))
        assert load_key(view, request) == _fraction_key(dict(view.capacity), dict(view.used), request)
