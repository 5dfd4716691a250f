"""Informers (issue 5 item 2): resume, bookmarks, relist on 410 Gone - nothing lost, nothing applied twice.

These need the emulator's fault hooks (dropped watches, compaction, refused requests),
so they skip on a real cluster.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import pytest

from kruntimes.cluster.runner import ClusterScheduler
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for
from tests.integration.recording import MutationLog


def cache_matches_the_api(scheduler: ClusterScheduler, cluster: Cluster) -> bool:
    """The cache holds exactly the API's Runs and Runtime Pods, each at its current version."""
    runs = {(r["metadata"]["name"], r["metadata"]["resourceVersion"]) for r in cluster.runs().values()}
    pods = {(p.metadata.name, p.metadata.resource_version)
            for p in cluster.core.list_namespaced_pod(cluster.namespace).items}
    with scheduler.cache.lock:
        cached_runs = {(r.name, r.resource_version) for r in scheduler.cache.runs()}
        cached_pods = {(p.name, p.resource_version) for p in scheduler.cache.pods()}
    return cached_runs == runs and cached_pods == pods


def block_reads(emulator: Emulator) -> threading.Event:
    """While the returned event is set, every GET of pods or runs (lists and watches) answers 503."""
    blocked = threading.Event()
    emulator.fail_next(10_000, code=503, when=lambda method, path: blocked.is_set() and method == "GET"
                       and (path.endswith("/pods") or path.endswith("/runs")))
    return blocked


def test_a_dropped_watch_resumes_from_its_resource_version_without_a_relist(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    log = MutationLog()
    cluster_api.add_pod("python-0", runs=10)
    scheduler = start_scheduler(recorder=log)
    cluster_api.add_run("a")
    wait_for(lambda: cluster_api.placements() == {"a": "python-0"}, what="a placed")
    lists = scheduler.informers["Run"].stats.lists  # the first one, and the one the term began with
    blocked = block_reads(emulator)
    blocked.set()
    emulator.drop_watches(abrupt=True)
    cluster_api.add_run("b")          # happens while no watch is open
    cluster_api.finish("a")
    blocked.clear()
    wait_for(lambda: cluster_api.placements() == {"b": "python-0"}, what="b placed after the reconnect")
    runs = scheduler.informers["Run"].stats
    assert runs.lists == lists and runs.gone == 0 and runs.errors >= 1
    assert wait_for(lambda: cache_matches_the_api(scheduler, cluster_api), what="the cache equal to the API")
    assert log.applied_twice() == []


def test_410_gone_relists_and_delivers_only_the_difference(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    log = MutationLog()
    cluster_api.add_pod("python-0", runs=2)
    cluster_api.add_pod("python-1", runs=2)
    cluster_api.add_pod("python-2", runs=2, ready=False)
    scheduler = start_scheduler(recorder=log)
    for name in ("a", "b", "c"):
        cluster_api.add_run(name)
    wait_for(lambda: len(cluster_api.placements()) == 3, what="a, b and c placed")
    blocked = block_reads(emulator)
    blocked.set()
    emulator.drop_watches(abrupt=True)
    # While the scheduler is blind: a Run is deleted, one finishes, one is created, a pod
    # goes away; then the history is compacted, so resuming the watches is 410 Gone.
    cluster_api.delete_run("a")
    cluster_api.finish("b")
    cluster_api.add_run("d")
    cluster_api.core.delete_namespaced_pod("python-2", cluster_api.namespace)
    emulator.compact()
    blocked.clear()
    wait_for(lambda: "d" in cluster_api.placements(), what="d placed")
    for kind in ("Run", "Pod"):  # lists: the first, the term's, the one after the 410
        stats = scheduler.informers[kind].stats
        wait_for(lambda: stats.gone >= 1 and stats.lists >= 3, what=f"the {kind} informer relisted after 410")
    assert wait_for(lambda: cache_matches_the_api(scheduler, cluster_api), what="the cache equal to the API")
    assert log.applied_twice() == []
    assert log.events_of("Run", "c") == ["ADDED", "MODIFIED"]  # created, then bound: no relist re-applied it
    assert log.events_of("Run", "a")[-1] == "DELETED"
    assert log.events_of("Run", "b")[-1] == "MODIFIED" and log.events_of("Run", "d")[0] == "ADDED"
    assert log.events_of("Pod", "python-2") == ["ADDED", "DELETED"]


def test_bookmarks_keep_a_quiet_watch_fresh_so_a_reconnect_after_compaction_needs_no_relist(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    scheduler = start_scheduler(leader_elect=False)  # no lease renewals: the test makes every write
    assert scheduler.wait_synced(30)
    runtimes = scheduler.informers["Runtime"]
    cluster_api.add_pod("python-0")  # writes move the one global resourceVersion; no Runtime changes
    written = emulator.store.resource_version  # (the emulator's versions are integers; a client never compares them)
    wait_for(lambda: int(runtimes.resource_version or 0) >= written,
             what="a bookmark carrying a resourceVersion past those writes")
    assert runtimes.stats.bookmarks >= 1 and runtimes.stats.events == 0
    emulator.compact()
    emulator.drop_watches()
    wait_for(lambda: runtimes.stats.watches >= 2, what="the Runtime watch resumed")
    assert runtimes.stats.gone == 0 and runtimes.stats.lists == 1  # Runtimes are not relisted by a new term


def test_a_throttled_list_is_retried_by_the_informer_no_sooner_than_retry_after(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler],
        caplog: pytest.LogCaptureFixture) -> None:
    run_lists = lambda method, path: method == "GET" and path.endswith("/runs")  # noqa: E731
    emulator.throttle(run_lists, retry_after=1)
    cluster_api.add_pod("python-0", runs=1)
    with caplog.at_level(logging.WARNING, logger="kruntimes.cluster.informer"):
        scheduler = start_scheduler()  # backoff_max 0.5 s: only Retry-After makes the wait 1 s
        wait_for(lambda: scheduler.informers["Run"].synced, what="the Run informer synced after the 429")
    assert any("429" in r.getMessage() and "retrying in 1.00s" in r.getMessage() for r in caplog.records)
    assert scheduler.informers["Run"].stats.errors == 1
    assert emulator.faults.fired["throttle"] == 1
