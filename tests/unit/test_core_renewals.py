"""Heartbeat renewals are journaled only when a cycle's verdict could depend on them (`scheduler.renewals`).

The property that matters: with renewals held, every cycle's verdicts are exactly
those of a cache that applied every renewal at once; and what a cycle read was
journaled before its snapshot's LSN.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.recording import CountingRecorder
from tests.builders import NOW, plan, pod, run, verdicts

STALE = "runtimed stale"


def renewed(p, seconds: float, version: int):  # type: ignore[no-untyped-def]
    return replace(p, heartbeat=NOW + timedelta(seconds=seconds), resource_version=str(version))


def test_a_renewal_of_a_fresh_pod_is_held_and_not_journaled() -> None:
    cache = ClusterCache(SchedulerConfig(), CountingRecorder())
    p = pod("p")
    cache.upsert_pod(p, now=NOW, event="ADDED")
    before = cache.lsn
    assert cache.upsert_pod(renewed(p, 10, 2), now=NOW + timedelta(seconds=10)) == []
    assert cache.lsn == before and len(cache.renewals) == 1
    assert cache.pod(p.key).heartbeat == NOW  # the applied (journaled) heartbeat


def test_a_cycle_that_would_see_the_applied_heartbeat_stale_applies_the_held_renewal_first() -> None:
    cache = ClusterCache(SchedulerConfig(), CountingRecorder())
    p = pod("p")
    cache.upsert_pod(p, now=NOW, event="ADDED")
    cache.upsert_pod(renewed(p, 25, 2), now=NOW + timedelta(seconds=25))
    cache.upsert_run(run("r"))
    held_at = cache.lsn
    outcome = plan(cache, run("r"), now=NOW + timedelta(seconds=40))
    assert verdicts(outcome) == {"p": None}  # fresh, as the renewal says
    assert cache.pod(p.key).heartbeat == NOW + timedelta(seconds=25)
    assert cache.lsn == held_at + 1 and len(cache.renewals) == 0  # journaled by the cycle's snapshot


def test_a_renewal_of_a_pod_already_stale_is_applied_at_once_and_wakes_parked_runs() -> None:
    cache = ClusterCache(SchedulerConfig(), CountingRecorder())
    p = pod("p", heartbeat=NOW - timedelta(minutes=5))
    cache.upsert_pod(p, now=NOW, event="ADDED")
    r = run("r")
    outcome = plan(cache, r)
    assert verdicts(outcome) == {"p": STALE}
    with cache.lock:
        cache.park(r, cache.wakes(r), Planner(cache.config).wake_events(outcome.rejections))
    before = cache.lsn
    wakeups = cache.upsert_pod(renewed(p, 0, 2), now=NOW)
    assert cache.lsn > before and ("ns", "r") in [key for key, _ in wakeups]


def test_any_other_change_is_applied_at_once_with_the_newest_heartbeat() -> None:
    cache = ClusterCache(SchedulerConfig(), CountingRecorder())
    p = pod("p")
    cache.upsert_pod(p, now=NOW, event="ADDED")
    cache.upsert_pod(renewed(p, 5, 2), now=NOW + timedelta(seconds=5))
    not_ready = replace(renewed(p, 8, 3), ready=False)
    before = cache.lsn
    cache.upsert_pod(not_ready, now=NOW + timedelta(seconds=8))
    assert cache.lsn > before and cache.pod(p.key) == not_ready and len(cache.renewals) == 0


def test_replay_applies_every_journaled_renewal_since_it_passes_no_now() -> None:
    cache = ClusterCache(SchedulerConfig(), CountingRecorder())
    p = pod("p")
    cache.upsert_pod(p, event="ADDED")
    cache.upsert_pod(renewed(p, 10, 2))
    assert cache.pod(p.key).heartbeat == NOW + timedelta(seconds=10) and len(cache.renewals) == 0


def test_with_renewals_held_every_cycle_sees_the_verdicts_of_a_cache_that_applied_them_all() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        held, exact = ClusterCache(SchedulerConfig()), ClusterCache(SchedulerConfig())
        pods = {f"p{i}": pod(f"p{i}") for i in range(4)}
        for p in pods.values():
            held.upsert_pod(p, now=NOW, event="ADDED")
            exact.upsert_pod(p, event="ADDED")
        clock, version = 0.0, 1
        for step in range(60):
            clock += rng.choice([0.5, 3, 9, 14, 31])
            now = NOW + timedelta(seconds=clock)
            if rng.random() < 0.6:
                name = rng.choice(sorted(pods))
                version += 1
                # A renewal sent some time ago (runtimed's clock, a slow write): never in the future.
                pods[name] = renewed(pods[name], clock - rng.choice([0, 2, 12]), version)
                if pods[name].heartbeat < (held.pod(("ns", name)).heartbeat or NOW):
                    continue  # heartbeats only grow
                held.upsert_pod(pods[name], now=now)
                exact.upsert_pod(pods[name])
            else:
                r = run(f"r{step}")
                assert verdicts(plan(held, r, now=now)) == verdicts(plan(exact, r, now=now)), (seed, step)
