"""A watch that stays open and says nothing is noticed and resumed (issue 23 item 7).

A proxy or a wedged server can keep a watch's connection open without a byte for
the whole `timeoutSeconds` (300 s). The scheduler then planned on a stale cache:
Runs were bound to a pod deleted meanwhile. Every watch asks for bookmarks, which a
live server sends about once per bookmark interval, so a watch silent for twice
that interval is stalled: the informer ends it and resumes from its last
resourceVersion, with a log line and a metric. The emulator's ``silence`` fault
answers a watch and then sends nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import pytest
from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry

from kruntimes.cluster import sources
from kruntimes.cluster.informer import Informer
from kruntimes.cluster.informer_metrics import InformerMetrics
from kruntimes.cluster.runner import ClusterScheduler
from tests.emulator import faults
from tests.emulator.server import Emulator
from tests.integration.cluster import Cluster, wait_for
from tests.integration.recording import HeldNames

#: The informers' idea of the server's bookmark interval here: the emulator's is 0.2 s.
BOOKMARK_INTERVAL = 0.5


def restarts(registry: CollectorRegistry, kind: str) -> float:
    return registry.get_sample_value("kruntimes_informer_watch_restarts_total",
                                     {"kind": kind, "reason": "silent"}) or 0.0


def test_a_silent_watch_is_restarted_from_its_resource_version_after_twice_the_bookmark_interval(
        emulator: Emulator, kube_api: ApiClient, cluster_api: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    registry, handler = CollectorRegistry(), HeldNames()
    informer = Informer(sources.runtime_pods(kube_api, cluster_api.namespace), handler, watch_timeout=300,
                        bookmark_interval=BOOKMARK_INTERVAL, metrics=InformerMetrics(registry))
    cluster_api.add_pod("python-0")
    with caplog.at_level(logging.WARNING, logger="kruntimes.cluster.informer"):
        informer.start()
        try:
            assert informer.wait_synced(10)
            emulator.silence(faults.watch_of("pods"))
            emulator.drop_watches()  # the watch resumes into the silence
            wait_for(lambda: emulator.faults.fired["silence"] == 1, timeout=10, what="the silent watch")
            cluster_api.add_pod("python-1")  # told by no watch until the silent one is restarted
            wait_for(lambda: handler.names == {"python-0", "python-1"}, timeout=10, what="python-1 delivered")
        finally:
            informer.stop()
    assert informer.stats.stalls == 1 and restarts(registry, "Pod") == 1
    assert informer.stats.lists == 1 and informer.stats.gone == 0  # resumed, not relisted
    assert any(r.getMessage().startswith("Pod watch silent for 1s (no event, no bookmark); restarting it from "
                                         "resourceVersion ") for r in caplog.records)


def test_the_scheduler_does_not_bind_to_a_pod_deleted_while_its_pod_watch_was_silent(
        emulator: Emulator, cluster_api: Cluster, start_scheduler: Callable[..., ClusterScheduler]) -> None:
    cluster_api.add_pod("python-0")
    cluster_api.add_pod("python-1")
    scheduler = start_scheduler(bookmark_interval=BOOKMARK_INTERVAL)
    wait_for(lambda: scheduler.terms.leading, what="the scheduler leading")
    pods = scheduler.informers["Pod"]
    emulator.silence(faults.watch_of("pods"))
    emulator.drop_watches()
    wait_for(lambda: emulator.faults.fired["silence"] == 1, what="the silent pod watch")
    cluster_api.core.delete_namespaced_pod("python-0", cluster_api.namespace)
    # The restart is counted before the resumed watch has delivered the delete: a Run
    # added between the two could still be planned onto python-0, as by any slow watch.
    wait_for(lambda: len(pods) == 1, what="the resumed pod watch delivering the delete")
    assert pods.stats.stalls == 1
    cluster_api.add_run("a")  # python-0 would win the tie, were it still in the cache
    wait_for(lambda: cluster_api.placements() == {"a": "python-1"}, what="a placed on the pod that exists")
    assert restarts(scheduler.registry, "Pod") == 1
