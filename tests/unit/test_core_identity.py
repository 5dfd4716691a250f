"""One pod identity everywhere (SPEC §2.2, amended 2026-12-01).

The pod an active or assumed Run "is on" is the pod its `podUID` names, for
capacity, for affinity targets, for symmetric anti-affinity and for bound
workspaces. A Run whose UID no current pod has is on no pod. These tests build
the situation that used to split identities: pod `p` is replaced by a pod of the
same name with a new UID without a DELETE being observed (a missed watch event),
and an earlier Run still names the old UID.
"""

from __future__ import annotations

from typing import Callable

import pytest

from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.plugins import affinity as af
from kruntimes.scheduler.plugins import availability as av
from kruntimes.scheduler.projection import RunInfo
from tests.builders import (active, affinity, assume, cache_of, plan, pod, run, scores_of, sel,
                            verdicts)

OLD, NEW = "uid-old-p", "uid-new-p"
DB = {"app": "db"}
GUARD = affinity(anti=[sel(app="web")])


def _active_on_old_uid(cache: ClusterCache, labels: dict[str, str], **kw) -> None:  # type: ignore[no-untyped-def]
    cache.upsert_run(active("t", "p", pod_uid=OLD, labels=labels, **kw))


def _assumed_on_old_uid(cache: ClusterCache, labels: dict[str, str], **kw) -> None:  # type: ignore[no-untyped-def]
    assume(cache, run("t", labels=labels, **kw), "p")


def _assigned_to_a_uid_no_pod_ever_had(cache: ClusterCache, labels: dict[str, str], **kw) -> None:  # type: ignore[no-untyped-def]
    cache.upsert_run(active("t", "p", pod_uid="uid-never-seen", labels=labels, **kw))


PLACEMENTS: dict[str, Callable[..., None]] = {
    "active on the earlier pod's uid": _active_on_old_uid,
    "assumed onto the earlier pod": _assumed_on_old_uid,
    "assigned to a uid no pod ever had": _assigned_to_a_uid_no_pod_ever_had,
}


def _replaced(place: Callable[..., None], labels: dict[str, str], **kw) -> ClusterCache:  # type: ignore[no-untyped-def]
    """Pods `p` (uid OLD) and `q`; the Run `t` placed as `place` says; then `p` re-added with uid NEW."""
    cache = cache_of([pod("p", uid=OLD, capacity={"runs": 2}), pod("q")])
    place(cache, labels, **kw)
    cache.upsert_pod(pod("p", uid=NEW, capacity={"runs": 2}), now=None)
    return cache


def _check(rule: str, cache: ClusterCache) -> dict[str, str | None]:
    requirer = run("r", affinity=affinity(required=[sel(app="db")]))
    return {
        "capacity": lambda: verdicts(plan(cache, run("r", requests={"runs": 2}))),
        "required affinity": lambda: verdicts(plan(cache, requirer)),
        "required anti-affinity": lambda: verdicts(plan(cache, run("r", affinity=affinity(anti=[sel(app="db")])))),
        "symmetric anti-affinity": lambda: verdicts(plan(cache, run("r", labels={"app": "web"}))),
        "bound workspace": lambda: verdicts(plan(cache, run("r", workspace="ws"))),
    }[rule]()


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
@pytest.mark.parametrize("rule, expected", [
    ("capacity", {"p": None, "q": None}),
    ("required affinity", {"p": af.AFFINITY_UNSATISFIED, "q": af.AFFINITY_UNSATISFIED}),
    ("required anti-affinity", {"p": None, "q": None}),
    ("symmetric anti-affinity", {"p": None, "q": None}),
    ("bound workspace", {"p": None, "q": None}),
], ids=["it takes no capacity on the new pod", "it attracts nothing to the new pod",
        "it repels nothing from the new pod", "its own anti-affinity repels nothing from the new pod",
        "it binds no workspace to the new pod"])
def test_a_run_on_a_pod_uid_that_no_current_pod_has_is_on_no_pod(placement: str, rule: str,
                                                                   expected: dict[str, str | None]) -> None:
    cache = _replaced(PLACEMENTS[placement], DB, affinity=GUARD, workspace="ws")
    assert _check(rule, cache) == expected


@pytest.mark.parametrize("rule, expected", [
    ("capacity", {"p": av.INSUFFICIENT, "q": None}),
    ("required affinity", {"p": None, "q": af.AFFINITY_UNSATISFIED}),
    ("required anti-affinity", {"p": af.ANTI_AFFINITY, "q": None}),
    ("symmetric anti-affinity", {"p": af.EXISTING_ANTI_AFFINITY, "q": None}),
    ("bound workspace", {"p": None, "q": av.WORKSPACE_ELSEWHERE}),
], ids=["it takes capacity", "it attracts", "it repels", "its own anti-affinity repels", "it binds its workspace"])
def test_an_assignment_without_a_pod_uid_is_on_the_current_pod_of_that_name(rule: str,
                                                                            expected: dict[str, str | None]) -> None:
    cache = cache_of([pod("p", uid=OLD, capacity={"runs": 2}), pod("q")],
                     [run("t", phase="Running", on="p", labels=DB, affinity=GUARD, workspace="ws")])
    cache.upsert_pod(pod("p", uid=NEW, capacity={"runs": 2}), now=None)
    assert _check(rule, cache) == expected


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_a_run_on_no_pod_does_not_stop_a_cohort_from_bootstrapping(placement: str) -> None:
    cache = _replaced(PLACEMENTS[placement], DB)
    outcome = plan(cache, run("r", labels=DB, affinity=affinity(required=[sel(app="db")])))
    assert verdicts(outcome) == {"p": None, "q": None}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_a_run_on_no_pod_earns_no_preferred_affinity_score(placement: str) -> None:
    cache = _replaced(PLACEMENTS[placement], DB)
    outcome = plan(cache, run("r", affinity=affinity(preferred=[(50, sel(app="db"))])))
    assert scores_of(outcome, "PreferredRunAffinity")[0] == {"p": 0, "q": 0}


def test_a_pod_deleted_and_re_added_under_a_new_uid_holds_none_of_the_earlier_pods_targets() -> None:
    cache = cache_of([pod("p", uid=OLD), pod("q")], [active("t", "p", pod_uid=OLD, labels=DB, affinity=GUARD)])
    cache.delete_pod("ns", "p")
    cache.upsert_pod(pod("p", uid=NEW), now=None)
    assert _check("symmetric anti-affinity", cache) == {"p": None, "q": None}
    assert _check("required anti-affinity", cache) == {"p": None, "q": None}


def test_an_assumption_counts_again_if_the_pod_of_its_uid_is_observed_again() -> None:
    # A relist can deliver the old pod after the new one was seen (the UIDs alternate):
    # the assumption belongs to its UID, not to whatever pod is called `p` right now.
    cache = _replaced(_assumed_on_old_uid, DB, affinity=GUARD)
    cache.upsert_pod(pod("p", uid=OLD, capacity={"runs": 2}), now=None)
    assert _check("capacity", cache) == {"p": av.INSUFFICIENT, "q": None}
    assert _check("symmetric anti-affinity", cache) == {"p": af.EXISTING_ANTI_AFFINITY, "q": None}


def test_reserve_refuses_a_pod_whose_uid_is_no_longer_the_one_planned_on() -> None:
    cache = cache_of([pod("p", uid=OLD)])
    r: RunInfo = run("r")
    cache.upsert_run(r)
    cache.upsert_pod(pod("p", uid=NEW), now=None)
    assert not cache.reserve(r, "p", pod_uid=OLD)
    assert cache.reserve(r, "p", pod_uid=NEW)
    a = cache.assumed.get(("ns", r.uid))
    assert a is not None and a.pod_uid == NEW
