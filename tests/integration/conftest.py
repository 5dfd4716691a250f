"""Integration tests: the live scheduler through the real `kubernetes` client.

Against the API emulator by default; against a real cluster (the kubeconfig in
``KRUNTIMES_E2E_KUBECONFIG``, CRDs from ``deploy/crds`` applied) when it is set.
Tests that need fault injection take ``emulator`` and skip, saying why, on a cluster.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Iterator

import pytest
from kubernetes.client import ApiClient

from kruntimes.cli import kube_args
from kruntimes.cluster.runner import ClusterScheduler
from kruntimes.scheduler.recording import Recorder
from tests.emulator.fixtures import real_cluster_kubeconfig
from tests.emulator.fixtures import emulator, emulator_factory, kube_api, kube_namespace, real_cluster  # noqa: F401
from tests.integration import cluster


@pytest.fixture
def cluster_api(kube_api: ApiClient, kube_namespace: str) -> cluster.Cluster:
    return cluster.Cluster(kube_api, kube_namespace)


@pytest.fixture
def start_scheduler(kube_api: ApiClient, kube_namespace: str) -> Iterator[Callable[..., ClusterScheduler]]:
    """Start a `ClusterScheduler` on the test's namespace with tiny leases; all stopped at teardown,
    and the test fails if one of their threads is still running."""
    before = set(threading.enumerate())
    started: list[ClusterScheduler] = []

    # A real cluster's kubeconfig carries a token, and the client then installs a refresh hook
    # that a copied configuration cannot run: the binder processes load it themselves, as
    # `kruntimes scheduler` has them do. The emulator's kubeconfig has no credentials.
    real = real_cluster_kubeconfig()
    source = functools.partial(kube_args.load_configuration, real, None) if real else None

    def start(*, api: ApiClient | None = None, recorder: Recorder | None = None,
              **overrides: Any) -> ClusterScheduler:
        scheduler = ClusterScheduler(api or kube_api, cluster.settings(kube_namespace, **overrides),
                                     recorder=recorder, configuration_source=None if api else source)
        started.append(scheduler.start())
        return scheduler

    yield start
    for scheduler in reversed(started):
        scheduler.stop()
    leaked = [t.name for t in threading.enumerate() if t not in before and t.is_alive()
              and t.name.startswith("kruntimes")]
    assert leaked == [], f"scheduler threads still running: {leaked}"
