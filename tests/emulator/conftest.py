"""The emulator's fixtures, for its own tests."""

from tests.emulator.fixtures import (  # noqa: F401 - fixtures are found by name
    emulator,
    emulator_factory,
    kube_api,
    kube_namespace,
    real_cluster,
)
