"""Pytest fixtures: the API emulator, or a real cluster when ``KRUNTIMES_E2E_KUBECONFIG`` is set.

Another test package gets them with, in its ``conftest.py``::

    from tests.emulator.fixtures import emulator, emulator_factory, kube_api, kube_namespace  # noqa: F401

- ``kube_api``: a ``kubernetes.client.ApiClient`` for the emulator, or for the cluster of
  the kubeconfig in ``KRUNTIMES_E2E_KUBECONFIG`` (which must have the CRDs of
  ``deploy/crds`` applied). Write tests against it when they hold on a real cluster too.
- ``emulator``: the running ``Emulator`` itself, for fault injection and history control;
  skipped, saying why, when the tests run against a real cluster.
- ``emulator_factory(**options)``: more emulators or other options (``history_size``,
  ``bookmark_interval``/``bookmark_lead``, ``grace_scale`` to shorten pod grace periods,
  ``fresh_wait`` before a watch from a future resourceVersion fails, ``crd_dir``); all
  stopped at teardown. The fixtures keep the API server's defaults except the bookmark
  interval.
- ``kube_namespace``: a fresh namespace, deleted afterwards.
- ``real_cluster``: skips (visibly) unless ``KRUNTIMES_E2E_KUBECONFIG`` is set.

Every emulator is stopped after its test, and the test fails if a thread it started is
still alive or the emulator itself raised (``Emulator.errors``). On a real cluster,
create Runtime Pods with a ``schedulerName`` no scheduler serves, so that no kubelet
overwrites the status the test writes.
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any, Callable, Iterator

import kubernetes.client
import kubernetes.config
import pytest

from tests.emulator.server import Emulator

E2E_ENV = "KRUNTIMES_E2E_KUBECONFIG"
# Watches in tests should not wait a minute for a bookmark, as they would on a real server.
TEST_BOOKMARK_INTERVAL = 0.2


def real_cluster_kubeconfig() -> str | None:
    return os.environ.get(E2E_ENV) or None


def api_client_from_kubeconfig(path: str) -> kubernetes.client.ApiClient:
    """A client for the current context of the kubeconfig at ``path``."""
    return kubernetes.config.new_client_from_config(config_file=path)


@pytest.fixture
def emulator_factory() -> Iterator[Callable[..., Emulator]]:
    if real_cluster_kubeconfig():
        pytest.skip(f"needs the API emulator (fault injection or history control); {E2E_ENV} is set, "
                    "so these tests run against a real cluster")
    before = set(threading.enumerate())
    started: list[Emulator] = []

    def start(**options: Any) -> Emulator:
        options.setdefault("bookmark_interval", TEST_BOOKMARK_INTERVAL)
        started.append(Emulator(**options).start())
        return started[-1]

    yield start
    for emulator in started:
        emulator.stop()
    leaked = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leaked == [], f"threads still running after the emulator stopped: {leaked}"
    errors = [error for emulator in started for error in emulator.errors]
    assert errors == [], "the emulator raised:\n" + "\n".join(errors)


@pytest.fixture
def emulator(emulator_factory: Callable[..., Emulator]) -> Emulator:
    return emulator_factory()


@pytest.fixture
def real_cluster() -> str:
    path = real_cluster_kubeconfig()
    if path is None:
        pytest.skip(f"real-cluster test: set {E2E_ENV} to a kubeconfig to run it")
    return path


@pytest.fixture
def kube_api(request: pytest.FixtureRequest) -> Iterator[kubernetes.client.ApiClient]:
    path = real_cluster_kubeconfig()
    if path is not None:
        client = api_client_from_kubeconfig(path)
    else:
        client = request.getfixturevalue("emulator").api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def kube_namespace(kube_api: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"kr-test-{uuid.uuid4().hex[:8]}"
    core = kubernetes.client.CoreV1Api(kube_api)
    core.create_namespace({"metadata": {"name": name}})
    if real_cluster_kubeconfig() is None:
        # As deployed, the scheduler's term fence (SPEC §3.6) names the Lease a test's
        # scheduler takes: the one in the test's namespace.
        request.getfixturevalue("emulator").bind_fence(name)
    yield name
    try:
        core.delete_namespace(name)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise
