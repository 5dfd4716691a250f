"""The emulator's fixtures, for its own tests."""

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from tests.emulator.fixtures import (  # noqa: F401 - fixtures are found by name
    emulator,
    emulator_factory,
    kube_api,
    kube_namespace,
    real_cluster,
)


@pytest.fixture
def core(kube_api: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


@pytest.fixture
def custom(kube_api: ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api)
