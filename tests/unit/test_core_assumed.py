"""The assumed cache (SPEC §3.5): hand-off on observation, idempotent release, atomic reserve."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from kruntimes.scheduler import assumed
from kruntimes.scheduler.projection import Assumption
from tests.builders import assume, cache_of, pod, run

R = run("r", requests={"runs": 2})


def _cache_with_assumption():
    cache = cache_of([pod("p", capacity={"runs": 4}), pod("q", capacity={"runs": 4})])
    assume(cache, R, "p")
    return cache


@pytest.mark.parametrize("observed, kept, usage_p, usage_q", [
    (replace(R, resource_version="2"), True, 2, 0),
    (replace(R, resource_version="3", pending_message="0/2 runtime pods available: 2 insufficient capacity"),
     True, 2, 0),
    (replace(R, phase="Scheduled", pod_name="p", pod_uid="uid-ns-p"), False, 2, 0),
    (replace(R, phase="Running", pod_name="p", pod_uid="uid-ns-p"), False, 2, 0),
    (replace(R, phase="Scheduled", pod_name="p", pod_uid=None), False, 2, 0),
    (replace(R, phase="Scheduled", pod_name="q", pod_uid="uid-ns-q"), False, 0, 2),
    (replace(R, phase="Scheduled", pod_name="p", pod_uid="uid-of-an-older-p"), False, 0, 0),
    (replace(R, phase="Succeeded", pod_name="p", pod_uid="uid-ns-p"), False, 0, 0),
    (replace(R, phase="Failed"), False, 0, 0),
    (replace(R, phase="Running", pod_name="p", pod_uid="uid-ns-p", released=True), False, 0, 0),
    (replace(R, uid="a-new-uid"), False, 0, 0),
    (None, False, 0, 0),
], ids=[
    "kept while observed Pending (the bind may not be visible yet)",
    "kept while observed Pending with a new Pending message",
    "dropped when observed Scheduled on the same pod, without double counting",
    "dropped when observed Running on the same pod, without double counting",
    "dropped when observed on the same pod by name only",
    "dropped when observed on another pod, whose usage takes over",
    "dropped when observed on an older pod of the same name, which counts nowhere",
    "dropped when observed terminal (Succeeded)",
    "dropped when observed terminal (Failed)",
    "dropped when observed released",
    "dropped when the run was recreated under a new uid",
    "dropped when the run is gone",
])
def test_an_assumption_is_handed_off_to_what_the_informer_observes(observed, kept: bool, usage_p: int,
                                                                   usage_q: int) -> None:
    cache = _cache_with_assumption()
    if observed is None:
        cache.delete_run("ns", "r")
    else:
        cache.upsert_run(observed)
    assert (("ns", R.uid) in cache.assumed) is kept
    assert cache.usage("ns", "p").get("runs", 0) == usage_p
    assert cache.usage("ns", "q").get("runs", 0) == usage_q


@pytest.mark.parametrize("observed, why", [
    (None, assumed.DROP_GONE),
    (replace(R, uid="other"), assumed.DROP_GONE),
    (replace(R, phase="Succeeded"), assumed.DROP_TERMINAL),
    (replace(R, phase="Running", pod_name="p", released=True), assumed.DROP_TERMINAL),
    (replace(R, phase="Running", pod_name="p", pod_uid="uid-ns-p"), assumed.DROP_OBSERVED),
    (replace(R, phase="Running", pod_name="p"), assumed.DROP_OBSERVED),
    (replace(R, phase="Running", pod_name="q"), assumed.DROP_ELSEWHERE),
    (replace(R, phase="Running", pod_name="p", pod_uid="older"), assumed.DROP_ELSEWHERE),
    (replace(R, resource_version="9"), None),
], ids=["gone", "recreated", "terminal", "released", "observed by uid", "observed by name",
        "elsewhere", "on an older pod of that name", "still Pending"])
def test_handoff_says_why_an_assumption_leaves(observed, why) -> None:
    a = Assumption(namespace="ns", run_uid=R.uid, run_name="r", pod_name="p", pod_uid="uid-ns-p",
                   requests=R.requests)
    assert assumed.handoff(a, observed) == why


def test_release_is_idempotent() -> None:
    cache = _cache_with_assumption()
    lsn = cache.lsn
    cache.release("ns", R.uid, assumed.RELEASE_BIND_ERROR)
    assert cache.usage("ns", "p") == {}
    assert ("ns", R.uid) not in cache.assumed
    after_first = cache.lsn
    assert after_first > lsn
    assert cache.release("ns", R.uid, assumed.RELEASE_BIND_ERROR) == []
    assert cache.release("ns", "never-assumed", assumed.RELEASE_ABORTED) == []
    assert cache.usage("ns", "p") == {}
    assert cache.lsn == after_first  # a no-op release records nothing


def test_the_assumed_cache_pop_is_idempotent() -> None:
    c = assumed.AssumedCache()
    a = Assumption(namespace="ns", run_uid="u", run_name="r", pod_name="p", pod_uid="pu", requests=(("runs", 1),))
    c.add(a)
    with pytest.raises(ValueError):
        c.add(a)
    assert c.pop(a.key) == a
    assert c.pop(a.key) is None


def test_reserve_rechecks_capacity_against_every_assumption_and_fails_when_the_pod_filled_meanwhile() -> None:
    cache = cache_of([pod("p", capacity={"runs": 2})])
    first, second, third = run("r1"), run("r2"), run("r3")
    for r in (first, second, third):
        cache.upsert_run(r)
    # All three planned on the same snapshot and chose "p"; only two fit.
    assert cache.reserve(first, "p")
    assert cache.reserve(second, "p")
    assert not cache.reserve(third, "p")
    assert cache.usage("ns", "p") == {"runs": 2}
    assert ("ns", third.uid) not in cache.assumed


def test_reserve_refuses_a_resource_the_pod_does_not_declare() -> None:
    cache = cache_of([pod("p", capacity={"runs": 2})])
    r = run("r", requests={"runs": 1, "example.com/gpu": 1})
    cache.upsert_run(r)
    assert not cache.reserve(r, "p")


@pytest.mark.parametrize("change", ["scheduled elsewhere", "deleted", "recreated", "already assumed", "pod gone"])
def test_reserve_refuses_a_run_that_is_no_longer_what_was_planned(change: str) -> None:
    cache = cache_of([pod("p"), pod("q")])
    r = run("r")
    cache.upsert_run(r)
    if change == "scheduled elsewhere":
        cache.upsert_run(replace(r, phase="Scheduled", pod_name="q", pod_uid="uid-ns-q"))
    elif change == "deleted":
        cache.delete_run("ns", "r")
    elif change == "recreated":
        cache.upsert_run(replace(r, uid="new"))
    elif change == "already assumed":
        assert cache.reserve(r, "q")
    elif change == "pod gone":
        cache.delete_pod("ns", "p")
    assert not cache.reserve(r, "p")


def test_concurrent_reserves_never_take_the_same_capacity_twice() -> None:
    cache = cache_of([pod("p", capacity={"runs": 5})])
    runs = [run(f"r{i}") for i in range(40)]
    for r in runs:
        cache.upsert_run(r)
    barrier = threading.Barrier(8)
    won: list[str] = []

    def worker(chunk):
        barrier.wait()
        for r in chunk:
            if cache.reserve(r, "p"):
                won.append(r.name)

    threads = [threading.Thread(target=worker, args=(runs[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 5
    assert cache.usage("ns", "p") == {"runs": 5}


def test_an_assumption_holds_the_runs_full_request() -> None:
    cache = cache_of([pod("p", capacity={"runs": 4, "example.com/gpu": 2})])
    r = run("r", requests={"runs": 1, "example.com/gpu": 2})
    assume(cache, r, "p")
    a = cache.assumed.get(("ns", r.uid))
    assert a is not None and a.requests == (("example.com/gpu", 2), ("runs", 1))
    assert (a.pod_name, a.pod_uid, a.run_name) == ("p", "uid-ns-p", "r")
    assert cache.usage("ns", "p") == {"runs": 1, "example.com/gpu": 2}


def test_a_new_cache_starts_with_no_assumptions_and_counts_only_persisted_assignments() -> None:
    # What a restart or a new leader sees: assumptions are never persisted.
    cache = _cache_with_assumption()
    state = cache.state()
    fresh = cache_of(state["pods"], state["runs"])
    assert len(fresh.assumed) == 0
    assert fresh.usage("ns", "p") == {}
